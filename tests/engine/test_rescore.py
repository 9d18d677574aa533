"""Rescoring the frozen study: agreement with its cells, the pinned environment, the command.

The unit tests build small releases and cells by hand and use a scripted runner (no Docker).
The Docker tests rescore real archived response sets of PQID-Bench v1.0.0 in its pinned
environment (Python 3.13, `pqid_bench_image`) and need the evaluator's PQID-Bench contract
to be exact: they pass only when every frozen verdict is reproduced.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from engine.errors import EnvironmentMismatch, InputError, UsageError
from engine.release import (
    CONTRACT_PQID_BENCH,
    FORMAT_PQID_BENCH_EVIDENCE,
    PREDICATE_PQID_BENCH,
    FrozenRow,
    Prompt,
    Release,
    load_release,
)
from engine.replay.docker import (
    DockerEvaluatorRunner,
    EvaluationItem,
    EvaluatorConfig,
    RunOutcome,
)
from engine.replay.environment import (
    SOURCE_PROJECT,
    SOURCE_RELEASE,
    EnvironmentPin,
    environment_differences,
    environments_dir,
    hello_facts,
    read_pin_file,
    release_environment,
)
from engine.replay.replay import read_responses
from engine.replay.rescore import (
    ENDPOINTS,
    Agreement,
    RescoreProgress,
    compare_cells,
    render,
    rescore,
    responses_path,
    select_rows,
)
from tests.conftest import cli

ALL_TRUE = {key: True for _, key in ENDPOINTS}
EXECUTED_NO_MATCH = {**ALL_TRUE, "report_signature_match": False, "gate_types_match": False}
FAILED = {key: False for _, key in ENDPOINTS}


def cell(pid: str, verdicts: dict[str, bool], error_type: str | None = None) -> dict[str, Any]:
    return {
        "prompt_id": pid,
        **verdicts,
        "execution_error_type": error_type,
        "error": f"{error_type}: boom" if error_type else None,
        "category": "ok" if verdicts.get("report_signature_match") else "execution_error",
    }


# -- the agreement computation, on hand-made cells ------------------------------------------


def test_identical_cells_agree_on_every_endpoint() -> None:
    frozen = {"p1": cell("p1", ALL_TRUE), "p2": cell("p2", FAILED, "NameError")}
    result = compare_cells("m", frozen, {k: dict(v) for k, v in frozen.items()})
    assert result.cells == 2 and result.full and not result.disagreements
    assert all(result.agree[name] == 2 for name, _ in ENDPOINTS)
    assert result.frozen_true["execution"] == result.new_true["execution"] == 1


def test_a_cell_that_differs_is_listed_with_both_verdicts_and_errors() -> None:
    frozen = {"p1": cell("p1", EXECUTED_NO_MATCH), "p2": cell("p2", ALL_TRUE)}
    new = {"p1": cell("p1", EXECUTED_NO_MATCH), "p2": cell("p2", FAILED, "NameError")}
    result = compare_cells("m", frozen, new, ["p1", "p2"])
    assert not result.full
    assert result.agree == {
        "execution": 1,
        "assembly": 1,
        "signature": 1,
        "num_qubits": 1,
        "num_clbits": 1,
        "gate_count": 1,
        "gate_types": 1,
    }
    (d,) = result.disagreements
    assert d["model"] == "m" and d["prompt_id"] == "p2"
    assert d["endpoints"] == [name for name, _ in ENDPOINTS]
    assert d["frozen"]["execution"] is True and d["new"]["execution"] is False
    assert d["frozen_error_type"] is None and d["new_error_type"] == "NameError"
    assert d["new_error"] == "NameError: boom"
    assert result.error_type_disagreements == 1


def test_only_the_differing_component_is_named() -> None:
    frozen = {"p1": cell("p1", ALL_TRUE)}
    new = {
        "p1": cell("p1", {**ALL_TRUE, "gate_count_match": False, "report_signature_match": False})
    }
    (d,) = compare_cells("m", frozen, new).disagreements
    assert d["endpoints"] == ["signature", "gate_count"]


def test_a_cell_on_one_side_only_disagrees_everywhere() -> None:
    result = compare_cells("m", {"p1": cell("p1", FAILED)}, {"p2": cell("p2", FAILED)})
    assert result.cells == 2
    assert all(result.agree[name] == 0 for name, _ in ENDPOINTS)
    missing_new = next(d for d in result.disagreements if d["prompt_id"] == "p1")
    assert missing_new["new"] is None and missing_new["frozen"]["execution"] is False


def test_a_missing_or_null_verdict_is_a_false_one() -> None:
    frozen = {"p1": {"prompt_id": "p1", **FAILED}}
    new = {"p1": {"prompt_id": "p1"}}  # no verdict fields at all: nothing was established
    assert compare_cells("m", frozen, new).full


def test_totals_pool_the_models() -> None:
    total = Agreement("total")
    total.add(compare_cells("a", {"p": cell("p", ALL_TRUE)}, {"p": cell("p", ALL_TRUE)}))
    total.add(compare_cells("b", {"p": cell("p", ALL_TRUE)}, {"p": cell("p", FAILED)}))
    assert total.cells == 2 and total.agree["execution"] == 1
    assert total.frozen_true["execution"] == 2 and total.new_true["execution"] == 1
    assert [d["model"] for d in total.disagreements] == ["b"]


# -- the pinned environment -----------------------------------------------------------------

STUDY_PINS = ("qiskit==2.1.1", "qiskit-aer==0.17.0", "python-dateutil==2.9.0.post0")


def test_the_study_pins_select_the_complete_pqid_bench_environment() -> None:
    pin = release_environment(STUDY_PINS, "3.13")
    assert pin.source == "evaluator/environments/pqid-bench-1.0.0.txt" and pin.python == "3.13"
    pins = pin.pins
    assert {k: pins[k] for k in ("qiskit", "qiskit-aer", "python-dateutil")} == {
        "qiskit": "2.1.1",
        "qiskit-aer": "0.17.0",
        "python-dateutil": "2.9.0.post0",
    }
    # Everything a verdict can depend on is pinned exactly, the drawer's libraries included.
    assert {"numpy", "scipy", "rustworkx", "matplotlib", "pylatexenc"} <= set(pins)
    python, lines = read_pin_file(environments_dir() / "pqid-bench-1.0.0.txt")
    assert python == "3.13" and all("==" in line for line in lines)


def test_pins_of_another_python_or_version_are_taken_as_the_release_gives_them() -> None:
    assert release_environment(STUDY_PINS, "3.11").source == SOURCE_RELEASE
    other = release_environment(("qiskit==2.1.0",), "3.13")
    assert other.source == SOURCE_RELEASE and other.requirements == ("qiskit==2.1.0",)
    assert release_environment(None, None).source == SOURCE_PROJECT


def test_environment_differences_name_python_versions_and_extras() -> None:
    pin = EnvironmentPin("3.13", ("qiskit==2.1.1", "numpy==2.5.1"), "test")
    same = {"python": "3.13.5", "packages": {"qiskit": "2.1.1", "numpy": "2.5.1"}, "complete": True}
    assert environment_differences(pin, same) == []
    other = {
        "python": "3.11.2",
        "packages": {"qiskit": "2.1.1", "numpy": "2.4.6", "matplotlib": "3.11.1"},
        "complete": True,
    }
    assert environment_differences(pin, other) == [
        "python 3.11.2 where the release pins 3.13",
        "numpy 2.4.6 where the release pins 2.5.1",
        "matplotlib 3.11.1 is installed but not pinned",
    ]
    assert environment_differences(pin, {"python": "3.13.1", "packages": {}, "complete": True}) == [
        "numpy is not installed; the release pins 2.5.1",
        "qiskit is not installed; the release pins 2.1.1",
    ]


def test_the_evaluators_hello_says_nothing_about_packages_it_does_not_name() -> None:
    pin = EnvironmentPin("3.13", ("qiskit==2.1.1", "numpy==2.5.1"), "test")
    facts = hello_facts({"python": "3.13.5", "qiskit": "2.1.1", "qiskit_aer": "0.17.0"})
    assert environment_differences(pin, facts) == []
    facts = hello_facts({"python": "3.13.5", "qiskit": "2.6.2"})
    assert environment_differences(pin, facts) == ["qiskit 2.6.2 where the release pins 2.1.1"]


class _NoEngine:
    """Stands in for a Docker client where a test never reaches the engine."""


def test_a_release_pinning_python_gets_that_pythons_image_by_default() -> None:
    runner = DockerEvaluatorRunner(client=_NoEngine(), python_version="3.13")
    assert runner.base_image == "python:3.13-slim"
    assert DockerEvaluatorRunner(client=_NoEngine()).base_image == "python:3.11-slim"


def test_a_base_image_with_another_python_is_refused_unless_accepted() -> None:
    runner = DockerEvaluatorRunner(
        client=_NoEngine(), base_image="pqid-base:bookworm", python_version="3.13"
    )
    with pytest.raises(
        EnvironmentMismatch,
        match=r"Python 3\.13.*has Python 3\.11\.2.*"
        r"--allow-environment-mismatch",
    ):
        runner._check_python({"python": "3.11.2"})
    runner._check_python({"python": "3.13.5"})
    accepting = DockerEvaluatorRunner(
        client=_NoEngine(),
        base_image="pqid-base:bookworm",
        python_version="3.13",
        allow_environment_mismatch=True,
    )
    accepting._check_python({"python": "3.11.2"})
    assert accepting.environment_notes and "3.11.2" in accepting.environment_notes[0]


# -- rescore with a scripted runner ---------------------------------------------------------


def _prompt(pid: str) -> Prompt:
    return Prompt(
        pid,
        "test",
        ({"role": "user", "content": "build it"},),
        {"num_qubits": 2, "num_clbits": 0, "gate_count": 2, "gate_types": {"h": 1}},
        row_id=f"row-{pid}",
        label="strict_n8",
    )


def study_release(
    root: Path, frozen: dict[str, list[dict[str, Any]]], responses: dict[str, list[dict[str, Any]]]
) -> Release:
    """A hand-made evidence-shaped release: the study's layout, frozen cells given directly."""
    rows = []
    for label in frozen:
        report = f"batch/evaluations/{label}/report.json"
        (root / report).parent.mkdir(parents=True, exist_ok=True)
        (root / report).write_text("{}")
        rows.append(
            FrozenRow(
                label,
                "model",
                "prov",
                label,
                report,
                display_name=label.upper(),
                contract=CONTRACT_PQID_BENCH,
            )
        )
    (root / "batch" / "responses").mkdir(parents=True, exist_ok=True)
    for label, lines in responses.items():
        (root / "batch" / "responses" / f"{label}_responses.jsonl").write_text(
            "".join(json.dumps(line) + "\n" for line in lines)
        )
    return Release(
        root=root,
        name="study",
        version="1",
        digest="d" * 64,
        prompts_sha256="p" * 64,
        modified=False,
        prompts=tuple(_prompt(f"p{i}") for i in range(1, 4)),
        matrix_rows=tuple(rows),
        evaluator_version=CONTRACT_PQID_BENCH,
        evaluator_requirements=STUDY_PINS,
        format=FORMAT_PQID_BENCH_EVIDENCE,
        contract=CONTRACT_PQID_BENCH,
        predicate=PREDICATE_PQID_BENCH,
        python_version="3.13",
        cells_loader=lambda release, row: [dict(c) for c in frozen[row.label]],
    )


