"""Summaries of canonical evaluations: denominators, infrastructure failures, the renderings."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from engine.errors import InputError
from engine.replay.evaluations import (
    CATEGORIES,
    infrastructure_evaluation,
    load_evaluations,
    mcnemar_exact_p,
    paired,
    render_summary,
    summarize,
)

_EXECUTED = {"no_circuit", "width_mismatch", "gate_type_mismatch", "gate_count_mismatch", "ok"}


def make_eval(
    pid: str, category: str = "ok", *, version: str = "0.1.0", qiskit: str = "2.6.2", **fields: Any
) -> dict[str, Any]:
    """A canonical evaluation as the evaluator writes it, consistent with its category."""
    if category in ("no_response", "not_evaluated"):
        return infrastructure_evaluation(pid, category, "test", **fields)
    executed = category in _EXECUTED
    found = executed and category != "no_circuit"
    ok = category == "ok"
    ev: dict[str, Any] = {
        "prompt_id": pid,
        "category": category,
        "execution_ok": executed,
        "circuit_found": found,
        "structural_match": ok,
        "width_match": found and category != "width_mismatch",
        "gate_types_match": ok or category == "gate_count_mismatch",
        "gate_counts_match": ok,
        "qasm3_ok": found,
        "equivalent": ok if found else None,
        "error": None if executed else f"{category}: test",
        "duration_ms": 5,
        "evaluator_version": version,
        "environment": {"python": "3.11.2", "qiskit": qiskit, "qiskit_aer": "0.18.2"},
    }
    ev.update(fields)
    return ev


def mixed() -> list[dict[str, Any]]:
    return [
        make_eval("a"),
        make_eval("b"),
        make_eval("c", "execution_error"),
        make_eval("d", "gate_count_mismatch"),
        make_eval("e", "no_response"),
    ]


def test_rates_over_selected_and_over_answered() -> None:
    s = summarize(mixed())
    assert (s["selected"], s["answered"]) == (5, 4)
    assert s["rates"]["execution"]["over_selected"] == {"count": 3, "denominator": 5, "rate": 0.6}
    assert s["rates"]["execution"]["over_answered"] == {"count": 3, "denominator": 4, "rate": 0.75}
    assert s["rates"]["structural_match"]["over_selected"]["count"] == 2
    assert s["rates"]["qasm3_export"]["over_answered"] == {
        "count": 3,
        "denominator": 4,
        "rate": 0.75,
    }
    assert s["rates"]["equivalence"]["over_selected"]["count"] == 2
    assert s["rates"]["equivalence"]["not_checked"] == 1  # the execution error
    assert s["infrastructure_failures"] == {
        "count": 1,
        "denominator": 5,
        "rate": 0.2,
        "by_category": {"no_response": 1},
    }
    assert list(s["categories"]) == list(CATEGORIES)
    assert s["categories"]["ok"] == 2 and s["categories"]["no_response"] == 1
    assert sum(s["categories"].values()) == 5
    assert s["evaluator_version"] == "0.1.0" and s["environment"]["qiskit"] == "2.6.2"
    assert "finish_reasons" not in s


def test_a_selected_prompt_without_evaluation_is_missing_not_dropped() -> None:
    s = summarize(mixed(), selected=["a", "b", "zz"])
    assert s["selected"] == 3 and s["answered"] == 2
    assert s["categories"]["missing"] == 1
    assert s["rates"]["execution"]["over_selected"] == {
        "count": 2,
        "denominator": 3,
        "rate": 0.666667,
    }
    assert s["infrastructure_failures"]["by_category"] == {"missing": 1}


def test_empty_denominators_have_no_rate() -> None:
    s = summarize([make_eval("a", "no_response")])
    assert s["rates"]["execution"]["over_answered"] == {"count": 0, "denominator": 0, "rate": None}
    assert s["evaluator_version"] is None
    assert "0/0 -" in render_summary(s, "text")


def test_finish_reasons_break_down_outcomes() -> None:
    evs = [
        make_eval("a", finish_reason="stop"),
        make_eval("b", "syntax_error", finish_reason="length"),
        make_eval("c", finish_reason="stop"),
        make_eval("d", "no_response"),
    ]
    s = summarize(evs)
    assert s["finish_reasons"] == {
        "(none)": {"count": 1, "execution": 0, "structural_match": 0},
        "length": {"count": 1, "execution": 0, "structural_match": 0},
        "stop": {"count": 2, "execution": 2, "structural_match": 2},
    }
    assert "finish reasons" in render_summary(s, "text")


def test_several_environments_are_reported_not_merged() -> None:
    s = summarize([make_eval("a"), make_eval("b", qiskit="2.6.1")])
    assert s["evaluator_version"] is None and s["environment"] is None
    assert [e["environment"]["qiskit"] for e in s["environments"]] == ["2.6.2", "2.6.1"]
    assert "several environments" in render_summary(s, "text")


def test_renderings_carry_the_same_numbers() -> None:
    s = summarize(mixed())
    s["release"] = {"name": "r", "version": "1", "digest": "ab" * 32, "modified": False}
    text = render_summary(s, "text")
    assert "3/5 60.0%" in text and "3/4 75.0%" in text and "abababababababab" in text
    assert "no_response" in text and "infrastructure" in text
    md = render_summary(s, "markdown")
    assert "| execution | 3/5 60.0% | 3/4 75.0% |" in md
    rows = list(csv.DictReader(io.StringIO(render_summary(s, "csv"))))
    got = {(r["section"], r["name"], r["scope"]): r for r in rows}
    assert got[("rate", "execution", "selected")]["count"] == "3"
    assert got[("rate", "execution", "answered")]["denominator"] == "4"
    assert got[("category", "no_response", "selected")]["rate"] == "0.2"
    assert got[("infrastructure", "all", "selected")]["count"] == "1"
    assert json.loads(render_summary(s, "json")) == s
    with pytest.raises(ValueError, match="unknown format"):
        render_summary(s, "html")


def test_paired_differences_and_mcnemar() -> None:
    cand = {
        e["prompt_id"]: e
        for e in [make_eval("a"), make_eval("b"), make_eval("c", "execution_error")]
    }
    row = {
        e["prompt_id"]: e
        for e in [make_eval("a"), make_eval("b", "width_mismatch"), make_eval("c")]
    }
    p = paired(cand, row, ["a", "b", "c", "d"], "structural_match")
    assert (p["both"], p["candidate_only"], p["row_only"], p["neither"]) == (1, 1, 1, 1)
    assert p["candidate_only_ids"] == ["b"] and p["row_only_ids"] == ["c"]
    assert p["difference"] == 0 and p["mcnemar_exact_p"] == 1.0
    assert mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(5, 0) == pytest.approx(0.0625)
    assert mcnemar_exact_p(10, 2) == mcnemar_exact_p(2, 10) == pytest.approx(0.038574, abs=1e-6)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"{not json", r":2: not a JSON line"),
        (b"[1, 2]", r":2: expected a JSON object"),
        (b'{"category": "ok"}', r":2: no prompt_id"),
        (b'{"prompt_id": "a", "category": "ok"}', r":2: prompt 'a' repeats line 1"),
        (b'{"prompt_id": "zz", "category": "ok"}', r":2: prompt 'zz' is not in the release"),
        (b'{"prompt_id": "b", "category": "great"}', r":2: unknown category 'great'"),
    ],
)
def test_an_unusable_evaluation_line_refuses_the_file(
    tmp_path: Path, line: bytes, message: str
) -> None:
    path = tmp_path / "e.jsonl"
    path.write_bytes(json.dumps(make_eval("a")).encode() + b"\n" + line + b"\n")
    with pytest.raises(InputError, match=message):
        load_evaluations(path, known_ids=["a", "b"])
