"""Benchmark (not a test): the live runner against a loopback provider in its own process.

    python -m tests.bench.live [overhead] [ratelimit] [--n N] [--concurrency C] ...

overhead   N prompts at concurrency C against a server that answers every request after L
           seconds (L 200 ms, then 50 ms, unless --latency says otherwise). Ideally that takes
           ceil(N / C) x L; the measured time (the whole library call: run directory
           creation, every durable record write, the summary; the HTTP client's one-time
           import is timed apart) is reported over that ideal, beside the same requests sent
           through the same HTTP client with nothing else. The time above the ideal is split,
           from the run's own clocks (the summary's `send_path` and `durable_writes`): before
           the first request, after the last answer, and per request while sending: the
           flush the durability rule requires (the in_flight record's flush, and the wait for
           a flush already under way), ours (the event loop resuming the request after its
           flush, the record's file operations, the answer's bookkeeping), the round trip
           beyond L, and the governor's admission (its slow start).
ratelimit  the same runner, its concurrency ceiling far above what the server allows,
           against a server enforcing R requests per second with 429 and Retry-After, once
           with each rate-limit header family (none, OpenAI's, Anthropic's). Reported:
           achieved successful requests per second over R, the share of requests answered
           429, and terminal errors.

The server is pinned to one core and the engine to the other when the machine has two. Every
figure is measured in this run; nothing here passes or fails. The last line is
`BENCH-JSON {...}` with the figures, for the benchmark table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.config import make_config
from engine.demo import DEMO_RELEASE_DIR
from engine.run.live import run_live_model_async
from engine.rundir.shapes import RunSummary

__all__ = ["loopback_server", "main", "synthetic_release"]


def synthetic_release(root: Path, count: int) -> Path:
    """A release of `count` prompts: the demo release's prompts repeated under new IDs."""
    lines = [
        json.loads(line)
        for line in (DEMO_RELEASE_DIR / "prompts.jsonl").read_text().splitlines()
        if line.strip()
    ]
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(count):
        line = dict(lines[i % len(lines)])
        line["prompt_id"] = f"bench_{i:05d}"
        # A distinct request per prompt, as in a real panel.
        line["messages"] = [dict(m) for m in line["messages"]]
        line["messages"][-1]["content"] += f"\n(variant {i})"
        out.append(json.dumps(line, sort_keys=True))
    data = ("\n".join(out) + "\n").encode()
    (root / "prompts.jsonl").write_bytes(data)
    manifest = {
        "format": "pqid-release/1",
        "name": "bench-release",
        "version": "0.0.1",
        "prompts": {
            "path": "prompts.jsonl",
            "count": count,
            "sha256": hashlib.sha256(data).hexdigest(),
        },
        "files": {},
        "evaluator": {"version": "0.1.0"},
    }
    (root / "release.json").write_text(json.dumps(manifest, indent=2))
    return root


def _pin(cpu: int) -> None:
    with contextlib.suppress(AttributeError, OSError):
        if len(os.sched_getaffinity(0)) >= 2:
            os.sched_setaffinity(0, {cpu})