class ScriptedRunner:
    """Scores by the code's text: `ok` runs and matches, `half` runs without matching."""

    def __init__(self, facts: dict[str, Any] | None = None) -> None:
        self.runs: list[tuple[list[EvaluationItem], EvaluatorConfig]] = []
        self.facts = facts

    def ensure_image(self, *, build: bool, progress: Any = None) -> str:
        return "scripted:image"

    def environment_facts(self) -> dict[str, Any] | None:
        return self.facts

    def run(
        self, items: Sequence[EvaluationItem], config: EvaluatorConfig, on_line: Any = None
    ) -> RunOutcome:
        self.runs.append((list(items), config))
        outcome = RunOutcome(environment={"python": "3.13.5", "qiskit": "2.1.1"})
        for index, item in enumerate(items):
            code = item.generated_code or ""
            verdicts = ALL_TRUE if code == "ok" else EXECUTED_NO_MATCH if code == "half" else FAILED
            evaluation = cell(
                item.prompt_id, verdicts, None if code in ("ok", "half") else "NameError"
            )
            outcome.evaluations[item.prompt_id] = evaluation
            if on_line is not None:
                on_line(
                    {
                        "type": "evaluation",
                        "evaluation": evaluation,
                        "index": index,
                        "total": len(items),
                    }
                )
        return outcome


