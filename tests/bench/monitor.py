"""Benchmark: how fast the run monitor absorbs a flood of engine events, and how long frames wait.

    python -m tests.bench.monitor [--prompts 2000] [--events 20000] [--batch 100]

The monitor is fed exactly what the engine would send on the app's loop, through the callback
the app gives the engine (`PqidApp.run_events`): one RunStarted with every prompt, then
PromptStateChanged events as fast as the loop allows (a batch at a time, yielding to the loop
between batches, as the engine's awaits do). It prints:

- feed time: how long producing and folding all events into the progress state took;
- apply time: from the first event until the grid shows every prompt's final state;
- flush cost: time spent in the grid's coalesced redraws (count, total, worst single flush);
- frame delay: how late a 10 ms loop ticker fired (worst and 99th percentile), which is
  what a user feels as a stutter.

The last line is `BENCH-JSON {...}` with these figures, for the benchmark table. Nothing here
passes or fails on time; the exit status is 1 only when a row does not show its final state.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from engine.events import PromptStateChanged, RunStarted
from engine.run.runs import RunProgress
from engine.states import PromptState

TICK = 0.010
STATES: tuple[PromptState, ...] = (PromptState.IN_FLIGHT, PromptState.RETRYING) * 4 + (
    PromptState.IN_FLIGHT,
    PromptState.SUCCESS,
)


class FrameDelays:
    """How late a timer of period `tick` fires on the running loop while other work goes on:
    what a user feels as a stutter. `samples` holds (lateness, seconds since `start`)."""

    def __init__(self, tick: float) -> None:
        self.tick = tick
        self.samples: list[tuple[float, float]] = []
        self._task: asyncio.Task[None] | None = None

    def start(self, since: float | None = None) -> None:
        """Begin sampling on the running loop; times are counted from `since` (perf_counter)."""
        self._task = asyncio.create_task(
            self._sample(time.perf_counter() if since is None else since)
        )

    async def stop(self) -> None:
        """End sampling (the samples stay)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def lateness_ms(self) -> list[float]:
        """Every sample's lateness in milliseconds, smallest first."""
        return sorted(late * 1000 for late, _ in self.samples)

    async def _sample(self, since: float) -> None:
        loop = asyncio.get_running_loop()
        expected = loop.time() + self.tick
        while True:
            await asyncio.sleep(self.tick)
            now = loop.time()
            self.samples.append((max(0.0, now - expected), time.perf_counter() - since))
            expected = now + self.tick


