"""Peak memory of the batch mode and of the app during one large run against a loopback provider.

    python -m tests.bench.memory [--prompts 10000] [--concurrency 64] [--latency 0.05]
                                    [--only batch|app] [--tracemalloc N]

Builds a synthetic release of `--prompts` prompts, starts the loopback provider
(`tests.fakes.loopback`, a process of its own, every answer after `--latency` seconds) and
runs the whole release against it twice, each time in a child process whose peak resident set
size the kernel reports when it ends (`wait4`, `ru_maxrss`):

batch  `pqid-tui --batch run-model --provider local --base-url ... --no-auth` as a user runs it;
app    the Textual app built by `make_app`, headless (`App.run_test`, the same compositor
       and widgets, no terminal), starting the run on the run monitor screen with
       `app.start_run` (what the New run screen's start does), waiting until it finishes,
       then going back to the home screen, which lists the runs (reading this one back).

While a child runs, its resident size is sampled from /proc to show whether memory grows with
the number of prompts done or levels off; the app child also reports how late a 50 ms timer
fired and how long its full garbage collections took. With `--tracemalloc N` each child also
records the N largest allocation sites (the app 60% into the run and at its end; slower, and
peaks then include tracemalloc's own bookkeeping). Figures are printed against the 300 MiB
target as ratios, never as a verdict; the last line is `BENCH-JSON {...}` with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.rundir.layout import SUMMARY

TARGET_MIB = 300.0
APP_SIZE = (160, 50)


def current_rss_kib(pid: int) -> int | None:
    """The resident set size of `pid` now, from /proc (None when it is gone or not Linux)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def run_measured(
    cmd: Sequence[str], log: Path, timeout: float, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run `cmd` to its end: wall seconds, exit status, peak RSS (MiB) and RSS samples."""
    with log.open("wb") as out:
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT, env=env)
    t0 = time.perf_counter()
    samples: list[tuple[float, float]] = []
    timed_out = False
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            break
        elapsed = time.perf_counter() - t0
        rss = current_rss_kib(proc.pid)
        if rss is not None:
            samples.append((round(elapsed, 2), round(rss / 1024, 1)))
        if elapsed > timeout and not timed_out:
            timed_out = True
            proc.terminate()
        time.sleep(0.25)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)  # wait4 reaped it, not Popen
    # ru_maxrss is in KiB on Linux.
    return {
        "seconds": seconds,
        "exit": proc.returncode,
        "timed_out": timed_out,
        "peak_rss_mib": usage.ru_maxrss / 1024,
        "samples": samples,
    }


def pqid_command() -> list[str]:
    script = Path(sys.executable).parent / "pqid-tui"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "pqid_tui"]


def growth(samples: list[tuple[float, float]]) -> str:
    """RSS at a quarter, half, three quarters and the end of the run (from the samples)."""
    if not samples:
        return "no samples"
    picks = [samples[min(len(samples) - 1, int(len(samples) * q))] for q in (0.25, 0.5, 0.75)]
    picks.append(samples[-1])
    return ", ".join(f"{rss:.0f} MiB at {t:.1f} s" for t, rss in picks)


def top_allocations(limit: int) -> list[str]:
    """The `limit` largest allocation sites still held (tracemalloc must be tracing)."""
    import tracemalloc

    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)]
    )
    stats = snapshot.statistics("lineno")
    out = [f"{sum(s.size for s in stats) / 2**20:7.2f} MiB traced in all"]
    for stat in stats[:limit]:
        frame = stat.traceback[0]
        out.append(
            f"{stat.size / 2**20:7.2f} MiB in {stat.count:7d} blocks  "
            f"{frame.filename}:{frame.lineno}"
        )
    return out


# -- the app child ------------------------------------------------------------------------------


async def drive_app(args: argparse.Namespace) -> dict[str, Any]:
    """In the child: run the whole release in the app, headless, then go back home."""
    import asyncio
    import gc

    from engine.config import make_config
    from pqid_tui.app import make_app
    from pqid_tui.screens.home import HomeScreen
    from pqid_tui.screens.monitor import MonitorScreen
    from pqid_tui.widgets.run_grid import RunGrid

    def rss_now() -> float:
        return (current_rss_kib(os.getpid()) or 0) / 1024

    app = make_app(args.release_dir, args.output_dir.parent)
    config = make_config(
        release_dir=args.release_dir,
        output_dir=args.output_dir,
        provider="local",
        base_url=args.base_url + "/v1",
        model="loopback-1",
        no_auth=True,
        acknowledge_prompt_export=True,
        concurrency=args.concurrency,
    )
    result: dict[str, Any] = {}
    async with app.run_test(size=APP_SIZE) as pilot:
        await pilot.pause()
        result["rss_before_run_mib"] = rss_now()
        lags: list[tuple[float, float]] = []
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()

        async def ticker() -> None:
            # How late a 50 ms timer fires while the run goes on: what a user feels as a stall.
            expected = loop.time() + 0.05
            while True:
                await asyncio.sleep(0.05)
                now = loop.time()
                lags.append((max(0.0, now - expected), time.perf_counter() - t0))
                expected = now + 0.05

        gc_pauses: list[float] = []
        gc_started = [0.0]

        def on_gc(phase: str, info: dict[str, Any]) -> None:
            if info["generation"] != 2:
                return
            if phase == "start":
                gc_started[0] = time.perf_counter()
            else:
                gc_pauses.append(time.perf_counter() - gc_started[0])

        gc.callbacks.append(on_gc)
        tick = asyncio.create_task(ticker())
        app.start_run(config)
        await pilot.pause(0.5)
        deadline = t0 + args.timeout
        first_done: float | None = None
        while app.run_active and time.perf_counter() < deadline:
            await asyncio.sleep(0.25)
            progress = app.run_progress
            if first_done is None and progress is not None and progress.finished_prompts:
                first_done = time.perf_counter() - t0
            if (
                args.tracemalloc
                and "mid_run_allocations" not in result
                and progress is not None
                and progress.to_send
                and progress.finished_prompts >= 0.6 * progress.to_send
            ):
                result["mid_run_allocations"] = top_allocations(args.tracemalloc)
                result["mid_run_rss_mib"] = rss_now()
        result["seconds"] = time.perf_counter() - t0
        result["finished"] = not app.run_active
        if app.run_active:
            app.stop_run()  # requests in flight finish; the directory stays resumable
            stop_deadline = time.perf_counter() + 60
            while app.run_active and time.perf_counter() < stop_deadline:
                await asyncio.sleep(0.25)
        await pilot.pause(0.5)
        tick.cancel()
        gc.callbacks.remove(on_gc)
        result["full_gc_count"] = len(gc_pauses)
        result["full_gc_worst_ms"] = max(gc_pauses, default=0.0) * 1000
        result["full_gc_total_ms"] = sum(gc_pauses) * 1000
        screen = app.screen
        result["screen"] = type(screen).__name__
        progress = app.run_progress
        if progress is not None:
            result["counts"] = {k: v for k, v in progress.counts.items() if v}
            result["requests"] = progress.requests
        if isinstance(screen, MonitorScreen):
            result["grid_rows"] = screen.query_one(RunGrid).row_count
        result["run_error"] = app.run_error
        worst, worst_at = max(lags, default=(0.0, 0.0))
        result["worst_lag_ms"] = worst * 1000
        result["worst_lag_at_s"] = worst_at
        result["first_prompt_done_s"] = first_done
        result["lags_over_100ms"] = sum(1 for lag, _ in lags if lag > 0.1)
        result["rss_after_run_mib"] = rss_now()
        if args.tracemalloc:
            result["top_allocations"] = top_allocations(args.tracemalloc)

        # Back to the home screen, which lists the runs (reading this one back in full).
        home = app.screen_stack[1]
        listed_before = getattr(home, "runs", None)
        t_home = time.perf_counter()
        home_deadline = t_home + 120
        await pilot.press("escape")
        while time.perf_counter() < home_deadline:
            await asyncio.sleep(0.1)
            home = app.screen
            if (
                isinstance(home, HomeScreen)
                and home.runs is not listed_before
                and not any(w.group == "home-runs" and not w.is_finished for w in app.workers)
            ):
                result["home_listed"] = [(i.name, i.success) for i in home.runs]
                break
        result["home_seconds"] = time.perf_counter() - t_home
        result["rss_after_home_mib"] = rss_now()
        await pilot.press("ctrl+q")
    return result


def app_child(args: argparse.Namespace) -> int:
    import asyncio

    if args.tracemalloc:
        import tracemalloc

        tracemalloc.start(1)
    result = asyncio.run(drive_app(args))
    args.result_file.write_text(json.dumps(result))
    return 0


# -- the batch child under tracemalloc ----------------------------------------------------------


def batch_child(args: argparse.Namespace, rest: list[str]) -> int:
    """In the child: the batch mode's main under tracemalloc, then the top allocation sites."""
    import tracemalloc

    from pqid_tui.cli.main import main as cli_main

    tracemalloc.start(1)
    try:
        code = cli_main(rest)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    args.result_file.write_text(json.dumps({"top_allocations": top_allocations(args.tracemalloc)}))
    return int(code or 0)


# -- the parent ---------------------------------------------------------------------------------


def batch_args(base: str, release: Path, out: Path, concurrency: int) -> list[str]:
    return [
        "--batch",
        "run-model",
        "--provider",
        "local",
        "--base-url",
        base + "/v1",
        "--model",
        "loopback-1",
        "--no-auth",
        "--acknowledge-third-party-prompt-export",
        "--release-dir",
        str(release),
        "--output-dir",
        str(out),
        "--concurrency",
        str(concurrency),
    ]


def find_summary(run_dir: Path) -> dict[str, Any]:
    """The counts of the run's `run-summary.json` (empty when there is none)."""
    try:
        data = json.loads((run_dir / SUMMARY).read_text())
    except (OSError, ValueError):
        return {}
    return {k: data.get(k) for k in ("success", "error", "pending", "uncertain")}


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def measure_batch(work: Path, base: str, release: Path, args: argparse.Namespace) -> dict[str, Any]:
    out = work / "batch-run"
    rest = batch_args(base, release, out, args.concurrency)
    result_file = work / "batch-child.json"
    if args.tracemalloc:
        cmd = [
            sys.executable,
            "-m",
            "tests.bench.memory",
            "--batch-child",
            "--tracemalloc",
            str(args.tracemalloc),
            "--result-file",
            str(result_file),
            "--",
            *rest,
        ]
    else:
        cmd = [*pqid_command(), *rest]
    r = run_measured(cmd, work / "batch.log", args.timeout + 30)
    r["summary"] = find_summary(out)
    if args.tracemalloc and result_file.is_file():
        r.update(json.loads(result_file.read_text()))
    if r["exit"] not in (0, 1) or r["timed_out"]:
        r["log_tail"] = tail(work / "batch.log")
    return r


def measure_app(work: Path, base: str, release: Path, args: argparse.Namespace) -> dict[str, Any]:
    result_file = work / "app-child.json"
    cmd = [
        sys.executable,
        "-m",
        "tests.bench.memory",
        "--app-child",
        "--base-url",
        base,
        "--release-dir",
        str(release),
        "--output-dir",
        str(work / "app-runs" / "app-run"),
        "--concurrency",
        str(args.concurrency),
        "--timeout",
        str(args.timeout),
        "--result-file",
        str(result_file),
    ]
    if args.tracemalloc:
        cmd += ["--tracemalloc", str(args.tracemalloc)]
    r = run_measured(cmd, work / "app.log", args.timeout + 60)
    if result_file.is_file():
        child = json.loads(result_file.read_text())
        r["run_seconds"] = child.pop("seconds", None)
        r.update(child)
    r["summary"] = find_summary(work / "app-runs" / "app-run")
    if r["exit"] != 0 or r["timed_out"] or not r.get("finished"):
        r["log_tail"] = tail(work / "app.log")
    return r


def report(name: str, r: dict[str, Any], prompts: int) -> None:
    peak = r["peak_rss_mib"]
    done = r.get("summary") or {}
    print(
        f"{name}: peak RSS {peak:.1f} MiB = {peak / TARGET_MIB:.2f} of the "
        f"{TARGET_MIB:.0f} MiB target; {prompts} prompts in {r['seconds']:.1f} s "
        f"(exit {r['exit']}{', timed out' if r['timed_out'] else ''}); run summary "
        f"{json.dumps(done) if done else 'not found'}",
        flush=True,
    )
    print(f"  RSS over time: {growth(r['samples'])}")
    if "rss_before_run_mib" in r:
        print(
            f"  app: {r['rss_before_run_mib']:.1f} MiB before the run, "
            f"{r['rss_after_run_mib']:.1f} MiB after it, {r['rss_after_home_mib']:.1f} MiB "
            f"back on the home screen ({r['home_seconds']:.1f} s to list the runs: "
            f"{r.get('home_listed')})"
        )
        first = r.get("first_prompt_done_s")
        print(
            f"  the run took {r['run_seconds']:.1f} s (first prompt done at "
            f"{first if first is None else round(first, 1)} s), finished: "
            f"{r.get('finished')}, screen {r.get('screen')}, grid rows {r.get('grid_rows')}; "
            f"a 50 ms timer fired up to {r['worst_lag_ms']:.0f} ms late (at "
            f"{r['worst_lag_at_s']:.1f} s), {r['lags_over_100ms']} times over 100 ms; "
            f"{r['full_gc_count']} full garbage collections, the longest "
            f"{r['full_gc_worst_ms']:.0f} ms, {r['full_gc_total_ms']:.0f} ms in all"
        )
        if r.get("run_error"):
            print(f"  run error: {r['run_error']}")
    if r.get("mid_run_allocations"):
        print(
            f"  largest allocation sites 60% into the run (RSS then "
            f"{r['mid_run_rss_mib']:.0f} MiB):"
        )
        for line in r["mid_run_allocations"]:
            print(f"    {line}")
    if r.get("top_allocations"):
        print("  largest allocation sites at the end of the run:")
        for line in r["top_allocations"]:
            print(f"    {line}")
    if r.get("log_tail"):
        print("  last output:\n" + "\n".join("    " + x for x in r["log_tail"].splitlines()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.memory",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--prompts", type=int, default=10000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--latency",
        type=float,
        default=0.05,
        help="seconds the loopback provider takes to answer each request",
    )
    parser.add_argument("--only", choices=("batch", "app"), default=None)
    parser.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds a run may take before it is stopped and reported",
    )
    parser.add_argument(
        "--tracemalloc",
        type=int,
        default=0,
        metavar="N",
        help="also list the N largest allocation sites held at the end",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="where the runs are written (default: a temporary directory)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    # The children (internal).
    parser.add_argument("--app-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--batch-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--release-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--output-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result-file", type=Path, help=argparse.SUPPRESS)
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in argv:
        argv, rest = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    args = parser.parse_args(argv)
    if args.app_child:
        return app_child(args)
    if args.batch_child:
        return batch_child(args, rest)

    from tests.bench.live import loopback_server, synthetic_release

    work = Path(tempfile.mkdtemp(prefix="pqid-bench-memory-", dir=args.work_dir))
    figures: dict[str, Any] = {
        "prompts": args.prompts,
        "concurrency": args.concurrency,
        "latency_s": args.latency,
        "target_mib": TARGET_MIB,
        "app_headless": True,
        "app_size": f"{APP_SIZE[0]}x{APP_SIZE[1]}",
    }
    try:
        release = synthetic_release(work / "release", args.prompts)
        print(
            f"memory benchmark: {args.prompts} prompts, concurrency {args.concurrency}, "
            f"loopback latency {args.latency * 1000:.0f} ms; the app runs headless "
            f"(App.run_test, {APP_SIZE[0]}x{APP_SIZE[1]}); peak RSS from wait4 ru_maxrss"
            + ("; with tracemalloc" if args.tracemalloc else ""),
            flush=True,
        )
        with loopback_server("--latency", str(args.latency)) as base:
            if args.only in (None, "batch"):
                b = measure_batch(work, base, release, args)
                report("batch", b, args.prompts)
                figures.update(
                    batch_peak_rss_mib=round(b["peak_rss_mib"], 1),
                    batch_seconds=round(b["seconds"], 2),
                    batch_ratio=round(b["peak_rss_mib"] / TARGET_MIB, 3),
                    batch_exit=b["exit"],
                    batch_summary=b["summary"],
                )
            if args.only in (None, "app"):
                a = measure_app(work, base, release, args)
                report("app", a, args.prompts)
                figures.update(
                    app_peak_rss_mib=round(a["peak_rss_mib"], 1),
                    app_seconds=round(a["seconds"], 2),
                    app_run_seconds=round(a.get("run_seconds") or 0.0, 2),
                    app_ratio=round(a["peak_rss_mib"] / TARGET_MIB, 3),
                    app_finished=bool(a.get("finished")),
                    app_rss_before_run_mib=round(a.get("rss_before_run_mib", 0.0), 1),
                    app_rss_after_run_mib=round(a.get("rss_after_run_mib", 0.0), 1),
                    app_rss_after_home_mib=round(a.get("rss_after_home_mib", 0.0), 1),
                    app_worst_lag_ms=round(a.get("worst_lag_ms", 0.0), 1),
                    app_full_gc_worst_ms=round(a.get("full_gc_worst_ms", 0.0), 1),
                    app_exit=a["exit"],
                    app_summary=a["summary"],
                )
    finally:
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print("BENCH-JSON " + json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