def _line(pid: str, **fields: Any) -> dict[str, Any]:
    return {"prompt_id": pid, "raw_response": "ok", "finish_reason": "stop", **fields}


@pytest.fixture
def two_models(tmp_path: Path) -> Release:
    frozen = {
        "alpha": [
            cell("p1", ALL_TRUE),
            cell("p2", EXECUTED_NO_MATCH),
            cell("p3", FAILED, "NameError"),
        ],
        "beta": [cell("p1", ALL_TRUE), cell("p2", ALL_TRUE), cell("p3", ALL_TRUE)],
    }
    responses = {
        "alpha": [
            _line("p1", generated_code="ok"),
            _line("p2", generated_code="half"),
            # a raw provider body is never code: this one is an empty generation
            _line("p3", generated_code=""),
        ],
        "beta": [
            _line("p1", generated_code="ok"),
            # another code field of the study's channel, read when generated_code is empty
            _line("p2", generated_code="", code="ok"),
            # the harness keeps a prompt's last line
            _line("p3", generated_code="broken"),
            _line("p3", generated_code="ok"),
        ],
    }
    return study_release(tmp_path / "release", frozen, responses)


def test_rescore_scores_every_set_in_one_run_under_the_release_contract(
    two_models: Release, tmp_path: Path
) -> None:
    runner = ScriptedRunner()
    events: list[object] = []
    result = rescore(
        two_models,
        acknowledge_code_execution=True,
        runner=runner,
        output_dir=tmp_path / "out",
        progress=events.append,
    )
    ((items, config),) = runner.runs  # one evaluator run (one container) for both models
    assert config.contract == CONTRACT_PQID_BENCH
    assert [i.prompt_id for i in items] == [
        "alpha/p1",
        "alpha/p2",
        "alpha/p3",
        "beta/p1",
        "beta/p2",
        "beta/p3",
    ]
    by_id = {i.prompt_id: i for i in items}
    assert by_id["beta/p2"].generated_code == "ok" and by_id["beta/p3"].generated_code == "ok"
    assert by_id["alpha/p3"].generated_code is None and by_id["alpha/p3"].content is None
    report = result.report
    alpha, beta = report["models"]
    assert alpha["full_agreement"] and beta["full_agreement"]
    assert beta["superseded_lines"] == {"p3": [3]}
    assert report["totals"]["endpoints"]["execution"] == {
        "agree": 6,
        "of": 6,
        "frozen_true": 5,
        "new_true": 5,
    }
    assert report["contract"] == CONTRACT_PQID_BENCH
    assert report["predicate"] == PREDICATE_PQID_BENCH
    progress = [e for e in events if isinstance(e, RescoreProgress)]
    assert [(e.label, e.model_done, e.model_total, e.done, e.total) for e in progress][-1] == (
        "beta",
        3,
        3,
        6,
        6,
    )
    written = json.loads((tmp_path / "out" / "rescore.json").read_text())
    assert written["totals"]["full_agreement"] is True
    cells = [
        json.loads(x)
        for x in (tmp_path / "out" / "evaluations" / "alpha.jsonl").read_text().splitlines()
    ]
    assert [c["prompt_id"] for c in cells] == ["p1", "p2", "p3"]
    assert cells[0]["contract"] == CONTRACT_PQID_BENCH
    assert cells[0]["environment"]["python"] == "3.13.5"