def events_for(prompt_ids: list[str], count: int) -> list[PromptStateChanged]:
    """`count` state changes spread over the prompts, ending each prompt in success."""
    out = []
    per_prompt = max(1, count // len(prompt_ids))
    for step in range(per_prompt):
        state: PromptState = (
            STATES[min(step, len(STATES) - 1)] if step < per_prompt - 1 else PromptState.SUCCESS
        )
        for pid in prompt_ids:
            error = "rate_limited: HTTP 429: slow down" if state == "retrying" else None
            out.append(
                PromptStateChanged(
                    pid, state, step // 2 + 1, error, 1_800_000_000.0 + step if error else None
                )
            )
    return out[:count]


async def measure(prompts: int, events: int, batch: int, size: tuple[int, int]) -> dict[str, Any]:
    from pqid_tui.app import make_app
    from pqid_tui.screens.monitor import MonitorScreen
    from pqid_tui.widgets.run_grid import RunGrid

    ids = [f"prompt_{i:05d}" for i in range(prompts)]
    stream = events_for(ids, events)
    final = {e.prompt_id: e.state for e in stream}
    with tempfile.TemporaryDirectory() as tmp:
        app = make_app(None, Path(tmp) / "runs")
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            progress = RunProgress()
            screen = MonitorScreen(Path(tmp) / "runs" / "bench", progress, live=False)
            await app.push_screen(screen)
            await pilot.pause()

            flushes: list[float] = []
            original = screen.flush

            def timed_flush() -> None:
                t0 = time.perf_counter()
                original()
                flushes.append(time.perf_counter() - t0)

            screen.flush = timed_flush  # type: ignore[assignment]

            frames = FrameDelays(TICK)
            frames.start()
            await asyncio.sleep(0.05)
            grid = screen.query_one(RunGrid)

            # The callback the app hands the engine for a run (run_worker_task).
            sink = app.run_events(progress)
            start = time.perf_counter()
            sink(RunStarted("bench", "local", "bench-model", prompts, prompts, 0, tuple(ids)))
            for i in range(0, len(stream), batch):
                for event in stream[i : i + batch]:
                    sink(event)
                await asyncio.sleep(0)
            fed = time.perf_counter() - start

            def shown() -> bool:
                if grid.row_count < prompts:
                    return False
                for i in (0, len(ids) // 2, len(ids) - 1):
                    if grid.line_text(i)[2] != final[ids[i]]:
                        return False
                return not progress._dirty

            while not shown():
                await asyncio.sleep(0.005)
            applied = time.perf_counter() - start
            await asyncio.sleep(0.2)  # let a last render land before stopping the ticker
            await frames.stop()
            gc.unfreeze()  # what the end of the run worker does in the app
            wrong = [pid for i, pid in enumerate(ids) if grid.line_text(i)[2] != final[pid]]
    lags_ms = frames.lateness_ms()
    return {
        "prompts": prompts,
        "events": len(stream),
        "batch": batch,
        "feed_seconds": fed,
        "apply_seconds": applied,
        "flushes": len(flushes),
        "flush_total_seconds": sum(flushes),
        "flush_worst_ms": max(flushes) * 1000 if flushes else 0.0,
        "frame_delay_worst_ms": lags_ms[-1] if lags_ms else 0.0,
        "frame_delay_p99_ms": lags_ms[int(len(lags_ms) * 0.99) - 1] if lags_ms else 0.0,
        "frame_delay_median_ms": statistics.median(lags_ms) if lags_ms else 0.0,
        "rows_wrong_at_end": len(wrong),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.monitor",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--prompts", type=int, default=2000)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument(
        "--batch",
        type=int,
        default=100,
        help="events folded in between two yields to the event loop",
    )
    parser.add_argument("--width", type=int, default=160)
    parser.add_argument("--height", type=int, default=50)
    args = parser.parse_args(argv)
    r = asyncio.run(measure(args.prompts, args.events, args.batch, (args.width, args.height)))
    print(
        f"run monitor benchmark: {r['prompts']} prompts, {r['events']} PromptStateChanged "
        f"events, {r['batch']} per loop turn, headless {args.width}x{args.height}"
    )
    print(f"  feed time (fold into RunProgress):  {r['feed_seconds'] * 1000:8.1f} ms")
    print(f"  apply time (grid shows final state): {r['apply_seconds'] * 1000:8.1f} ms")
    print(
        f"  flushes: {r['flushes']}, total {r['flush_total_seconds'] * 1000:.1f} ms, "
        f"worst {r['flush_worst_ms']:.1f} ms"
    )
    print(
        f"  frame delay (10 ms ticker lateness): worst {r['frame_delay_worst_ms']:.1f} ms, "
        f"p99 {r['frame_delay_p99_ms']:.1f} ms, median {r['frame_delay_median_ms']:.2f} ms"
    )
    print(f"  rows not showing their final state at the end: {r['rows_wrong_at_end']}")
    figures = {
        "prompts": r["prompts"],
        "events": r["events"],
        "batch": r["batch"],
        "size": f"{args.width}x{args.height}",
        "headless": True,
        "feed_s": round(r["feed_seconds"], 4),
        "apply_s": round(r["apply_seconds"], 4),
        "flushes": r["flushes"],
        "flush_total_s": round(r["flush_total_seconds"], 4),
        "flush_worst_ms": round(r["flush_worst_ms"], 2),
        "worst_frame_ms": round(r["frame_delay_worst_ms"], 2),
        "p99_frame_ms": round(r["frame_delay_p99_ms"], 2),
        "median_frame_ms": round(r["frame_delay_median_ms"], 3),
        "rows_wrong": r["rows_wrong_at_end"],
    }
    print("BENCH-JSON " + json.dumps(figures, sort_keys=True))
    return 0 if r["rows_wrong_at_end"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
