"""Benchmark (not a test): the route governor against the shapes rate limits take.

    python -m tests.bench.governor [SHAPE ...] [--scale S] [--work-dir DIR]

Each shape runs the live runner, through the library API, against `tests.fakes.loopback` in
a process of its own (pinned to the other core when there are two), with a concurrency
ceiling far above what the limit allows:

bucket        a token bucket of 40 requests/s (a one-second burst), no rate-limit headers: the
              limit is told only by 429 with `retry-after` and `retry-after-ms`.
sliding       at most 100 requests in any 5 s (20/s), no rate-limit headers, `retry-after`
              until the oldest request leaves the window.
fixed         a fixed window of 100 requests per 10 s, the free tier's "N per minute" scaled
              down six times so that a run sees several windows: OpenAI's headers with the
              reset in whole seconds (`x-ratelimit-reset-requests: 7s`), `retry-after` to the
              window's end and no `retry-after-ms`.
tokens        36,000 tokens per 10 s at 180 tokens a request (20 requests/s) beside a request
              limit of 100/s, both stated in OpenAI's headers (`x-ratelimit-*-tokens` binds).
random        no limit at all, 10 % of answers 429 at random with `Retry-After: 1` and no
              rate-limit headers; 400 prompts at concurrency 16, answers after 500 ms, against
              the same run on a clean server.
random-limit  the `bucket` limit at 20/s with 10 % random 429s on top of it.

Reported per shape: the share of the limit used (`of_limit`: for a token bucket, of all it
would admit over the run, its burst plus its rate times the span from the first request to
the last; for the sliding window, the achieved rate over 100/5 s, since a steady sender
cannot use the burst of every window; for the fixed window, the mean share of each complete
window's budget), the share of requests answered 429 by the limit (wasted) and at random,
terminal errors, and what the governor decided (`rate_control`). For `random`: its
throughput over the clean run's (the wall time of the same run against a server without
random 429s). Every figure is measured in this run; nothing here passes or fails. The last
line is `BENCH-JSON {...}`. `--scale 0.25` runs every shape with a quarter of its prompts.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.rundir.shapes import RunSummary
from tests.bench.live import _run, loopback_server, server_stats, synthetic_release

__all__ = ["SHAPES", "bench_shape", "main"]


@dataclass(frozen=True)
class Shape:
    """One benchmark: the server's arguments, the run's size and the limit's nominal rate."""

    server: tuple[str, ...]
    n: int
    concurrency: int
    latency: float
    rate: float | None  # requests per second the limit allows (None: no limit)
    burst: float = 0.0  # what the server admits at once on top of `rate` (a full bucket)
    wire: str = "openai"
    sliding: bool = False  # judged by its rate: a steady sender cannot reach burst + rate x span


SHAPES: dict[str, Shape] = {
    "bucket": Shape(
        ("--rate", "40", "--burst", "40"),
        n=1200,
        concurrency=256,
        latency=0.1,
        rate=40.0,
        burst=40.0,
    ),
    "sliding": Shape(
        ("--shape", "sliding", "--limit", "100", "--window", "5"),
        n=700,
        concurrency=128,
        latency=0.2,
        rate=20.0,
        burst=100.0,
        sliding=True,
    ),
    "fixed": Shape(
        ("--shape", "fixed", "--limit", "100", "--window", "10", "--headers", "openai"),
        n=450,
        concurrency=128,
        latency=0.2,
        rate=10.0,
    ),
    "tokens": Shape(
        (
            "--rate",
            "100",
            "--burst",
            "100",
            "--tokens-limit",
            "36000",
            "--tokens-window",
            "10",
            "--tokens-per-request",
            "180",
            "--headers",
            "openai",
        ),
        n=700,
        concurrency=128,
        latency=0.2,
        rate=20.0,
        burst=200.0,
    ),
    "random": Shape(
        ("--random-429", "0.1", "--random-retry-after", "1"),
        n=400,
        concurrency=16,
        latency=0.5,
        rate=None,
    ),
    "random-limit": Shape(
        ("--rate", "20", "--burst", "20", "--random-429", "0.1", "--random-retry-after", "1"),
        n=600,
        concurrency=128,
        latency=0.2,
        rate=20.0,
        burst=20.0,
    ),
}


def _scaled(shape: Shape, scale: float) -> int:
    return max(20, round(shape.n * scale))


def _measure(
    work: Path, name: str, shape: Shape, server: tuple[str, ...], n: int, concurrency: int
) -> tuple[RunSummary, float, dict[str, Any]]:
    release = synthetic_release(work / f"release-{n}", n)
    with loopback_server(
        "--latency", str(shape.latency), "--wire", shape.wire, "--seed", "7", *server
    ) as base:
        summary, wall, _cpu, _loop = _run(
            base,
            release,
            work / f"run-{name}",
            concurrency,
            wire=shape.wire,
            max_retries=20,
            retry_backoff_seconds=0.5,
        )
        stats = server_stats(base)
    return summary, wall, stats