def test_rescore_lists_every_disagreeing_cell(two_models: Release) -> None:
    frozen_beta = two_models.frozen_evaluations("beta")
    frozen_beta[2] = cell("p3", FAILED, "SyntaxError")
    release = study_release(
        two_models.root,
        {"alpha": two_models.frozen_evaluations("alpha"), "beta": frozen_beta},
        {
            "beta": [
                _line("p1", generated_code="ok"),
                _line("p2", generated_code="ok"),
                _line("p3", generated_code="ok"),
            ]
        },
    )
    result = rescore(
        release, acknowledge_code_execution=True, runner=ScriptedRunner(), models=["BETA"]
    )  # by display name
    report = result.report
    assert [m["label"] for m in report["models"]] == ["beta"]
    (d,) = report["disagreements"]
    assert (d["model"], d["prompt_id"], d["frozen_error_type"]) == ("beta", "p3", "SyntaxError")
    assert d["frozen"]["execution"] is False and d["new"]["execution"] is True
    text = render(report, "text")
    assert "disagreeing cells: 1" in text and "SyntaxError" in text
    assert "| beta | p3 |" in render(report, "markdown")


def test_the_environment_is_recorded_and_a_different_one_says_so(two_models: Release) -> None:
    facts = {
        "python": "3.11.2",
        "packages": {"qiskit": "2.1.1"},
        "complete": True,
        "image": "scripted:image",
        "image_id": "sha256:abc",
    }
    report = rescore(
        two_models, acknowledge_code_execution=True, models=["alpha"], runner=ScriptedRunner(facts)
    ).report
    assert report["environment_matches_release"] is False
    assert "python 3.11.2 where the release pins 3.13" in report["environment_differences"]
    assert report["environment_pin"]["source"] == "evaluator/environments/pqid-bench-1.0.0.txt"
    assert report["evaluation_environment"]["image_id"] == "sha256:abc"
    assert "NO: python 3.11.2" in render(report, "text")


