"""The evaluator benchmark's arithmetic, against a fake runner (no Docker, no evaluator)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest

from engine.errors import PqidError
from engine.replay.docker import EvaluationItem, EvaluatorConfig, LineCallback, RunOutcome
from tests.bench.replay import bench_container


class _FakeRunner:
    """Scores every item ok after a short pause, reporting the timings an evaluator would."""

    def __init__(self, *, sessions: int = 1) -> None:
        self.sessions = sessions

    def run(
        self,
        items: Sequence[EvaluationItem],
        config: EvaluatorConfig,
        on_line: LineCallback | None = None,
    ) -> RunOutcome:
        assert on_line is not None
        started_at = time.time()
        time.sleep(0.05)  # the container starting
        outcome = RunOutcome(sessions=self.sessions)
        outcome.startup_timing.append(
            {
                "started_at": started_at,
                "ready_at": time.time(),
                "executor": {"qiskit_import_seconds": 0.02, "preload_seconds": 0.03},
                "grader": {"import_seconds": 0.025},
            }
        )
        for index, item in enumerate(items):
            on_line({"type": "started", "prompt_id": item.prompt_id, "index": index})
            time.sleep(0.01)
            evaluation: dict[str, Any] = {
                "prompt_id": item.prompt_id,
                "category": "ok",
                "equivalent": True,
            }
            outcome.evaluations[item.prompt_id] = evaluation
            outcome.item_timing[item.prompt_id] = {
                "child_ms": 8.0,
                "snippet_ms": 1.0,
                "grade_ms": 6.0,
            }
            on_line({"type": "evaluation", "evaluation": evaluation, "index": index})
        return outcome


def _items(count: int) -> list[EvaluationItem]:
    return [EvaluationItem(f"p{i}", None, "x = 1", {}) for i in range(count)]


def test_the_ideal_is_start_plus_one_import_plus_own_work_over_the_cores() -> None:
    figures = bench_container(_FakeRunner(), _items(10), 2.0)  # type: ignore[arg-type]
    assert figures["n"] == 10 and figures["ok"] == 10 and figures["equivalent"] == 10
    assert figures["child_s"] == pytest.approx(0.08) and figures["grade_s"] == pytest.approx(0.06)
    assert figures["own_s"] == pytest.approx(0.14)
    assert figures["snippet_s"] == pytest.approx(0.01)
    assert figures["qiskit_import_s"] == 0.02 and figures["grader_import_s"] == 0.025
    expected_ideal = figures["container_start_s"] + 0.02 + 0.14 / 2
    assert figures["ideal_s"] == pytest.approx(expected_ideal)
    assert figures["ideal_ratio"] == pytest.approx(figures["wall_s"] / expected_ideal)
    assert figures["ideal_ratio_with_teardown"] >= figures["ideal_ratio"]
    # The fake spends 10 ms per item in one thread against an ideal of 7 ms.
    assert figures["ideal_ratio"] > 1
    assert 0 <= figures["container_start_s"] < figures["ready_s"] < figures["wall_s"]
    assert figures["eval_s"] < figures["wall_s"]


def test_figures_need_exactly_one_container() -> None:
    with pytest.raises(PqidError, match="2 containers ran"):
        bench_container(_FakeRunner(sessions=2), _items(2), 2.0)  # type: ignore[arg-type]