def _governor(summary: RunSummary) -> dict[str, Any]:
    rc = summary.get("rate_control") or {}
    keep = (
        "limit_429s",
        "isolated_429s",
        "limit_reasons",
        "pauses",
        "cuts",
        "headers_seen",
        "header_families",
        "background_429_share",
        "window",
        "pace_per_second",
    )
    return {k: rc.get(k) for k in keep if k in rc}


def bench_shape(work: Path, name: str, scale: float = 1.0) -> dict[str, Any]:
    shape = SHAPES[name]
    n = _scaled(shape, scale)
    summary, wall, stats = _measure(work, name, shape, shape.server, n, shape.concurrency)
    requests = max(1, stats["requests"])
    limited = stats["throttled_limit"] + stats["throttled_tokens"]
    result: dict[str, Any] = {
        "shape": name,
        "n": n,
        "ceiling": shape.concurrency,
        "latency_s": shape.latency,
        "requests": stats["requests"],
        "ok": stats["ok"],
        "success": summary["success"],
        "terminal_errors": summary["error"],
        "wall_s": round(wall, 3),
        "wasted_share": round(limited / requests, 4),
        "random_share": round(stats["throttled_random"] / requests, 4),
        "governor": _governor(summary),
        "decisions": (summary.get("rate_control") or {}).get("decisions"),
    }
    tail = (
        f"{limited} of {stats['requests']} requests answered 429 by the limit "
        f"({limited / requests:.1%})"
    )
    if stats["throttled_random"]:
        tail += (
            f", {stats['throttled_random']} at random ({stats['throttled_random'] / requests:.1%})"
        )
    tail += (
        f"; {summary['error']} terminal errors; {summary['success']}/{n} ok; governor "
        f"{json.dumps(result['governor'], sort_keys=True)}"
    )
    if shape.rate is None:
        clean, clean_wall, _clean_stats = _measure(
            work, name + "-clean", shape, (), n, shape.concurrency
        )
        ratio = clean_wall / wall if wall > 0 else 0.0
        result.update(
            clean_wall_s=round(clean_wall, 3),
            of_clean=round(ratio, 3),
            clean_success=clean["success"],
        )
        print(
            f"{name}: {n} prompts at concurrency {shape.concurrency}, answers after "
            f"{shape.latency * 1000:.0f} ms: {wall:.2f} s against {clean_wall:.2f} s clean "
            f"= {ratio:.3f} of the clean throughput; {tail}",
            flush=True,
        )
        return result
    span = (stats["last"] - stats["first"]) if stats["first"] else wall
    achieved = stats["ok"] / span if span > 0 else 0.0
    result.update(
        rate=shape.rate,
        span_s=round(span, 3),
        achieved_per_s=round(achieved, 2),
        throughput_ratio=round(achieved / shape.rate, 3),
    )
    if "windows" in stats:
        windows = stats["windows"]
        used = [v for k, v in sorted(windows["ok"].items(), key=lambda kv: int(kv[0]))]
        complete = used[:-1] or used  # the run ends inside its last window
        share = sum(complete) / (len(complete) * windows["limit"]) if complete else 0.0
        result.update(of_limit=round(share, 3), windows_used=used)
        figure = (
            f"{share:.3f} of each complete window's {windows['limit']} "
            f"(per window: {', '.join(str(u) for u in used)})"
        )
    else:
        admissible = shape.burst + shape.rate * span
        of_admissible = stats["ok"] / admissible
        result.update(
            of_limit=round(achieved / shape.rate if shape.sliding else of_admissible, 3),
            of_admissible=round(of_admissible, 3),
        )
        figure = (
            f"achieved {achieved:.1f}/s = {achieved / shape.rate:.3f} of the limit, "
            f"{stats['ok'] / admissible:.3f} of all it would admit in {span:.1f} s"
        )
    print(
        f"{name}: {shape.rate:g}/s allowed, ceiling {shape.concurrency}: {figure}; {tail}",
        flush=True,
    )
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tests.bench.governor", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("shapes", nargs="*", choices=(*SHAPES, []), default=[])
    p.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply every shape's prompt count (default 1: a few minutes in all)",
    )
    p.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="where the runs are written (default: a temporary directory)",
    )
    args = p.parse_args(argv)
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="pqid-bench-governor-", dir=args.work_dir) as tmp:
        for name in args.shapes or list(SHAPES):
            figures[name] = bench_shape(Path(tmp), name, args.scale)
    print("BENCH-JSON " + json.dumps({"governor": figures}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