def test_a_responses_file_in_the_study_format_is_scored_alone(
    two_models: Release, tmp_path: Path
) -> None:
    own = two_models.root / responses_path(two_models, two_models.row("alpha"))
    report = rescore(
        two_models, acknowledge_code_execution=True, responses=own, runner=ScriptedRunner()
    ).report
    assert report["models"][0]["label"] == "alpha" and report["totals"]["full_agreement"]
    foreign = tmp_path / "mine_responses.jsonl"
    foreign.write_text(json.dumps(_line("p1", generated_code="ok")) + "\n")
    report = rescore(
        two_models, acknowledge_code_execution=True, responses=foreign, runner=ScriptedRunner()
    ).report
    (model,) = report["models"]
    assert model["label"] == "mine" and model["verdicts"]["execution"] == 1
    assert report["totals"] is None and "not compared" in render(report, "text")


def test_a_frozen_harness_report_can_be_named(two_models: Release, tmp_path: Path) -> None:
    responses = tmp_path / "x_responses.jsonl"
    responses.write_text(json.dumps(_line("p1", generated_code="ok")) + "\n")
    report_path = tmp_path / "report.json"
    report_path.write_text(
        json.dumps(
            {
                "records": [
                    {
                        "prompt_id": "p1",
                        "empty_generation": False,
                        "execution_mode": "strict_standalone",
                        "execution": {
                            "execution_success": True,
                            "circuit_found": True,
                            "qasm3_export": {"success": True},
                        },
                        "structural_checks": {
                            "num_qubits_match": True,
                            "num_clbits_match": True,
                            "gate_count_match": True,
                            "gate_types_match": False,
                            "all_match": False,
                        },
                    }
                ]
            }
        )
    )
    report = rescore(
        two_models,
        acknowledge_code_execution=True,
        responses=responses,
        frozen_report=report_path,
        runner=ScriptedRunner(),
    ).report
    (d,) = report["disagreements"]
    assert d["endpoints"] == ["signature", "gate_types"]


