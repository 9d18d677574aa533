"""The evaluator protocol driver, on the host (no Docker): restarts, kills, limits, forgeries.

Scripted stand-in evaluators make each failure happen on cue; the last test speaks to the real
evaluator. LocalEvaluatorRunner exists for these tests only; the product never runs it.
"""

from __future__ import annotations

import signal
import socket
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from engine.errors import EvaluatorFailed
from engine.replay.docker import (
    EvaluationItem,
    EvaluatorConfig,
    LocalEvaluatorRunner,
    _FrameReader,
)
from tests.helpers import prompt_line

# A stand-in evaluator. Each item's generated_code is an instruction: "ok", "die" (SIGKILL
# itself while the item is in progress), "hang", "forge" (claim a result for another prompt).
# PAIR=1 announces items two at a time before scoring them, as a parallel evaluator would.
STANDIN = textwrap.dedent("""
    import json, os, signal, sys, time
    def out(m):
        sys.stdout.write(json.dumps(m) + "\\n"); sys.stdout.flush()
    lines = [json.loads(l) for l in sys.stdin]
    assert lines[0]["type"] == "config"
    items = lines[1:]
    if os.environ.get("MODE") == "fatal":
        out({"type": "fatal", "message": "line 2: bad item"}); sys.exit(2)
    if os.environ.get("MODE") == "crash":
        sys.exit(3)
    out({"type": "hello", "evaluator_version": "standin", "environment": {"qiskit": "0"}})
    step = 2 if os.environ.get("PAIR") else 1
    for start in range(0, len(items), step):
        group = items[start:start + step]
        for i, it in enumerate(group):
            out({"type": "started", "prompt_id": it["prompt_id"], "index": start + i,
                 "total": len(items)})
        for it in group:
            code = it["generated_code"]
            if code == "die":
                os.kill(os.getpid(), signal.SIGKILL)
            if code == "hang":
                time.sleep(60)
            if code == "forge":
                out({"type": "evaluation", "evaluation": {"prompt_id": "zz", "category": "ok"}})
            out({"type": "evaluation", "evaluation": {"prompt_id": it["prompt_id"],
                 "category": "ok", "execution_ok": True, "seen": it["target_metadata"]}})
    out({"type": "done", "count": len(items)})
""")


@pytest.fixture
def standin(tmp_path: Path) -> list[str]:
    script = tmp_path / "standin.py"
    script.write_text(STANDIN)
    return [sys.executable, str(script)]


def items(*codes: str) -> list[EvaluationItem]:
    return [EvaluationItem(f"p{i}", None, code, {"n": i}) for i, code in enumerate(codes)]


