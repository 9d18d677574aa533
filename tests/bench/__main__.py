"""Run every benchmark, one after another, and print the table of targets and measured figures.

    python -m tests.bench [--only NAME ...] [--cold-build] [--readme README.md]

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
    "live": ["tests.bench.live"],
    "replay": [
        "tests.bench.replay",
        "--base-image",
        "pqid-base:bookworm",
        "--wheelhouse",
        ".ci/wheelhouse",
        "--build-image",
    ],
    "rescore": [
        "tests.bench.rescore",
        "--base-image",
        "pqid-base:trixie",
        "--wheelhouse",
        ".ci/wheelhouse-py313",
        "--build-image",
    ],
    "startup": ["tests.bench.startup"],
    "monitor": ["tests.bench.monitor"],
    "memory": ["tests.bench.memory"],
    "governor": ["tests.bench.governor"],
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
            figures = json.loads(line[len("BENCH-JSON ") :])
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


_GOVERNOR_LIMITS = {
    "bucket": "a token bucket of 40/s, no rate-limit headers (of all it admits)",
    "sliding": "a sliding window of 100 per 5 s, no rate-limit headers (of 20/s)",
    "fixed": "a fixed window of 100 per 10 s in OpenAI's headers (of each window)",
    "tokens": "36,000 tokens per 10 s in OpenAI's headers (of all it admits)",
    "random-limit": "random 429s (10 %) on a token bucket of 20/s (of all it admits)",
}


def governor_rows(figures: dict[str, Any] | None) -> list[tuple[str, str, str, str]]:
    """The rows of `tests.bench.governor`: each limit's share used, the requests wasted on
    its 429s and the terminal errors; random 429s without a limit against a clean run."""
    rows = []
    for shape, label in _GOVERNOR_LIMITS.items():
        entry: Any = _get(figures, "governor", shape) or {}
        ratio, wasted = entry.get("of_limit"), entry.get("wasted_share")
        errors, ceiling = entry.get("terminal_errors"), entry.get("ceiling")
        ok = (
            None
            if None in (ratio, wasted, errors)
            else (ratio >= 0.90 and wasted < 0.05 and errors == 0)
        )
        extra = (
            f" (+ {entry['random_share'] * 100:.1f} % at random)"
            if entry.get("random_share")
            else ""
        )
        rows.append(
            (
                f"Governor, {label}, ceiling {_fmt(ceiling, 'd')}: share of the limit "
                "used, 429 share from the limit, terminal errors",
                ">= 0.90, < 5 %, 0",
                f"{_fmt(ratio, '.3f')}, "
                f"{_fmt(wasted * 100 if wasted is not None else None, '.1f')} %{extra}, "
                f"{_fmt(errors, 'd')}",
                _verdict(ok),
            )
        )
    entry = _get(figures, "governor", "random") or {}
    ratio, errors = entry.get("of_clean"), entry.get("terminal_errors")
    rows.append(
        (
            "Governor, 10 % random 429s (Retry-After 1 s, no headers, no limit), 400 "
            "prompts, C 16, 500 ms: throughput / a clean run's, terminal errors",
            ">= 0.70, 0",
            f"{_fmt(ratio, '.3f')} ({_fmt(entry.get('wall_s'), '.1f', ' s')}"
            f" vs {_fmt(entry.get('clean_wall_s'), '.1f', ' s')}), {_fmt(errors, 'd')}",
            _verdict(None if None in (ratio, errors) else ratio >= 0.70 and errors == 0),
        )
    )
    return rows


def table(results: dict[str, dict[str, Any] | None]) -> str:
    live, replay = results.get("live"), results.get("replay")
    startup, monitor, memory = results.get("startup"), results.get("monitor"), results.get("memory")
    rows: list[tuple[str, str, str, str]] = []
    limits: dict[int, str] = {}
    over = _get(live, "live", "overhead")
    for run in _get(live, "live", "overhead_runs") or [over]:
        # Unmeasured, the row names the benchmark's default first run.
        n, c, latency = (
            _get(run, "n") or 2000,
            _get(run, "concurrency") or 64,
            _get(run, "latency_s") or 0.2,
        )
        rows.append(
            (
                f"Live runner overhead: measured / ideal (N {n:,d}, C {c}, L "
                f"{latency * 1000:.0f} ms, whole call "
                "incl. durable writes; in brackets the same requests through the HTTP "
                "client alone)",
                "<= 1.10",
                f"{_fmt(_get(run, 'ratio'), '.3f')} ({_fmt(_get(run, 'http_alone_ratio'), '.3f')})",
                _verdict(_check(_get(run, "ratio"), lambda v: v <= 1.10)),
            )
        )
        if run and _get(run, "per_request_ms"):
            r = _get(run, "per_request_ms")
            alone = _get(run, "http_alone_round_trip_beyond_latency_ms")
            limits[len(rows) - 1] = (
                f"{_fmt(_get(run, 'setup_s'), '.2f', ' s')} before the first request and "
                f"{_fmt(_get(run, 'teardown_s'), '.2f', ' s')} after the last answer; each "
                f"request {_fmt(_get(run, 'per_request_excess_ms'), '.1f', ' ms')} late on "
                f"average: the flush the durability rule requires "
                f"{_fmt(_get(run, 'rule_ms_per_request'), '.1f', ' ms')} (syncfs took "
                f"{_fmt(_get(run, 'flush_ms', 'mean'), '.1f', ' ms')} on average on this "
                f"disk), ours {_fmt(_get(run, 'ours_ms_per_request'), '.1f', ' ms')} (of "
                f"which the event loop resuming the request after its flush "
                f"{_fmt(_get(r, 'resume_after_flush'), '.1f', ' ms')}), the round trip "
                f"beyond L {_fmt(_get(r, 'round_trip_beyond_latency'), '.1f', ' ms')} (HTTP "
                f"client alone: {_fmt(alone, '.1f', ' ms')}), the governor's slow start "
                f"{_fmt(_get(r, 'slot'), '.1f', ' ms')}"
            )
        elif run:
            limits[len(rows) - 1] = (
                f"each request first waits for its in_flight record to be flushed to disk: "
                f"{_fmt(_get(run, 'in_flight_record_wait_ms'), '.1f', ' ms')} on average; the "
                f"event loop spent "
                f"{_fmt(_get(run, 'event_loop_cpu_ms_per_request'), '.2f', ' ms')} of CPU per "
                "request"
            )
    rows.append(
        (
            "Engine CPU per 1,000 requests (the first run above)",
            "report",
            _fmt(_get(over, "cpu_s_per_1000"), ".2f", " s"),
            "-",
        )
    )
    for entry in _get(live, "live", "ratelimit") or []:
        ratio, wasted = entry.get("throughput_ratio"), entry.get("wasted_share")
        errors = entry.get("terminal_errors")
        ok = (
            None
            if None in (ratio, wasted, errors)
            else (ratio >= 0.90 and wasted < 0.05 and errors == 0)
        )
        rows.append(
            (
                f"Rate limit {entry.get('rate'):.0f}/s, ceiling {entry.get('ceiling')}, "
                f"{entry.get('headers')} rate-limit headers: throughput / R, 429 share, "
                "terminal errors",
                ">= 0.90, < 5 %, 0",
                f"{_fmt(ratio, '.3f')} ({_fmt(entry.get('of_admissible'), '.3f')} of all "
                f"admissible), {_fmt(wasted * 100 if wasted is not None else None, '.1f')}"
                f" %, {_fmt(errors, 'd')}",
                _verdict(ok),
            )
        )
    rows.extend(governor_rows(results.get("governor")))
    rows.append(
        (
            "Evaluator: evaluations/s in the container vs a fresh interpreter per response",
            ">= 5x",
            f"{_fmt(_get(replay, 'evals_per_s'), '.1f')}/s vs "
            f"{_fmt(_get(replay, 'fresh_evals_per_s'), '.2f')}/s = "
            f"{_fmt(_get(replay, 'speedup'), '.1f', 'x')}",
            _verdict(_check(_get(replay, "speedup"), lambda v: v >= 5)),
        )
    )
    rows.append(
        (
            "Evaluator: wall / (container start + one Qiskit import + sum of executions / cores)",
            "<= 1.5",
            _fmt(_get(replay, "ideal_ratio"), ".2f"),
            _verdict(_check(_get(replay, "ideal_ratio"), lambda v: v <= 1.5)),
        )
    )
    rows.append(
        (
            "Container start; image build warm / cold",
            "report",
            f"{_fmt(_get(replay, 'container_start_s'), '.2f', ' s')}; "
            f"{_fmt(_get(replay, 'build_warm_s'), '.1f', ' s')} / "
            f"{_fmt(_get(replay, 'build_cold_s'), '.0f', ' s')}",
            "-",
        )
    )
    rescore = results.get("rescore")
    rows.append(
        (
            "Rescore of the frozen study (3,234 cells): hardened / the reference harness "
            "in process, same image",
            "<= 1.5",
            f"{_fmt(_get(rescore, 'rescore', 'hardened_s'), '.1f', ' s')} / "
            f"{_fmt(_get(rescore, 'rescore', 'harness_s'), '.1f', ' s')} = "
            f"{_fmt(_get(rescore, 'rescore', 'ratio'), '.2f')} "
            f"({_fmt(_get(rescore, 'rescore', 'hardened_cells_per_s'), '.1f')} vs "
            f"{_fmt(_get(rescore, 'rescore', 'harness_cells_per_s'), '.0f')} cells/s)",
            _verdict(_check(_get(rescore, "rescore", "ratio"), lambda v: v <= 1.5)),
        )
    )
    if rescore:
        limits[len(rows) - 1] = (
            "each response runs in a fresh forked child, one child at a time (the recovery "
            f"run reused from the strict run for {_get(rescore, 'rescore', 'recovery_reused')} "
            f"of {_get(rescore, 'rescore', 'cells')} cells): the children's lives sum to "
            f"{_fmt(_get(rescore, 'rescore', 'child_ms_per_cell'), '.1f', ' ms')} per cell"
        )
    rows.append(
        (
            "`pqid-tui --batch --help` / `python -c pass` (median)",
            "report",
            f"{_fmt(_get(startup, 'help_ratio'), '.2f', 'x')} "
            f"({_fmt(_get(startup, 'help_s'), '.3f', ' s')})",
            "-",
        )
    )
    rows.append(
        (
            "`pqid-tui --batch run-model --dry-run` (demo) / `python -c pass` (median)",
            "report",
            f"{_fmt(_get(startup, 'dry_run_ratio'), '.2f', 'x')} "
            f"({_fmt(_get(startup, 'dry_run_s'), '.3f', ' s')})",
            "-",
        )
    )
    rows.append(
        (
            "Run monitor: 2,000 prompts, 20,000 state changes applied",
            "< 2 s",
            _fmt(_get(monitor, "apply_s"), ".3f", " s"),
            _verdict(_check(_get(monitor, "apply_s"), lambda v: v < 2)),
        )
    )
    rows.append(
        (
            "Run monitor: worst frame delay",
            "< 100 ms",
            _fmt(_get(monitor, "worst_frame_ms"), ".0f", " ms"),
            _verdict(_check(_get(monitor, "worst_frame_ms"), lambda v: v < 100)),
        )
    )
    for key, label in (("batch_peak_rss_mib", "batch mode"), ("app_peak_rss_mib", "app")):
        value = _get(memory, key)
        rows.append(
            (
                f"Peak RSS of the {label}, 10,000-prompt run against the loopback server",
                "< 300 MiB",
                _fmt(value, ".0f", " MiB"),
                _verdict(_check(value, lambda v: v < 300)),
            )
        )
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = (
        f"Measured {when} on {platform.machine()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} cores, by `.ci/bench`.\n\n"
        "| what | target | measured | | what limits it |\n|---|---|---|---|---|\n"
    )
    return head + "".join(
        f"| {a} | {b} | {c} | {d} | {limits.get(i, '') if d == '**missed**' else ''} |\n"
        for i, (a, b, c, d) in enumerate(rows)
    )


def write_readme(path: Path, text: str) -> None:
    content = path.read_text()
    start, end = content.find(BEGIN), content.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{path}: no {BEGIN} ... {END} block to replace")
    path.write_text(content[: start + len(BEGIN)] + "\n" + text + content[end:])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--only", nargs="+", choices=sorted(BENCHES), default=None, help="run only these benchmarks"
    )
    p.add_argument(
        "--cold-build",
        action="store_true",
        help="also time a cold (--no-cache) build of the evaluator image (minutes)",
    )
    p.add_argument(
        "--readme", type=Path, default=None, help="rewrite the benchmark table in this file"
    )
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
