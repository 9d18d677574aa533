"""Run every benchmark, one after another, and print the table of targets and measured figures.

    python -m pqid_tui.bench [--only NAME ...] [--cold-build] [--readme README.md]

Each benchmark runs as a program of its own (so one's imports and memory do not colour
another's) and ends its output with a `BENCH-JSON {...}` line; this collects those lines and
prints one Markdown table: the target, the figure measured in this run, and whether it was
met. Nothing here fails on a figure: a missed target stays in the table with its number.
`--readme` rewrites the table between the `<!-- bench:begin -->` and `<!-- bench:end -->`
markers of that file. `.ci/bench` sets the machine up and runs this from the repository root
(the replay benchmark uses the base image and wheelhouse `.ci/setup` prepares).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"

# name -> the command (after `python -m`) that measures it
BENCHES: dict[str, list[str]] = {
    "live": ["engine.bench_live"],
    "replay": ["engine.bench_replay", "--base-image", "pqid-base:bookworm",
               "--wheelhouse", ".ci/wheelhouse", "--build-image"],
    "rescore": ["engine.bench_rescore", "--base-image", "pqid-base:trixie",
                "--wheelhouse", ".ci/wheelhouse-py313", "--build-image"],
    "startup": ["pqid_tui.bench.startup"],
    "monitor": ["pqid_tui.bench.monitor"],
    "memory": ["pqid_tui.bench.memory"],
}


def run_bench(name: str, extra: list[str]) -> dict[str, Any] | None:
    command = [sys.executable, "-m", *BENCHES[name], *extra]
    print(f"== {name}: {' '.join(command[1:])}", flush=True)
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    figures: dict[str, Any] | None = None
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("BENCH-JSON "):
            figures = json.loads(line[len("BENCH-JSON "):])
        else:
            print("   " + line, end="", flush=True)
    code = proc.wait()
    print(f"== {name}: exit {code} after {time.monotonic() - started:.0f} s", flush=True)
    return figures if code == 0 else None


def _get(data: dict[str, Any] | None, *path: Any) -> Any:
    for key in path:
        if data is None:
            return None
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _fmt(value: Any, spec: str = ".2f", unit: str = "") -> str:
    if value is None:
        return "not measured"
    if isinstance(value, (int, float)):
        return f"{value:{spec}}{unit}"
    return str(value)


def _verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("met" if ok else "**missed**")


def _check(value: Any, test: Callable[[float], bool]) -> bool | None:
    return None if not isinstance(value, (int, float)) else test(float(value))


def table(results: dict[str, dict[str, Any] | None]) -> str:
    live, replay = results.get("live"), results.get("replay")
    startup, monitor, memory = results.get("startup"), results.get("monitor"), results.get("memory")
    rows: list[tuple[str, str, str, str]] = []
    limits: dict[int, str] = {}
    over = _get(live, "live", "overhead")
    rows.append(("Live runner overhead: measured / ideal (N 2,000, C 64, L 50 ms, whole call "
                 "incl. durable writes)", "<= 1.10", _fmt(_get(over, "ratio"), ".3f"),
                 _verdict(_check(_get(over, "ratio"), lambda v: v <= 1.10))))
    if over:
        limits[len(rows) - 1] = (
            f"each request first waits for its in_flight record to be flushed to disk: "
            f"{_fmt(_get(over, 'in_flight_record_wait_ms'), '.1f', ' ms')} on average "
            f"({_fmt(_get(over, 'flushes'), 'd')} flushes for {_fmt(_get(over, 'n'), 'd')} "
            f"requests); the event loop spent "
            f"{_fmt(_get(over, 'event_loop_cpu_ms_per_request'), '.2f', ' ms')} of CPU per "
            "request")
    rows.append(("Engine CPU per 1,000 requests (same run)", "report",
                 _fmt(_get(over, "cpu_s_per_1000"), ".2f", " s"), "-"))
    for entry in _get(live, "live", "ratelimit") or []:
        ratio, wasted = entry.get("throughput_ratio"), entry.get("wasted_share")
        errors = entry.get("terminal_errors")
        ok = None if None in (ratio, wasted, errors) else (
            ratio >= 0.90 and wasted < 0.05 and errors == 0)
        rows.append((f"Rate limit {entry.get('rate'):.0f}/s, ceiling {entry.get('ceiling')}, "
                     f"{entry.get('headers')} rate-limit headers: throughput / R, 429 share, "
                     "terminal errors", ">= 0.90, < 5 %, 0",
                     f"{_fmt(ratio, '.3f')} ({_fmt(entry.get('of_admissible'), '.3f')} of all "
                     f"admissible), {_fmt(wasted * 100 if wasted is not None else None, '.1f')}"
                     f" %, {_fmt(errors, 'd')}", _verdict(ok)))
    rows.append(("Evaluator: evaluations/s in the container vs a fresh interpreter per response",
                 ">= 5x", f"{_fmt(_get(replay, 'evals_per_s'), '.1f')}/s vs "
                 f"{_fmt(_get(replay, 'fresh_evals_per_s'), '.2f')}/s = "
                 f"{_fmt(_get(replay, 'speedup'), '.1f', 'x')}",
                 _verdict(_check(_get(replay, "speedup"), lambda v: v >= 5))))
    rows.append(("Evaluator: wall / (container start + one Qiskit import + sum of executions "
                 "/ cores)", "<= 1.5", _fmt(_get(replay, "ideal_ratio"), ".2f"),
                 _verdict(_check(_get(replay, "ideal_ratio"), lambda v: v <= 1.5))))
    rows.append(("Container start; image build warm / cold", "report",
                 f"{_fmt(_get(replay, 'container_start_s'), '.2f', ' s')}; "
                 f"{_fmt(_get(replay, 'build_warm_s'), '.1f', ' s')} / "
                 f"{_fmt(_get(replay, 'build_cold_s'), '.0f', ' s')}", "-"))
    rescore = results.get("rescore")
    rows.append(("Rescore of the frozen study (3,234 cells): hardened / the reference harness "
                 "in process, same image", "<= 1.5",
                 f"{_fmt(_get(rescore, 'rescore', 'hardened_s'), '.1f', ' s')} / "
                 f"{_fmt(_get(rescore, 'rescore', 'harness_s'), '.1f', ' s')} = "
                 f"{_fmt(_get(rescore, 'rescore', 'ratio'), '.2f')} "
                 f"({_fmt(_get(rescore, 'rescore', 'hardened_cells_per_s'), '.1f')} vs "
                 f"{_fmt(_get(rescore, 'rescore', 'harness_cells_per_s'), '.0f')} cells/s)",
                 _verdict(_check(_get(rescore, "rescore", "ratio"), lambda v: v <= 1.5))))
    if rescore:
        limits[len(rows) - 1] = (
            "every response runs twice (strict and recovery), each in a fresh forked child, "
            "one child at a time: the children's lives sum to "
            f"{_fmt(_get(rescore, 'rescore', 'child_ms_per_cell'), '.1f', ' ms')} per cell")
    rows.append(("`pqid-tui --batch --help` / `python -c pass` (median)", "report",
                 f"{_fmt(_get(startup, 'help_ratio'), '.2f', 'x')} "
                 f"({_fmt(_get(startup, 'help_s'), '.3f', ' s')})", "-"))
    rows.append(("`pqid-tui --batch run-model --dry-run` (demo) / `python -c pass` (median)",
                 "report", f"{_fmt(_get(startup, 'dry_run_ratio'), '.2f', 'x')} "
                 f"({_fmt(_get(startup, 'dry_run_s'), '.3f', ' s')})", "-"))
    rows.append(("Run monitor: 2,000 prompts, 20,000 state changes applied", "< 2 s",
                 _fmt(_get(monitor, "apply_s"), ".3f", " s"),
                 _verdict(_check(_get(monitor, "apply_s"), lambda v: v < 2))))
    rows.append(("Run monitor: worst frame delay", "< 100 ms",
                 _fmt(_get(monitor, "worst_frame_ms"), ".0f", " ms"),
                 _verdict(_check(_get(monitor, "worst_frame_ms"), lambda v: v < 100))))
    for key, label in (("batch_peak_rss_mib", "batch mode"), ("app_peak_rss_mib", "app")):
        value = _get(memory, key)
        rows.append((f"Peak RSS of the {label}, 10,000-prompt run against the loopback server",
                     "< 300 MiB", _fmt(value, ".0f", " MiB"),
                     _verdict(_check(value, lambda v: v < 300))))
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = (f"Measured {when} on {platform.machine()}, Python {platform.python_version()}, "
            f"{os.cpu_count()} cores, by `.ci/bench`.\n\n"
            "| what | target | measured | | what limits it |\n|---|---|---|---|---|\n")
    return head + "".join(
        f"| {a} | {b} | {c} | {d} | {limits.get(i, '') if d == '**missed**' else ''} |\n"
        for i, (a, b, c, d) in enumerate(rows))


def write_readme(path: Path, text: str) -> None:
    content = path.read_text()
    start, end = content.find(BEGIN), content.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{path}: no {BEGIN} ... {END} block to replace")
    path.write_text(content[:start + len(BEGIN)] + "\n" + text + content[end:])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pqid_tui.bench",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="+", choices=sorted(BENCHES), default=None,
                   help="run only these benchmarks")
    p.add_argument("--cold-build", action="store_true",
                   help="also time a cold (--no-cache) build of the evaluator image (minutes)")
    p.add_argument("--readme", type=Path, default=None,
                   help="rewrite the benchmark table in this file")
    args = p.parse_args(argv)
    results: dict[str, dict[str, Any] | None] = {}
    for name in args.only or list(BENCHES):
        extra = ["--cold-build"] if name == "replay" and args.cold_build else []
        results[name] = run_bench(name, extra)
    text = table(results)
    print()
    print(text)
    if args.readme is not None:
        write_readme(args.readme, text)
        print(f"(table written to {args.readme})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
