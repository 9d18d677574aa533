"""Benchmark (not a test): the live runner against a loopback provider in its own process.

    python -m engine.bench_live [overhead] [ratelimit] [--n N] [--concurrency C] ...

overhead   N prompts at concurrency C against a server that answers every request after L
           seconds. Ideally that takes ceil(N / C) x L; the measured time (the whole library
           call: run directory creation, every durable record write, the summary) is
           reported over that ideal, with the engine's CPU seconds per 1,000 requests.
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
from engine.runner import run_live_model_async

__all__ = ["loopback_server", "main", "synthetic_release"]


def synthetic_release(root: Path, count: int) -> Path:
    """A release of `count` prompts: the demo release's prompts repeated under new IDs."""
    lines = [json.loads(line) for line in (DEMO_RELEASE_DIR / "prompts.jsonl").read_text()
             .splitlines() if line.strip()]
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
    manifest = {"format": "pqid-release/1", "name": "bench-release", "version": "0.0.1",
                "prompts": {"path": "prompts.jsonl", "count": count,
                            "sha256": hashlib.sha256(data).hexdigest()},
                "files": {}, "evaluator": {"version": "0.1.0"}}
    (root / "release.json").write_text(json.dumps(manifest, indent=2))
    return root


def _pin(cpu: int) -> None:
    with contextlib.suppress(AttributeError, OSError):
        if len(os.sched_getaffinity(0)) >= 2:
            os.sched_setaffinity(0, {cpu})