def test_rescore_refuses_what_it_cannot_do(two_models: Release, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--acknowledge-code-execution"):
        rescore(two_models, acknowledge_code_execution=False, runner=ScriptedRunner())
    with pytest.raises(UsageError, match="--frozen-report needs --responses"):
        rescore(
            two_models,
            acknowledge_code_execution=True,
            frozen_report=tmp_path / "r",
            runner=ScriptedRunner(),
        )
    with pytest.raises(InputError, match=r"no frozen model row.*alpha, beta"):
        select_rows(two_models, ["gamma"])
    with pytest.raises(InputError, match="does not exist"):
        rescore(
            two_models,
            acknowledge_code_execution=True,
            responses=tmp_path / "none.jsonl",
            runner=ScriptedRunner(),
        )
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(InputError, match="holds no response lines"):
        rescore(
            two_models,
            acknowledge_code_execution=True,
            responses=tmp_path / "empty.jsonl",
            runner=ScriptedRunner(),
        )


def test_repeated_prompts_keep_the_last_line_only_under_the_study_contract(
    two_models: Release, tmp_path: Path
) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(
        "".join(json.dumps(_line("p1", generated_code=c)) + "\n" for c in ("a", "b", "c"))
    )
    (line,) = read_responses(path, two_models)
    assert line.generated_code == "c" and line.superseded == (1, 2) and line.line == 3
    with pytest.raises(InputError, match="repeats line 1"):
        read_responses(path, two_models, last_wins=False)


def test_the_study_code_channel_is_the_reply_text(two_models: Release, tmp_path: Path) -> None:
    """Under the study's contract the code is the model's reply: a pqid-tui run line's
    `content` (its `generated_code` is pqid-tui's own extraction, which the study never
    applied), else the first study field with text; a raw provider body is never code."""
    path = tmp_path / "r.jsonl"
    lines = [
        {
            "prompt_id": "p1",
            "content": "```python\nqc = 1\n```\nand prose",
            "generated_code": "qc = 1",
        },
        {
            "prompt_id": "p2",
            "generated_code": "",
            "code": "",
            "completion": "x = 2",
            "raw_response": '{"choices": []}',
        },
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    first, second = read_responses(path, two_models)
    assert first.generated_code == lines[0]["content"]
    assert second.generated_code == "x = 2"


def test_the_command_refuses_without_acknowledgement(tmp_path: Path) -> None:
    done = cli("--batch", "rescore", "--release-dir", str(tmp_path))
    assert done.returncode == 2 and "--acknowledge-code-execution" in done.stderr
    assert "Traceback" not in done.stderr
    done = cli(
        "--batch",
        "rescore",
        "--release-dir",
        str(tmp_path),
        "--frozen-report",
        "x",
        "--acknowledge-code-execution",
    )
    assert done.returncode == 2 and "--frozen-report needs --responses" in done.stderr


# -- the real thing: PQID-Bench v1.0.0's archived responses, in its pinned environment --------

# Llama 3.1 8B Instant: verdicts moved under the built-in correction (print, reversed).
# Qiskit Mistral: a repeated prompt line (the last one counts) and `draw('mpl')` calls.
# GPT-OSS 120B: four `draw('mpl')` calls, which execute only with matplotlib and pylatexenc.
THREE = (
    "groq_llama-3_1-8b-instant",
    "huggingface_router_qiskit_mistral-small-3_2-24b-qiskit_featherless-ai",
    "groq_openai_gpt-oss-120b",
)


def _evidence_runner(
    docker_client: Any, release: Release, base_image: str, **kwargs: Any
) -> DockerEvaluatorRunner:
    from engine.replay.replay import evaluator_runner
    from tests.conftest import WHEELHOUSE_PY313

    pin = release_environment(release.evaluator_requirements, release.python_version)
    runner = evaluator_runner(
        pin,
        base_image=base_image,
        wheelhouse=WHEELHOUSE_PY313 if any(WHEELHOUSE_PY313.glob("*.whl")) else None,
        client=docker_client,
        **kwargs,
    )
    return runner


@pytest.mark.docker
def test_three_frozen_models_are_rescored_in_full_agreement(
    pqid_bench: Any, pqid_bench_image: str, docker_client: Any
) -> None:
    from tests.conftest import PQID_BENCH_BASE_IMAGE

    release = load_release(pqid_bench.evidence)
    runner = _evidence_runner(docker_client, release, PQID_BENCH_BASE_IMAGE)
    result = rescore(release, acknowledge_code_execution=True, models=list(THREE), runner=runner)
    report = result.report
    assert report["image"] == pqid_bench_image
    assert report["environment_matches_release"] is True, report["environment_differences"]
    assert report["evaluation_environment"]["python"].startswith("3.13.")
    assert report["containers"] == 1 and report["not_evaluated"] == 0
    shown = json.dumps(report["disagreements"][:10], indent=1)
    assert report["disagreements"] == [], shown
    for model in report["models"]:
        assert model["cells"] == 154
        assert all(e["agree"] == 154 for e in model["endpoints"].values()), model["label"]


@pytest.mark.docker
def test_the_command_rescores_one_archived_file(
    pqid_bench: Any, pqid_bench_image: str, tmp_path: Path
) -> None:
    from tests.conftest import PQID_BENCH_BASE_IMAGE, WHEELHOUSE_PY313

    evidence = pqid_bench.evidence
    responses = (
        evidence / "artifacts/external_model_batches_154/responses/"
        "groq_llama-3_3-70b-versatile_responses.jsonl"
    )
    args = [
        "--batch",
        "rescore",
        "--release-dir",
        str(evidence),
        "--responses",
        str(responses),
        "--base-image",
        PQID_BENCH_BASE_IMAGE,
        "--format",
        "json",
        "--output-dir",
        str(tmp_path / "out"),
        "--acknowledge-code-execution",
    ]
    if any(WHEELHOUSE_PY313.glob("*.whl")):
        args += ["--wheelhouse", str(WHEELHOUSE_PY313)]
    done = cli(*args, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["models"][0]["label"] == "groq_llama-3_3-70b-versatile"
    assert report["totals"]["full_agreement"] is True
    assert "[154/154] groq_llama-3_3-70b-versatile: 154/154 done" in done.stderr
    assert (tmp_path / "out" / "evaluations" / "groq_llama-3_3-70b-versatile.jsonl").is_file()


@pytest.mark.docker
def test_a_base_image_with_another_python_is_refused_before_building(
    pqid_bench: Any, docker_client: Any
) -> None:
    from tests.conftest import BASE_IMAGE

    release = load_release(pqid_bench.evidence)
    runner = _evidence_runner(docker_client, release, BASE_IMAGE)  # Debian bookworm: 3.11
    with pytest.raises(EnvironmentMismatch, match=r"Python 3\.13.*has Python 3\.11"):
        rescore(
            release,
            acknowledge_code_execution=True,
            models=[THREE[0]],
            runner=runner,
            build_image=True,
        )


@pytest.mark.docker
@pytest.mark.slow
def test_the_whole_frozen_matrix_is_rescored_in_full_agreement(
    pqid_bench: Any, pqid_bench_image: str, docker_client: Any
) -> None:
    from tests.conftest import PQID_BENCH_BASE_IMAGE

    release = load_release(pqid_bench.evidence)
    runner = _evidence_runner(docker_client, release, PQID_BENCH_BASE_IMAGE)
    report = rescore(release, acknowledge_code_execution=True, runner=runner).report
    assert len(report["models"]) == 21
    assert report["disagreements"] == [], json.dumps(report["disagreements"][:10], indent=1)
    endpoints = report["totals"]["endpoints"]
    assert all(e["agree"] == e["of"] == 3234 for e in endpoints.values())
    assert [endpoints[n]["new_true"] for n in ("execution", "assembly", "signature")] == [
        2950,
        2944,
        1703,
    ]
    assert report["environment_matches_release"] is True
