"""`--batch run-model` progress: one updating line on a terminal, one line per event elsewhere."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, cli


def run_on_a_terminal(*args: str, timeout: float = 120) -> tuple[int, str, str]:
    """Run `pqid-tui` with stderr on a pseudo-terminal; (exit code, stdout, stderr text)."""
    leader, follower = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pqid_tui", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=follower,
        stdin=subprocess.DEVNULL,
    )
    os.close(follower)
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([leader], [], [], timeout)
        if not ready:
            proc.kill()
            raise AssertionError("no output from the run within the timeout")
        try:
            data = os.read(leader, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert proc.stdout is not None
    with proc.stdout:
        out = proc.stdout.read().decode()
    code = proc.wait(timeout=timeout)
    return code, out, b"".join(chunks).decode()


def test_a_terminal_gets_one_updating_progress_line(release_dir: Path, tmp_path: Path) -> None:
    code, out, err = run_on_a_terminal(
        "--batch",
        "run-model",
        "--release-dir",
        str(release_dir),
        "--provider",
        "oracle",
        "--concurrency",
        "1",
        "--limit",
        "4",
        "--output-dir",
        str(tmp_path / "run"),
    )
    assert code == 0, err
    assert '"success": 4' in out
    # Redrawn in place (carriage return, erase line), never one line per request.
    assert "\r\x1b[K" in err
    assert "sending (attempt" not in err
    lines = [line for line in err.replace("\r\n", "\n").split("\n") if line]
    assert lines[0].startswith("run oracle/"), lines
    assert lines[-1].split("\r\x1b[K")[-1].startswith("done in"), lines
    assert len(lines) == 2, lines  # the start line and the end line; the bar in between
    frames = [f for f in err.split("\r\x1b[K") if f.startswith("[")]
    assert frames, err
    last = frames[-1]
    assert "4/4" in last and "ok 4" in last and "req/s" in last and "ETA" in last, last
    assert any("sending 1" in f for f in frames), frames
    assert all("sending 2" not in f for f in frames), frames  # concurrency 1


def test_a_pipe_keeps_one_line_per_request(release_dir: Path, tmp_path: Path) -> None:
    result = cli(
        "--batch",
        "run-model",
        "--release-dir",
        str(release_dir),
        "--provider",
        "oracle",
        "--limit",
        "3",
        "--output-dir",
        str(tmp_path / "run"),
    )
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stderr and "\x1b" not in result.stderr
    lines = result.stderr.splitlines()
    assert sum("sending (attempt 1)" in line for line in lines) == 3, lines
    assert sum(line.endswith(": success") for line in lines) == 3, lines


def test_the_line_counts_states_rate_and_eta() -> None:
    from engine.events import PromptStateChanged
    from pqid_tui.cli.progress import LiveProgress

    class Clock:
        now = 100.0

        def __call__(self) -> float:
            return self.now

    class Sink:
        def __init__(self) -> None:
            self.text = ""

        def write(self, s: str) -> None:
            self.text += s

        def flush(self) -> None:
            pass

    clock, sink = Clock(), Sink()
    live = LiveProgress(sink, clock=clock)
    live.total = 4
    for pid in ("a", "b"):
        live(PromptStateChanged(pid, "in_flight", attempt=1))
    clock.now = 102.0
    live(PromptStateChanged("a", "success", attempt=1))
    live(PromptStateChanged("b", "retrying", attempt=1, error="503"))
    line = live.render()
    assert line.startswith("[#####---------------] 1/4"), line
    assert "queued 2" in line and "retrying 1" in line and "ok 1" in line, line
    assert "0.50 req/s" in line and "ETA 6s" in line, line
    live(PromptStateChanged("zz", "skipped"))  # not sent by this invocation: not counted
    assert "1/4" in live.render()


class TerminalBuffer:
    """What a terminal receives, for the progress classes that ask `isatty()`."""

    def __init__(self, tty: bool = True) -> None:
        self.text = ""
        self.tty = tty

    def write(self, data: str) -> int:
        self.text += data
        return len(data)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return self.tty


def test_replay_on_a_terminal_is_one_line_of_counts_not_one_per_prompt() -> None:
    from engine.events import EvaluationFinished, ImageReady, ReplayFinished
    from pqid_tui.cli.progress import replay_progress

    stream = TerminalBuffer()
    now = [0.0]
    progress = replay_progress(stream)
    progress.clock = lambda: now[0]
    progress.t0 = 0.0
    progress(ImageReady("pqid-evaluator:x", built=False))
    categories = ["success"] * 150 + ["syntax_error"] * 4
    for i, category in enumerate(categories):
        now[0] += 0.1
        progress(EvaluationFinished(f"p{i}", category, i, 154))
    progress(ReplayFinished("/tmp/out", {"success": 150, "syntax_error": 4}))
    lines = [line for line in stream.text.split("\n") if line]
    assert lines[0] == "image pqid-evaluator:x reused"
    assert lines[-1].split("\r\x1b[K")[-1].startswith("done in 15.4s: 150 success, 4 "), lines
    assert len(lines) == 2, lines
    frames = [f for f in stream.text.split("\r\x1b[K") if f.startswith("[")]
    assert "154/154 prompts" in frames[-1] and "success 150  syntax_error 4" in frames[-1]
    # A pipe keeps one line per prompt.
    pipe = TerminalBuffer(tty=False)
    plain = replay_progress(pipe)
    plain(EvaluationFinished("p0", "success", 0, 154))
    assert pipe.text == "[1/154] p0: success\n"


def test_rescore_on_a_terminal_redraws_cells_and_keeps_a_line_per_model() -> None:
    from engine.replay.rescore import RescoreProgress
    from pqid_tui.cli.progress import rescore_progress

    stream = TerminalBuffer()
    progress = rescore_progress(stream)
    for model in ("model-a", "model-b"):
        for i in range(154):
            done = (0 if model == "model-a" else 154) + i + 1
            progress(RescoreProgress(model, f"p{i}", done, 308, i + 1, 154))
    lines = [line.split("\r\x1b[K")[-1] for line in stream.text.split("\n") if line]
    assert [line.split(" (")[0] for line in lines] == [
        "model-a: 154 cells scored",
        "model-b: 154 cells scored",
    ], lines
    frames = [f for f in stream.text.split("\r\x1b[K") if f.startswith("[")]
    assert any("model-a 1/154" in f for f in frames) and any("model-b 1/154" in f for f in frames)
    assert "308/308 cells" in frames[-1]