# `python -m tests.fakes.loopback` needs the checkout on the path, whatever the caller's cwd.
REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def loopback_server(*args: str) -> Iterator[str]:
    """Start `tests.fakes.loopback` with `args` in a process of its own; yield its base URL."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    preexec = (lambda: os.sched_setaffinity(0, {cpus[-1]})) if len(cpus) >= 2 else None
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.loopback", *args],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=preexec,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().split()
        if len(first) != 2 or first[0] != "LISTENING":
            raise RuntimeError("the loopback server did not start")
        yield f"http://127.0.0.1:{first[1]}"
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def server_stats(base: str, reset: bool = False) -> dict[str, Any]:
    req = urllib.request.Request(
        base + "/stats", method="POST" if reset else "GET", data=b"" if reset else None
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        result: dict[str, Any] = json.loads(resp.read())
        return result


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _run(
    base: str, release: Path, out: Path, concurrency: int, *, wire: str = "openai", **extra: Any
) -> tuple[RunSummary, float, float, float]:
    provider, base_url = ("anthropic", base) if wire == "anthropic" else ("local", base + "/v1")
    config = make_config(
        release_dir=release,
        output_dir=out,
        provider=provider,
        base_url=base_url,
        model="loopback-1",
        no_auth=True,
        acknowledge_prompt_export=True,
        concurrency=concurrency,
        **extra,
    )
    cpu0, loop0, t0 = _cpu(), time.thread_time(), time.perf_counter()
    result = asyncio.run(run_live_model_async(config))
    wall = time.perf_counter() - t0
    return result.summary, wall, _cpu() - cpu0, time.thread_time() - loop0


def _overhead_split(
    n: int, concurrency: int, latency: float, wall: float, ideal: float, summary: RunSummary
) -> dict[str, Any] | None:
    """Where the time above the ideal went, from the run's own clocks (its summary's
    `send_path` and `durable_writes`): before the first request, after the last answer, and
    per request while sending, split into the flush the durability rule requires and the rest."""
    path, writes = summary.get("send_path"), summary.get("durable_writes") or {}
    wait = writes.get("mean_wait_split_ms")
    if not path or not wait:
        return None
    mean = path["mean_ms"]
    record_ops = max(0.0, mean["in_flight_record"] - sum(wait.values()))
    per_request = {
        # The rule: a flush that begins after the record was renamed into place, and the wait
        # for the flush already under way (it began too early to cover the record).
        "flush": wait["flush"],
        "wait_for_flush_under_way": wait["to_begin"],
        # Ours: the event loop's, the journal's and the runner's time on the request's path.
        "resume_after_flush": wait["to_resume"],
        "record_file_ops": round(record_ops, 3),
        "to_send": mean["to_send"],
        "bookkeeping": mean["bookkeeping"],
        "between_requests": mean["between_requests"],
        # The HTTP client, the loopback server, and answers waiting for a busy event loop.
        "round_trip_beyond_latency": round(mean["round_trip"] - latency * 1000, 3),
        # The governor: its slow start (and any pause or pacing) before a slot was free.
        "slot": mean["slot"],
    }
    rule = per_request["flush"] + per_request["wait_for_flush_under_way"]
    ours = sum(
        per_request[k]
        for k in (
            "resume_after_flush",
            "record_file_ops",
            "to_send",
            "bookkeeping",
            "between_requests",
        )
    )
    setup = path["first_request_after_s"]
    span = path["last_answer_after_s"] - setup
    excess = sum(per_request.values())
    # Each sender sent n / concurrency requests on average, each `excess` ms late.
    accounted = excess / 1000 * n / concurrency
    return {
        "setup_s": round(setup, 3),
        "teardown_s": round(wall - setup - span, 3),
        "sending_excess_s": round(span - ideal, 3),
        "per_request_ms": per_request,
        "rule_ms_per_request": round(rule, 3),
        "ours_ms_per_request": round(ours, 3),
        "per_request_excess_ms": round(excess, 3),
        "sending_accounted_s": round(accounted, 3),
        "flush_ms": writes.get("flush_ms"),
    }


async def _http_alone(base: str, n: int, concurrency: int) -> tuple[float, float]:
    """`n` requests, `concurrency` at a time, through the runner's HTTP client and nothing
    else (no plan, no records, no governor): the wall time and the mean round trip."""
    from engine.transport.http import NetworkSender

    body = json.dumps(
        {
            "model": "loopback-1",
            "messages": [{"role": "user", "content": "Write a Qiskit circuit. " * 40}],
        }
    ).encode()
    url, headers = base + "/v1/chat/completions", {"Content-Type": "application/json"}
    sender = NetworkSender(
        connections=concurrency, timeout_seconds=60.0, connect_timeout_seconds=10.0
    )
    left, round_trips = n, 0.0

    async def send() -> None:
        nonlocal left, round_trips
        while left > 0:
            left -= 1
            began = time.perf_counter()
            json.loads((await sender.post(url, body, headers)).body)
            round_trips += time.perf_counter() - began

    began = time.perf_counter()
    try:
        await asyncio.gather(*(send() for _ in range(concurrency)))
    finally:
        await sender.aclose()
    return time.perf_counter() - began, round_trips / max(1, n)


def _flush_alone(directory: Path, count: int = 100) -> dict[str, float] | None:
    """What one flush costs on this disk with nothing else writing: a record-sized file
    written, renamed into place and flushed as the journal does, `count` times (ms)."""
    from engine.rundir import journal

    if journal._SYNCFS is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY)
    took = []
    try:
        for i in range(count):
            tmp = directory / f".flush-{i}.tmp"
            tmp.write_bytes(b"x" * 250)
            os.replace(tmp, directory / f"flush-{i % 8}.json")
            began = time.perf_counter()
            journal._SYNCFS(fd)
            took.append((time.perf_counter() - began) * 1000)
    finally:
        os.close(fd)
    took.sort()
    return {
        "mean": round(sum(took) / count, 3),
        "p50": round(took[count // 2], 3),
        "p90": round(took[count * 9 // 10], 3),
        "max": round(took[-1], 3),
    }


def bench_overhead(work: Path, n: int, concurrency: int, latency: float) -> dict[str, Any]:
    release = synthetic_release(work / f"release-{n}", n)
    out = work / f"overhead-run-{latency:g}"
    # A process imports the HTTP client once (the engine does it lazily, at its first run):
    # timed here, outside the measured call, so that every run in this process counts alike.
    began = time.perf_counter()
    import aiohttp  # noqa: F401

    import_s = time.perf_counter() - began
    flush_alone = _flush_alone(work / f"flush-alone-{latency:g}")
    with loopback_server("--latency", str(latency)) as base:
        alone_wall, alone_round_trip = asyncio.run(_http_alone(base, n, concurrency))
        server_stats(base, reset=True)
        summary, wall, cpu, loop_cpu = _run(base, release, out, concurrency)
        stats = server_stats(base)
    ideal = math.ceil(n / concurrency) * latency
    writes = summary.get("durable_writes") or {}
    result = {
        "n": n,
        "concurrency": concurrency,
        "latency_s": latency,
        "wall_s": round(wall, 3),
        "ideal_s": round(ideal, 3),
        "ratio": round(wall / ideal, 3),
        "http_alone_s": round(alone_wall, 3),
        "http_alone_ratio": round(alone_wall / ideal, 3),
        "http_alone_round_trip_beyond_latency_ms": round((alone_round_trip - latency) * 1000, 3),
        "http_client_import_s": round(import_s, 3),
        "flush_alone_ms": flush_alone,
        "cpu_s": round(cpu, 3),
        "cpu_s_per_1000": round(cpu / max(1, stats["requests"]) * 1000, 3),
        "requests": stats["requests"],
        "success": summary["success"],
        "server_max_concurrent": stats["max_concurrent"],
        "event_loop_cpu_ms_per_request": round(loop_cpu / max(1, stats["requests"]) * 1000, 3),
        "in_flight_record_wait_ms": writes.get("mean_wait_ms"),
        "in_flight_records_written_ahead": writes.get("in_flight_records_written_ahead"),
        "files_made_on_the_loop": writes.get("files_made_on_the_loop"),
        "flushes": writes.get("flushes"),
    }
    split = _overhead_split(n, concurrency, latency, wall, ideal, summary)
    if split is not None:
        result.update(split)
    print(
        f"overhead: {n} prompts, concurrency {concurrency}, latency {latency * 1000:.0f} ms: "
        f"{wall:.3f} s measured / {ideal:.3f} s ideal = {wall / ideal:.3f}; "
        f"{summary['success']} ok; the server held at most {stats['max_concurrent']} at once",
        flush=True,
    )
    print(
        f"  the same requests through the same HTTP client alone (no runner): "
        f"{alone_wall:.3f} s = {alone_wall / ideal:.3f} of the ideal, each "
        f"{result['http_alone_round_trip_beyond_latency_ms']:.2f} ms beyond the answer's "
        f"latency (importing the client, {import_s:.3f} s, is outside both)",
        flush=True,
    )
    if split is not None:
        r, f = split["per_request_ms"], split["flush_ms"] or {}
        rest = split["sending_excess_s"] - split["sending_accounted_s"]
        print(
            f"  {wall - ideal:.3f} s above the ideal: {split['setup_s']:.3f} s before the first "
            f"request (release, plan, run directory), {split['teardown_s']:.3f} s after the "
            f"last answer (last writes, summary), {split['sending_excess_s']:.3f} s while "
            "sending",
            flush=True,
        )
        print(
            f"  per request while sending, mean: {split['per_request_excess_ms']:.2f} ms "
            f"beyond the {latency * 1000:.0f} ms answer (x {n / concurrency:.2f} requests per "
            f"sender = {split['sending_accounted_s']:.3f} s; {rest:+.3f} s the senders' "
            "uneven finish)",
            flush=True,
        )
        alone = (
            f"; alone, with nothing else writing, {flush_alone['mean']:.2f} (p90 "
            f"{flush_alone['p90']:.2f})"
            if flush_alone
            else ""
        )
        print(
            f"    the flush the durability rule requires: {split['rule_ms_per_request']:.2f} ms "
            f"= {r['flush']:.2f} the in_flight record's flush (its file written ahead, so "
            f"that only its rename waited, for {writes.get('in_flight_records_written_ahead')}"
            f" of {writes.get('in_flight_records')}) + "
            f"{r['wait_for_flush_under_way']:.2f} waiting for a flush under way to end; "
            f"a flush ({writes.get('flush')}, timed by the flusher thread) took "
            f"{f.get('mean', 0):.2f} ms on average in this run (p50 {f.get('p50', 0):.2f}, "
            f"p90 {f.get('p90', 0):.2f}, p99 {f.get('p99', 0):.2f}, max "
            f"{f.get('max', 0):.2f}; {writes.get('flushes')} flushes){alone}",
            flush=True,
        )
        print(
            f"    ours: {split['ours_ms_per_request']:.2f} ms = {r['resume_after_flush']:.2f} "
            f"for the event loop to resume the request after its flush + "
            f"{r['record_file_ops']:.2f} writing and renaming the record + "
            f"{r['to_send']:.2f} handing the request over + {r['bookkeeping']:.2f} the "
            f"answer's bookkeeping + {r['between_requests']:.2f} between requests",
            flush=True,
        )
        print(
            f"    elsewhere: {r['round_trip_beyond_latency']:.2f} ms round trip beyond the "
            f"answer's latency (alone: {result['http_alone_round_trip_beyond_latency_ms']:.2f}; "
            f"the rest is answers waiting for a busy event loop); {r['slot']:.2f} ms waiting "
            "for the governor to admit the request (its slow start)",
            flush=True,
        )
    print(
        f"  engine CPU {cpu:.2f} s = {result['cpu_s_per_1000']:.2f} s per 1,000 requests "
        f"(event loop {result['event_loop_cpu_ms_per_request']:.2f} ms per request)",
        flush=True,
    )
    return result


def bench_ratelimit(
    work: Path,
    n: int,
    rate: float,
    burst: float,
    latency: float,
    headers: str,
    wire: str = "openai",
) -> dict[str, Any]:
    release = synthetic_release(work / f"release-{n}", n)
    out = work / f"ratelimit-{headers}"
    with loopback_server(
        "--latency",
        str(latency),
        "--rate",
        str(rate),
        "--burst",
        str(burst),
        "--headers",
        headers,
        "--wire",
        wire,
    ) as base:
        summary, wall, _cpu_s, _loop = _run(
            base, release, out, 256, wire=wire, max_retries=20, retry_backoff_seconds=0.5
        )
        stats = server_stats(base)
    span = (stats["last"] - stats["first"]) if stats["first"] else wall
    achieved = stats["ok"] / span if span > 0 else 0.0
    # The server starts with a full bucket, so over `span` it admits at most burst + R x span.
    admissible = burst + rate * span
    wasted = stats["throttled"] / max(1, stats["requests"])
    result = {
        "headers": headers,
        "n": n,
        "rate": rate,
        "burst": burst,
        "ceiling": 256,
        "requests": stats["requests"],
        "throttled": stats["throttled"],
        "achieved_per_s": round(achieved, 2),
        "throughput_ratio": round(achieved / rate, 3),
        "of_admissible": round(stats["ok"] / admissible, 3),
        "wasted_share": round(wasted, 4),
        "terminal_errors": summary["error"],
        "success": summary["success"],
        "wall_s": round(wall, 3),
        "rate_control": summary.get("rate_control"),
    }
    print(
        f"rate limit ({headers} headers): {rate:.0f}/s allowed (bucket of {burst:.0f}); "
        f"achieved {achieved:.1f}/s = {achieved / rate:.3f} of R, "
        f"{result['of_admissible']:.3f} of all the server would admit in {span:.1f} s; "
        f"{stats['throttled']} of {stats['requests']} requests answered 429 ({wasted:.1%}); "
        f"{summary['error']} terminal errors; {summary['success']}/{n} ok",
        flush=True,
    )
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tests.bench.live", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("parts", nargs="*", choices=("overhead", "ratelimit", []), default=[])
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument(
        "--latency",
        type=float,
        default=None,
        help="seconds the server takes per answer (default: overhead at 0.2 and "
        "again at 0.05, ratelimit at 0.05)",
    )
    p.add_argument("--rate", type=float, default=100.0)
    p.add_argument(
        "--burst",
        type=float,
        default=0.0,
        help="the server's bucket (default: one second of --rate)",
    )
    p.add_argument("--rate-n", type=int, default=3000)
    p.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="where the runs are written (default: a temporary directory)",
    )
    args = p.parse_args(argv)
    parts = args.parts or ["overhead", "ratelimit"]
    # The engine may use every core (its committer thread runs beside the event loop).
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="pqid-bench-", dir=args.work_dir) as tmp:
        work = Path(tmp)
        if "overhead" in parts:
            runs = [
                bench_overhead(work, args.n, args.concurrency, latency)
                for latency in ([args.latency] if args.latency is not None else [0.2, 0.05])
            ]
            figures["overhead"], figures["overhead_runs"] = runs[0], runs
        if "ratelimit" in parts:
            figures["ratelimit"] = [
                bench_ratelimit(
                    work,
                    args.rate_n,
                    args.rate,
                    args.burst or args.rate,
                    0.05 if args.latency is None else args.latency,
                    h,
                    "anthropic" if h == "anthropic" else "openai",
                )
                for h in ("none", "openai", "anthropic")
            ]
    print("BENCH-JSON " + json.dumps({"live": figures}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
