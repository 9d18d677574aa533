"""The demo release's frozen matrix: real reference rows, scored in the pinned environment.

`python -m tests.tools.demo_frozen` scores the rows with replay in the evaluator container; these
tests read what it froze: the rows and their coverage, the canonical fields and environment of
every line, the oracle's and the empty row's scores, and that retrieval-copy copied dev code
chosen by the documented similarity. The Docker test scores a handful of the frozen responses
again and gets the same categories and structural flags.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

import evaluator
from engine.demo import DEMO_RELEASE_DIR
from engine.release import load_release
from engine.replay.compare import compare
from engine.replay.evaluations import MODEL_CATEGORIES
from evaluator.schema import REQUIRED_FIELDS
from tests.conftest import BASE_IMAGE, ROOT, _wheelhouse
from tests.tools import demo_frozen as frozen

RELEASE = load_release(DEMO_RELEASE_DIR)
PROMPTS = {p.prompt_id: p for p in RELEASE.prompts}
ALL_IDS = [p.prompt_id for p in RELEASE.prompts]
TEST_IDS = [p.prompt_id for p in RELEASE.prompts if p.split == "test"]
DEV_IDS = {p.prompt_id for p in RELEASE.prompts if p.split == "dev"}
MATRIX = json.loads((DEMO_RELEASE_DIR / "frozen/matrix.json").read_text(encoding="utf-8"))
MANIFEST = json.loads((DEMO_RELEASE_DIR / "release.json").read_text(encoding="utf-8"))
ROWS = {label: RELEASE.frozen_evaluations(label) for label in frozen.LABELS}
FLAGS = (
    "category",
    "execution_ok",
    "circuit_found",
    "structural_match",
    "width_match",
    "gate_types_match",
    "gate_counts_match",
    "qasm3_ok",
    "equivalent",
    "structure",
)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _pins_of_requirements_txt() -> list[str]:
    text = (ROOT / "evaluator/requirements.txt").read_text(encoding="utf-8")
    return [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# --- the matrix ------------------------------------------------------------------------


def test_the_matrix_holds_the_three_reference_rows() -> None:
    rows = MATRIX["rows"]
    assert [r["label"] for r in rows] == ["oracle", "retrieval-copy", "empty"]
    for row in rows:
        assert row["kind"] == "reference"
        assert row["provider"] is None and row["model"] is None
        assert row["evaluations"] == f"frozen/{row['label']}.evaluations.jsonl"
        assert row["evaluations"] in MANIFEST["files"]
        assert row["description"]
    assert {r["label"]: r["split"] for r in rows} == {
        "oracle": "all",
        "retrieval-copy": "test",
        "empty": "all",
    }
    assert [r.label for r in RELEASE.matrix_rows] == ["oracle", "retrieval-copy", "empty"]


def test_each_row_covers_its_prompts_in_release_order() -> None:
    assert [e["prompt_id"] for e in ROWS["oracle"]] == ALL_IDS
    assert [e["prompt_id"] for e in ROWS["empty"]] == ALL_IDS
    assert [e["prompt_id"] for e in ROWS["retrieval-copy"]] == TEST_IDS
    assert len(ALL_IDS) == MANIFEST["prompts"]["count"] and len(TEST_IDS) == 70


def test_every_line_is_canonical_and_scored_in_the_pinned_environment() -> None:
    pins = dict(pin.split("==", 1) for pin in _pins_of_requirements_txt())
    pins = {_norm(name): version for name, version in pins.items()}
    for label, evaluations in ROWS.items():
        for ev in evaluations:
            where = f"{label}/{ev['prompt_id']}"
            missing = [f for f in REQUIRED_FIELDS if f not in ev]
            assert not missing, (where, missing)
            assert ev["category"] in MODEL_CATEGORIES, where  # no infrastructure failure
            assert ev["structural_match"] == (
                ev["width_match"] and ev["gate_types_match"] and ev["gate_counts_match"]
            ), where
            assert ev["equivalent"] in (True, False, None), where
            assert ev["evaluator_version"] == evaluator.__version__, where
            env = ev["environment"]
            assert env["qiskit"] == pins["qiskit"], where
            for key, version in env.items():
                if _norm(key) in pins:
                    assert version == pins[_norm(key)], (where, key)
            assert set(ev["response_source"]) >= {"kind", "prompt_id", "sha256"}, where


def test_the_files_are_replay_lines_with_sorted_keys() -> None:
    for label in frozen.LABELS:
        raw = (DEMO_RELEASE_DIR / f"frozen/{label}.evaluations.jsonl").read_bytes()
        for line in raw.splitlines():
            obj = json.loads(line)
            assert json.dumps(obj, sort_keys=True, ensure_ascii=False).encode() == line


def test_the_oracle_scores_everything() -> None:
    for ev in ROWS["oracle"]:
        pid = ev["prompt_id"]
        assert ev["category"] == "ok", pid
        assert ev["execution_ok"] is True and ev["structural_match"] is True, pid
        assert ev["qasm3_ok"] is True and ev["equivalent"] is True, pid
        source = ev["response_source"]
        assert source["kind"] == "reference_code" and source["prompt_id"] == pid
        assert source["sha256"] == _sha256(PROMPTS[pid].target_metadata["reference_code"])


def test_the_empty_row_is_all_no_code() -> None:
    for ev in ROWS["empty"]:
        assert ev["category"] == "no_code", ev["prompt_id"]
        assert ev["execution_ok"] is False and ev["structural_match"] is False
        assert ev["response_source"] == {"kind": "empty", "prompt_id": None, "sha256": _sha256("")}


def test_retrieval_copy_copies_the_nearest_dev_prompts_code() -> None:
    picks = frozen.nearest_dev(RELEASE.prompts)
    assert sorted(picks) == sorted(TEST_IDS)
    dev_texts = {pid: frozen.prompt_text(PROMPTS[pid]) for pid in sorted(DEV_IDS)}
    index = frozen.DevIndex(dev_texts)
    for ev in ROWS["retrieval-copy"]:
        pid, source = ev["prompt_id"], ev["response_source"]
        copied = source["prompt_id"]
        assert copied in DEV_IDS, (pid, copied)
        assert source["kind"] == "reference_code"
        assert source["sha256"] == _sha256(PROMPTS[copied].target_metadata["reference_code"])
        # what frozen.py chose is what the exposed similarity picks today
        assert copied == picks[pid].prompt_id, pid
        assert source["similarity"] == pytest.approx(picks[pid].similarity, abs=1e-12)
        # and no dev prompt is strictly more similar (ties go to the smallest prompt_id)
        text = frozen.prompt_text(PROMPTS[pid])
        scores = {d: round(index.similarity(text, d), 12) for d in dev_texts}
        best = max(scores.values())
        assert scores[copied] == best
        assert copied == min(d for d, s in scores.items() if s == best)


def test_similarity_ties_go_to_the_smallest_prompt_id() -> None:
    index = frozen.DevIndex(
        {"b": "prepare a ghz state", "a": "prepare a ghz state", "c": "adder of two bits"}
    )
    assert index.nearest("Prepare a GHZ state.") == frozen.Match("a", 1.0)
    assert index.nearest("nothing shared") == frozen.Match("a", 0.0)
    assert index.similarity("adder of two bits", "c") == pytest.approx(1.0)


def test_row_responses_rebuild_what_was_frozen() -> None:
    for label in frozen.LABELS:
        responses = frozen.row_responses(RELEASE.prompts, label)
        assert [r["prompt_id"] for r in responses] == [e["prompt_id"] for e in ROWS[label]]
        for response, ev in zip(responses, ROWS[label], strict=True):
            assert response["response_source"]["sha256"] == _sha256(response["content"])
            assert response["response_source"] == ev["response_source"]


def test_other_matrix_rows_are_kept() -> None:
    model_row = {
        "label": "some-model",
        "kind": "model",
        "provider": "p",
        "model": "m",
        "evaluations": "frozen/some-model.evaluations.jsonl",
    }
    old_empty = {"label": "empty", "kind": "reference", "evaluations": "frozen/empty.x"}
    rows = frozen.matrix_rows([model_row, old_empty], ["oracle"])
    assert [r["label"] for r in rows] == ["oracle", "empty", "some-model"]
    assert rows[1] == old_empty and rows[2] == model_row


# --- the release pins the environment --------------------------------------------------


def test_release_json_pins_the_evaluator_requirements() -> None:
    pins = _pins_of_requirements_txt()
    assert pins and all(re.fullmatch(r"[A-Za-z0-9._-]+==\S+", p) for p in pins)
    assert MANIFEST["evaluator"] == {"version": evaluator.__version__, "requirements": pins}
    assert RELEASE.evaluator_requirements == tuple(pins)
    assert RELEASE.evaluator_version == evaluator.__version__


def test_the_frozen_matrix_compares_cleanly_on_the_test_split() -> None:
    candidate = DEMO_RELEASE_DIR / "frozen/oracle.evaluations.jsonl"
    data = compare(RELEASE, candidate, split="test").data
    assert data["publishable"] is True, data["not_publishable_reasons"]
    rates = {r["label"]: r["summary"]["rates"] for r in data["rows"]}
    assert rates["oracle"]["structural_match"]["over_selected"]["count"] == 70
    assert rates["empty"]["execution"]["over_selected"]["count"] == 0
    assert all(r["summary"]["infrastructure_failures"]["count"] == 0 for r in data["rows"])


# --- reproducible: score some frozen responses again -----------------------------------


def _sample(label: str, count: int) -> list[str]:
    """Prompt IDs of a row, one per category first (so every outcome is re-scored), then
    evenly spread over the rest."""
    evaluations = ROWS[label]
    chosen: list[str] = []
    for category in MODEL_CATEGORIES:
        chosen += [e["prompt_id"] for e in evaluations if e["category"] == category][:1]
    rest = [e["prompt_id"] for e in evaluations if e["prompt_id"] not in chosen]
    step = max(1, len(rest) // max(1, count - len(chosen)))
    chosen += rest[::step][: max(0, count - len(chosen))]
    return chosen[:count]


@pytest.mark.docker
@pytest.mark.parametrize(("label", "count"), [("retrieval-copy", 6), ("oracle", 4)])
def test_frozen_responses_score_the_same_again(
    docker_client: Any, tmp_path: Path, label: str, count: int
) -> None:
    from engine.replay.docker import DockerEvaluatorRunner
    from engine.replay.replay import replay

    ids = _sample(label, count)
    assert len(ids) == count
    frozen_by_id = {e["prompt_id"]: e for e in ROWS[label]}
    responses = [r for r in frozen.row_responses(RELEASE.prompts, label) if r["prompt_id"] in ids]
    for r in responses:  # exactly the responses that were frozen
        assert r["response_source"] == frozen_by_id[r["prompt_id"]]["response_source"]
    path = tmp_path / "responses.jsonl"
    path.write_text(
        "".join(
            json.dumps({"prompt_id": r["prompt_id"], "content": r["content"]}) + "\n"
            for r in responses
        ),
        encoding="utf-8",
    )
    runner = DockerEvaluatorRunner(
        base_image=BASE_IMAGE,
        client=docker_client,
        wheelhouse=_wheelhouse(),
        requirements=RELEASE.evaluator_requirements,
    )
    result = replay(
        DEMO_RELEASE_DIR,
        path,
        tmp_path / "out",
        acknowledge_code_execution=True,
        build_image=True,
        runner=runner,
    )
    assert [e["prompt_id"] for e in result.evaluations] == [i for i in ALL_IDS if i in ids]
    for ev in result.evaluations:
        before = frozen_by_id[ev["prompt_id"]]
        assert {f: ev[f] for f in FLAGS} == {f: before[f] for f in FLAGS}, ev["prompt_id"]
        assert ev["evaluator_version"] == before["evaluator_version"]
        # The replay records more about its image (id, every package) than the frozen rows
        # kept; what they kept must be the same.
        assert {k: ev["environment"].get(k) for k in before["environment"]} == before["environment"]