@contextlib.contextmanager
def loopback_server(*args: str) -> Iterator[str]:
    """Start `engine.loopback_server` with `args` in a process of its own; yield its base URL."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    preexec = (lambda: os.sched_setaffinity(0, {cpus[-1]})) if len(cpus) >= 2 else None
    proc = subprocess.Popen([sys.executable, "-m", "engine.loopback_server", *args],
                            stdout=subprocess.PIPE, text=True, preexec_fn=preexec)
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
    req = urllib.request.Request(base + "/stats", method="POST" if reset else "GET", data=b""
                                 if reset else None)
    with urllib.request.urlopen(req, timeout=10) as resp:
        result: dict[str, Any] = json.loads(resp.read())
        return result


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _run(base: str, release: Path, out: Path, concurrency: int, *, wire: str = "openai",
         **extra: Any) -> tuple[dict[str, Any], float, float, float]:
    provider, base_url = ("anthropic", base) if wire == "anthropic" else ("local", base + "/v1")
    config = make_config(release_dir=release, output_dir=out, provider=provider,
                         base_url=base_url, model="loopback-1", no_auth=True,
                         acknowledge_prompt_export=True, concurrency=concurrency, **extra)
    cpu0, loop0, t0 = _cpu(), time.thread_time(), time.perf_counter()
    result = asyncio.run(run_live_model_async(config))
    wall = time.perf_counter() - t0
    return result.summary, wall, _cpu() - cpu0, time.thread_time() - loop0


def bench_overhead(work: Path, n: int, concurrency: int, latency: float) -> dict[str, Any]:
    release = synthetic_release(work / f"release-{n}", n)
    with loopback_server("--latency", str(latency)) as base:
        summary, wall, cpu, loop_cpu = _run(base, release, work / "overhead-run", concurrency)
        stats = server_stats(base)
    ideal = math.ceil(n / concurrency) * latency
    result = {"n": n, "concurrency": concurrency, "latency_s": latency,
              "wall_s": round(wall, 3), "ideal_s": round(ideal, 3),
              "ratio": round(wall / ideal, 3),
              "cpu_s": round(cpu, 3), "cpu_s_per_1000": round(cpu / max(1, stats["requests"])
                                                              * 1000, 3),
              "requests": stats["requests"], "success": summary["success"],
              "server_max_concurrent": stats["max_concurrent"],
              "event_loop_cpu_ms_per_request": round(loop_cpu / max(1, stats["requests"])
                                                     * 1000, 3),
              "in_flight_record_wait_ms": (summary.get("durable_writes") or {}).get(
                  "mean_wait_ms"),
              "flushes": (summary.get("durable_writes") or {}).get("flushes")}
    print(f"overhead: {n} prompts, concurrency {concurrency}, latency {latency * 1000:.0f} ms: "
          f"{wall:.3f} s measured / {ideal:.3f} s ideal = {wall / ideal:.3f}; "
          f"{summary['success']} ok; engine CPU {cpu:.2f} s = "
          f"{result['cpu_s_per_1000']:.2f} s per 1,000 requests (event loop "
          f"{result['event_loop_cpu_ms_per_request']:.2f} ms per request); each request waited "
          f"{result['in_flight_record_wait_ms']} ms on average for its in_flight record "
          f"({result['flushes']} flushes); the server held at most "
          f"{stats['max_concurrent']} at once", flush=True)
    return result


def bench_ratelimit(work: Path, n: int, rate: float, burst: float, latency: float,
                    headers: str, wire: str = "openai") -> dict[str, Any]:
    release = synthetic_release(work / f"release-{n}", n)
    out = work / f"ratelimit-{headers}"
    with loopback_server("--latency", str(latency), "--rate", str(rate), "--burst", str(burst),
                         "--headers", headers, "--wire", wire) as base:
        summary, wall, _cpu_s, _loop = _run(base, release, out, 256, wire=wire, max_retries=20,
                                  retry_backoff_seconds=0.5)
        stats = server_stats(base)
    span = (stats["last"] - stats["first"]) if stats["first"] else wall
    achieved = stats["ok"] / span if span > 0 else 0.0
    # The server starts with a full bucket, so over `span` it admits at most burst + R x span.
    admissible = burst + rate * span
    wasted = stats["throttled"] / max(1, stats["requests"])
    result = {"headers": headers, "n": n, "rate": rate, "burst": burst, "ceiling": 256,
              "requests": stats["requests"], "throttled": stats["throttled"],
              "achieved_per_s": round(achieved, 2), "throughput_ratio": round(achieved / rate, 3),
              "of_admissible": round(stats["ok"] / admissible, 3),
              "wasted_share": round(wasted, 4), "terminal_errors": summary["error"],
              "success": summary["success"], "wall_s": round(wall, 3),
              "rate_control": summary.get("rate_control")}
    print(f"rate limit ({headers} headers): {rate:.0f}/s allowed (bucket of {burst:.0f}); "
          f"achieved {achieved:.1f}/s = {achieved / rate:.3f} of R, "
          f"{result['of_admissible']:.3f} of all the server would admit in {span:.1f} s; "
          f"{stats['throttled']} of {stats['requests']} requests answered 429 ({wasted:.1%}); "
          f"{summary['error']} terminal errors; {summary['success']}/{n} ok", flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench_live",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("parts", nargs="*", choices=("overhead", "ratelimit", []), default=[])
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--latency", type=float, default=0.05)
    p.add_argument("--rate", type=float, default=100.0)
    p.add_argument("--burst", type=float, default=0.0,
                   help="the server's bucket (default: one second of --rate)")
    p.add_argument("--rate-n", type=int, default=3000)
    p.add_argument("--work-dir", type=Path, default=None,
                   help="where the runs are written (default: a temporary directory)")
    args = p.parse_args(argv)
    parts = args.parts or ["overhead", "ratelimit"]
    # The engine may use every core (its committer thread runs beside the event loop).
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="pqid-bench-", dir=args.work_dir) as tmp:
        work = Path(tmp)
        if "overhead" in parts:
            figures["overhead"] = bench_overhead(work, args.n, args.concurrency, args.latency)
        if "ratelimit" in parts:
            figures["ratelimit"] = [
                bench_ratelimit(work, args.rate_n, args.rate, args.burst or args.rate,
                                args.latency, h,
                                "anthropic" if h == "anthropic" else "openai")
                for h in ("none", "openai", "anthropic")]
    print("BENCH-JSON " + json.dumps({"live": figures}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
