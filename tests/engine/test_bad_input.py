"""Property-based tests: every malformed input is one clear error and changes nothing.

Each property counts the examples it tried; `pytest -m slow -s tests/engine/test_bad_input.py`
runs many more and prints the figure for the README.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import make_config, run_live_model
from engine.errors import ProviderError, UsageError
from engine.providers.adapters import ADAPTERS
from engine.release import load_release
from pqid_tui.textsafe import escape_controls
from tests.conftest import cli
from tests.helpers import prompt_line, tree_bytes, write_release

EXAMPLES = int(os.environ.get("PQID_HYPOTHESIS_EXAMPLES", "150"))
TRIED: dict[str, int] = {}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
relaxed = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def tried(name: str) -> None:
    TRIED[name] = TRIED.get(name, 0) + 1


def only_usage_errors(fn: Callable[[], Any]) -> None:
    """Run fn: it may succeed or raise a UsageError; anything else is a traceback."""
    try:
        fn()
    except UsageError as exc:
        assert str(exc).strip() and "\n" not in str(exc).strip()


@pytest.fixture(scope="module")
def base_release() -> Any:
    root = Path(tempfile.mkdtemp(prefix="pqid-bad-input-"))
    write_release(root / "release", count=3)
    yield root / "release"
    shutil.rmtree(root)


def mutated_copy(base: Path) -> Path:
    target = Path(tempfile.mkdtemp(prefix="pqid-mut-")) / "release"
    shutil.copytree(base, target)
    return target


@relaxed
@given(
    manifest=json_values
    | st.fixed_dictionaries(
        {
            "format": st.just("pqid-release/1"),
            "name": json_values,
            "version": json_values,
            "prompts": json_values,
            "files": json_values,
            "evaluator": json_values,
        }
    )
)
def test_release_manifest(base_release: Path, manifest: Any) -> None:
    root = mutated_copy(base_release)
    (root / "release.json").write_text(json.dumps(manifest))
    before = tree_bytes(root)
    only_usage_errors(lambda: load_release(root))
    assert tree_bytes(root) == before
    shutil.rmtree(root.parent)
    tried("release manifests")


@relaxed
@given(
    line=json_values
    | st.fixed_dictionaries(
        {
            "prompt_id": json_values,
            "split": json_values,
            "messages": json_values,
            "target_metadata": json_values,
        }
    )
    | st.binary(max_size=60).map(lambda b: b.decode("latin-1"))
)
def test_prompt_lines(tmp_path_factory: pytest.TempPathFactory, line: Any) -> None:
    root = tmp_path_factory.mktemp("r")
    good = [json.dumps(prompt_line("a", 2)), json.dumps(prompt_line("b", 3))]
    text = line if isinstance(line, str) and not line.startswith("{") else json.dumps(line)
    write_release(root, lines=[prompt_line("a", 2)])
    data = "\n".join([good[0], text.replace("\n", " "), good[1]]) + "\n"
    (root / "prompts.jsonl").write_text(data)
    manifest = json.loads((root / "release.json").read_text())
    import hashlib

    manifest["prompts"].update(sha256=hashlib.sha256(data.encode()).hexdigest(), count=None)
    (root / "release.json").write_text(json.dumps(manifest))
    only_usage_errors(lambda: load_release(root))
    tried("prompt lines")


@relaxed
@given(
    status=st.sampled_from([200, 201, 400, 401, 404, 429, 500, 503, 529]),
    body=st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()),
    adapter=st.sampled_from(sorted(ADAPTERS)),
    retry_after=st.none() | st.text(max_size=30),
)
def test_provider_bodies(status: int, body: bytes, adapter: str, retry_after: str | None) -> None:
    headers = {"content-type": "application/json"}
    if retry_after is not None:
        headers["retry-after"] = retry_after
    try:
        reply = ADAPTERS[adapter].parse(status, headers, body)
    except ProviderError as exc:
        assert exc.error_class and exc.message
    else:
        assert reply.content is None or isinstance(reply.content, str)
    tried("provider bodies")


@relaxed
@given(record=json_values, attempts_line=json_values, responses_line=json_values)
def test_run_records(
    tmp_path_factory: pytest.TempPathFactory,
    base_release: Path,
    record: Any,
    attempts_line: Any,
    responses_line: Any,
) -> None:
    out = tmp_path_factory.mktemp("run")
    cfg = dict(release_dir=base_release, output_dir=out, provider="oracle", model="r")
    run_live_model(make_config(**cfg))
    (out / "records" / "ghz_01.json").write_text(json.dumps(record))
    with (out / "provider-attempts.jsonl").open("a") as fh:
        fh.write(json.dumps(attempts_line) + "\n")
    with (out / "responses.jsonl").open("a") as fh:
        fh.write(json.dumps(responses_line) + "\n")
    before = tree_bytes(out)
    try:
        run_live_model(make_config(**cfg, resume=True, retry_uncertain=True))
    except UsageError as exc:
        assert str(exc).strip()
        assert tree_bytes(out) == before, "a refused resume changed the run directory"
    tried("run records")


@relaxed
@given(text=st.text(max_size=200))
def test_escape_controls(text: str) -> None:
    shown = escape_controls(text)
    assert not any((ord(c) < 0x20 and c not in "\t\n") or 0x7F <= ord(c) <= 0x9F for c in shown)
    assert "\x1b" not in shown and "\x9b" not in shown
    if all(c in "\t\n" or (ord(c) >= 0x20 and not 0x7F <= ord(c) <= 0x9F) for c in text):
        assert shown == text
    tried("terminal escapes")


@relaxed
@given(
    text=st.text(max_size=400)
    | st.sampled_from(
        [
            "```python\nimport qiskit\n",
            "~~~\nx = 1\n~~~",
            "```\n```",
            "```py\n" * 50,
            "Here:\n```python\nqc = 1\n```\nand\n```python\nqc = 2\n```",
        ]
    )
)
def test_code_extraction(text: str) -> None:
    from evaluator.extract import extract_code

    result = extract_code(text)
    assert isinstance(result.code, str) and result.method
    tried("code extraction")


def test_batch_mode_exit_code_two_for_corrupt_record(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=2)
    out = tmp_path / "run"
    assert (
        cli(
            "--batch",
            "run-model",
            "--release-dir",
            str(release),
            "--output-dir",
            str(out),
            "--provider",
            "oracle",
            "--quiet",
        ).returncode
        == 0
    )
    (out / "records" / "ghz_00.json").write_text("{half")
    before = tree_bytes(out)
    result = cli(
        "--batch",
        "run-model",
        "--release-dir",
        str(release),
        "--output-dir",
        str(out),
        "--provider",
        "oracle",
        "--resume",
    )
    assert result.returncode == 2 and "corrupt record" in result.stderr
    assert "Traceback" not in result.stderr and tree_bytes(out) == before


def test_zz_report_figure() -> None:
    total = sum(TRIED.values())
    print(
        f"bad input: {total} examples tried ({', '.join(f'{k} {v}' for k, v in TRIED.items())})"
        ", 0 tracebacks"
    )
    assert total > 0