def run(
    command: list[str],
    its: list[EvaluationItem],
    env: dict[str, str] | None = None,
    wall: float | None = None,
) -> tuple[Any, list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []
    runner = LocalEvaluatorRunner(command, env=env, wall_clock_seconds=wall)
    return runner.run(its, EvaluatorConfig(timeout_seconds=5), seen.append), seen


def test_all_items_scored_in_one_session(standin: list[str]) -> None:
    outcome, seen = run(standin, items("ok", "ok", "ok"))
    assert sorted(outcome.evaluations) == ["p0", "p1", "p2"] and outcome.sessions == 1
    assert outcome.evaluations["p1"]["seen"] == {"n": 1}
    assert outcome.evaluations["p1"]["evaluator_version"] == "standin"
    assert [m["type"] for m in seen] == ["started", "evaluation"] * 3
    assert [m["index"] for m in seen if m["type"] == "started"] == [0, 1, 2]


def test_a_response_that_kills_the_evaluator_cannot_take_the_others_down(
    standin: list[str],
) -> None:
    outcome, seen = run(standin, items("ok", "die", "ok", "ok"))
    assert sorted(outcome.evaluations) == ["p0", "p1", "p2", "p3"]
    killed = outcome.evaluations["p1"]
    assert killed["category"] == "execution_error" and killed["evaluator_killed"]
    assert "evaluator was killed" in killed["error"] and "signal 9" in killed["error"]
    assert outcome.killed == ["p1"] and outcome.sessions == 2
    assert outcome.evaluations["p3"]["category"] == "ok"
    synthesized = [m for m in seen if m.get("synthesized")]
    assert [m["evaluation"]["prompt_id"] for m in synthesized] == ["p1"]


def test_items_in_progress_together_are_retried_alone_to_find_the_culprit(
    standin: list[str],
) -> None:
    outcome, _ = run(standin, items("ok", "ok", "ok", "die", "ok"), env={"PAIR": "1"})
    cats = {pid: ev["category"] for pid, ev in outcome.evaluations.items()}
    assert cats == {"p0": "ok", "p1": "ok", "p2": "ok", "p3": "execution_error", "p4": "ok"}
    assert outcome.killed == ["p3"]


def test_the_wall_clock_limit_turns_the_rest_into_infrastructure_failures(
    standin: list[str],
) -> None:
    t0 = time.monotonic()
    outcome, _ = run(standin, items("ok", "hang", "ok"), wall=3)
    assert time.monotonic() - t0 < 15
    assert list(outcome.evaluations) == ["p0"]
    assert sorted(outcome.not_evaluated) == ["p1", "p2"]
    assert "wall-clock limit of 3 s" in outcome.not_evaluated["p1"]


def test_forged_results_for_other_prompts_are_ignored(standin: list[str]) -> None:
    outcome, _ = run(standin, items("forge", "ok"))
    assert sorted(outcome.evaluations) == ["p0", "p1"]


def test_an_evaluator_that_refuses_its_input_or_never_starts_is_an_error(
    standin: list[str],
) -> None:
    with pytest.raises(EvaluatorFailed, match="refused its input: line 2: bad item"):
        run(standin, items("ok"), env={"MODE": "fatal"})
    with pytest.raises(
        EvaluatorFailed, match=r"stopped before evaluating anything \(exit status 3"
    ):
        run(standin, items("ok"), env={"MODE": "crash"})


def test_duplicate_items_are_a_programming_error(standin: list[str]) -> None:
    with pytest.raises(ValueError, match="distinct prompt IDs"):
        run(standin, [*items("ok"), *items("ok")])


def test_the_real_evaluator_speaks_the_protocol_on_the_host() -> None:
    meta = prompt_line("ghz_03", 3)["target_metadata"]
    reference = meta["reference_code"]
    its = [
        EvaluationItem("right", f"Here it is:\n```python\n{reference}```\n", None, meta),
        EvaluationItem("empty", "I cannot help with that.", None, meta),
        EvaluationItem("crash", None, "raise SystemExit(3)", meta),
    ]
    outcome = LocalEvaluatorRunner().run(its, EvaluatorConfig(timeout_seconds=10))
    cats = {pid: ev["category"] for pid, ev in outcome.evaluations.items()}
    assert cats["right"] == "ok" and cats["empty"] == "no_code"
    assert cats["crash"] == "execution_error"
    assert outcome.evaluator_version and outcome.environment.get("qiskit")
    right = outcome.evaluations["right"]
    assert right["structural_match"] and right["qasm3_ok"] and right["equivalent"] is True
    # What the evaluator says about its own time is kept beside the evaluations, not in them.
    (startup,) = outcome.startup_timing
    assert startup["ready_at"] >= startup["started_at"] > 0
    assert startup["executor"]["qiskit_import_seconds"] > 0
    assert set(outcome.item_timing) == {"right", "empty", "crash"}
    assert outcome.item_timing["right"]["child_ms"] > 0
    assert outcome.item_timing["right"]["grade_ms"] > 0
    assert outcome.item_timing["empty"]["child_ms"] is None
    assert "timing" not in right and "child_ms" not in right


def test_a_ctrl_c_handed_to_another_thread_still_stops_the_container_read() -> None:
    """The kernel may hand a process's SIGINT to any of its threads (the stdin feeder, the
    wall-clock timer), which interrupts no system call of the main thread; the main thread's
    read of a silent container still ends in KeyboardInterrupt, not at the container's next
    output (here 30 s later; in a replay, the evaluator's wall-clock limit)."""
    ours, theirs = socket.socketpair()
    reader = _FrameReader(ours)

    done = threading.Event()

    def elsewhere() -> None:
        time.sleep(0.3)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # to this thread only
        if not done.wait(30):
            theirs.sendall(bytes([1, 0, 0, 0, 0, 0, 0, 1]) + b"x")  # the old code's way out

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    helper = threading.Thread(target=elsewhere, daemon=True)
    started = time.monotonic()
    try:
        helper.start()
        with pytest.raises(KeyboardInterrupt):
            next(reader.stdout_chunks())
        waited = time.monotonic() - started
    finally:
        done.set()
        helper.join()
        signal.signal(signal.SIGINT, previous)
        ours.close()
        theirs.close()
    assert waited < 10, f"the read ended {waited:.1f} s after the signal, with the next output"
