"""Benchmark (not a test): evaluations per second in the evaluator container.

    python -m engine.bench_replay [--count N] [--fresh-count M] [--release-dir R]
                                  [--base-image IMAGE] [--wheelhouse DIR] [--build-image]

Scores the oracle answers (each prompt's reference code) of a release, the demo release by
default, twice, in the same evaluator image:

1. the product path: one hardened container, the evaluator's supervisor with a forking executor
   and a separate grader (what `replay` runs). The container's start (create, start, both
   interpreters importing Qiskit) is reported separately from the rate;
2. one fresh interpreter per response: a loop in a container of the same image starts
   `python -c` for each response, which imports Qiskit, executes the snippet and scores it
   (structure, QASM 3 export, equivalence, with the evaluator's own grading code) in that one
   process. Measured inside the container, from the first response to the last.

and prints the measured numbers and their ratio. Image build time is never included (the image
is built or reused first, and that time is printed apart).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.demo import DEMO_RELEASE_DIR
from engine.docker_runner import (
    OWNER_LABEL,
    REPLAY_LABEL,
    RUN_LABEL,
    ContainerLimits,
    DockerEvaluatorRunner,
    EvaluationItem,
    EvaluatorConfig,
    _FrameReader,
    _owner,
    _raw_socket,
    _split_lines,
    container_user,
)
from engine.errors import PqidError
from engine.release import load_release

__all__ = ["main"]

# Runs in a fresh interpreter per response: execute the snippet, then score its circuit in the
# same process with the evaluator's own discovery and grading code.
_ONE = r"""
import io, json, sys, time
started = time.perf_counter()
item = json.loads(sys.stdin.read())
from qiskit import QuantumCircuit, qpy
from evaluator import discover
from evaluator.grading import Grader
result = {"prompt_id": item["prompt_id"]}
try:
    namespace = {"__name__": "__pqid_snippet__"}
    exec(compile(item["code"], "snippet.py", "exec"), namespace)
    found = discover.find_circuit(namespace, item["entrypoint"],
                                  lambda value: isinstance(value, QuantumCircuit),
                                  discover.assignment_order(item["code"]))
    if found.circuit is None:
        result["category"] = "no_circuit"
    else:
        buffer = io.BytesIO()
        qpy.dump(found.circuit, buffer)
        stages = list(Grader().grade({"prompt_id": item["prompt_id"],
                                      "target_metadata": item["target"]}, buffer.getvalue()))
        structure, final = stages[0], stages[-1]
        match = all(structure.get(k) for k in ("width_match", "gate_types_match",
                                               "gate_counts_match"))
        result["category"] = "ok" if match else "mismatch"
        result["equivalent"] = final.get("equivalent")
except Exception as exc:
    result["category"] = "execution_error"
    result["error"] = f"{type(exc).__name__}: {exc}"[:300]
result["inner_seconds"] = time.perf_counter() - started
print(json.dumps(result))
"""

# Runs once in the baseline container: one `python -c _ONE` per input line.
_LOOP = r"""
import json, subprocess, sys, time
one = sys.argv[1]
count, first = 0, None
for line in sys.stdin:
    if not line.strip():
        continue
    started = time.perf_counter()
    first = started if first is None else first
    proc = subprocess.run([sys.executable, "-c", one], input=line, capture_output=True,
                          text=True, timeout=300)
    seconds = time.perf_counter() - started
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        result = {"category": "crashed", "error": proc.stderr[-300:]}
    result["seconds"] = seconds
    print(json.dumps({"type": "item", **result}), flush=True)
    count += 1
total = time.perf_counter() - first if first is not None else 0.0
print(json.dumps({"type": "total", "count": count, "seconds": total}), flush=True)
"""


def _items(release_dir: Path, count: int | None) -> list[EvaluationItem]:
    """The oracle answers: each prompt's reference code, cycling when count exceeds them."""
    release = load_release(release_dir)
    prompts = [p for p in release.prompts if p.target_metadata.get("reference_code")]
    wanted = count if count is not None else len(prompts)
    items = []
    for i in range(wanted):
        prompt = prompts[i % len(prompts)]
        lap = i // len(prompts)
        pid = prompt.prompt_id if lap == 0 else f"{prompt.prompt_id}#{lap + 1}"
        items.append(EvaluationItem(pid, None, str(prompt.target_metadata["reference_code"]),
                                    dict(prompt.target_metadata)))
    return items


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("nan")


def bench_container(runner: DockerEvaluatorRunner, items: Sequence[EvaluationItem]
                    ) -> dict[str, Any]:
    """The product path: one container scores every item; start-up timed apart."""
    marks: dict[str, float] = {}
    finished: list[float] = []

    def on_line(message: dict[str, Any]) -> None:
        now = time.perf_counter()
        if message["type"] == "started":
            marks.setdefault("first_started", now)
        elif message["type"] == "evaluation":
            finished.append(now)

    t0 = time.perf_counter()
    outcome = runner.run(items, EvaluatorConfig(), on_line)
    t_end = time.perf_counter()
    if outcome.not_evaluated or len(outcome.evaluations) != len(items):
        raise PqidError(f"the container evaluated {len(outcome.evaluations)} of {len(items)} "
                        f"items: {dict(list(outcome.not_evaluated.items())[:3])}")
    first = marks["first_started"]
    evaluations = list(outcome.evaluations.values())
    durations = [e["duration_ms"] / 1000 for e in evaluations
                 if isinstance(e.get("duration_ms"), (int, float))]
    return {
        "count": len(items),
        "start_seconds": first - t0,
        "eval_seconds": finished[-1] - first,
        "teardown_seconds": t_end - finished[-1],
        "median_item_seconds": statistics.median(durations) if durations else float("nan"),
        "ok": sum(e["category"] == "ok" for e in evaluations),
        "equivalent": sum(e.get("equivalent") is True for e in evaluations),
        "containers": outcome.sessions,
    }


def bench_fresh(client: Any, image: str, items: Sequence[EvaluationItem],
                limits: ContainerLimits) -> dict[str, Any]:
    """The baseline: a fresh interpreter per response, in a container of the same image."""
    from docker.types import Ulimit

    python = client.images.get(image).attrs["Config"]["Entrypoint"][0]
    host_config = client.api.create_host_config(
        network_mode="none", read_only=True,
        tmpfs={"/tmp": f"rw,exec,nosuid,nodev,size={limits.tmpfs_size},"
                       f"nr_inodes={limits.tmpfs_inodes},mode=1777"},
        mem_limit=limits.mem_limit, memswap_limit=limits.mem_limit,
        pids_limit=limits.pids_limit,
        nano_cpus=int(min(limits.cpus, float(client.info().get("NCPU") or 1)) * 1e9),
        cap_drop=["ALL"], security_opt=["no-new-privileges"],
        ulimits=[Ulimit(name="nofile", soft=limits.nofile, hard=limits.nofile)])
    created = client.api.create_container(
        image, entrypoint=[python, "-c", _LOOP], command=[_ONE], stdin_open=True,
        detach=False, tty=False, user=container_user(), environment={},
        host_config=host_config,
        labels={REPLAY_LABEL: "1", RUN_LABEL: "bench-fresh", OWNER_LABEL: _owner()})
    container = client.containers.get(created["Id"])
    results: list[dict[str, Any]] = []
    total: dict[str, Any] = {}
    sock: Any = None
    try:
        response = container.attach_socket(params={"stdin": 1, "stdout": 1, "stderr": 1,
                                                   "stream": 1})
        sock = _raw_socket(response)
        sock.settimeout(None)
        reader = _FrameReader(sock)
        container.start()
        for item in items:
            sock.sendall(json.dumps({"prompt_id": item.prompt_id, "code": item.generated_code,
                                     "entrypoint": item.target_metadata.get("entrypoint"),
                                     "target": item.target_metadata}).encode() + b"\n")
        sock.shutdown(socket.SHUT_WR)
        for raw in _split_lines(reader.stdout_chunks()):
            message = json.loads(raw)
            if message.get("type") == "item":
                results.append(message)
            elif message.get("type") == "total":
                total = message
    finally:
        with contextlib.suppress(Exception):
            sock.close()
        with contextlib.suppress(Exception):
            container.remove(force=True)
    if total.get("count") != len(items):
        raise PqidError(f"the fresh-interpreter loop scored {total.get('count')} of "
                        f"{len(items)} items: {reader.stderr.decode(errors='replace')[-500:]}")
    return {
        "count": len(items),
        "eval_seconds": float(total["seconds"]),
        "median_item_seconds": statistics.median(r["seconds"] for r in results),
        "median_inner_seconds": statistics.median(r.get("inner_seconds", float("nan"))
                                                  for r in results),
        "ok": sum(r.get("category") == "ok" for r in results),
        "equivalent": sum(r.get("equivalent") is True for r in results),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.bench_replay",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=None,
                        help="responses to score (default: every prompt of the release once)")
    parser.add_argument("--fresh-count", type=int, default=None,
                        help="responses for the fresh-interpreter baseline (default: --count)")
    parser.add_argument("--release-dir", type=Path, default=DEMO_RELEASE_DIR)
    parser.add_argument("--base-image", default=None,
                        help="base image of the evaluator image (as for replay)")
    parser.add_argument("--wheelhouse", type=Path, default=None,
                        help="offline wheelhouse for the evaluator image (as for replay)")
    parser.add_argument("--build-image", action="store_true",
                        help="build the evaluator image if it does not exist")
    args = parser.parse_args(argv)
    if (args.count is not None and args.count < 1) or (
            args.fresh_count is not None and args.fresh_count < 1):
        parser.error("counts must be positive")
    try:
        release = load_release(args.release_dir)
        items = _items(args.release_dir, args.count)
        fresh_items = items if args.fresh_count is None else _items(args.release_dir,
                                                                    args.fresh_count)
        runner = DockerEvaluatorRunner(base_image=args.base_image, wheelhouse=args.wheelhouse,
                                       requirements=release.evaluator_requirements)
        t0 = time.perf_counter()
        image = runner.ensure_image(build=args.build_image)
        image_seconds = time.perf_counter() - t0
        print(f"release {release.name} {release.version}: {len(items)} oracle responses "
              f"(the reference code of each prompt)")
        print(f"image {image} ready in {image_seconds:.1f} s (excluded from every figure)")
        sys.stdout.flush()
        container = bench_container(runner, items)
        c_rate = _rate(container["count"], container["eval_seconds"])
        print(f"container: start to ready {container['start_seconds']:.2f} s (create, start, "
              f"executor and grader importing Qiskit); {container['count']} evaluations in "
              f"{container['eval_seconds']:.2f} s = {c_rate:.2f} evaluations/s (median "
              f"{container['median_item_seconds'] * 1000:.0f} ms each); "
              f"{container['ok']}/{container['count']} ok, {container['equivalent']} equivalent; "
              f"{container['containers']} container(s)")
        sys.stdout.flush()
        fresh = bench_fresh(runner.client, image, fresh_items, runner.limits)
        f_rate = _rate(fresh["count"], fresh["eval_seconds"])
        print(f"fresh interpreter per response (same image): {fresh['count']} evaluations in "
              f"{fresh['eval_seconds']:.2f} s = {f_rate:.2f} evaluations/s (median "
              f"{fresh['median_item_seconds'] * 1000:.0f} ms each, of which "
              f"{fresh['median_inner_seconds'] * 1000:.0f} ms in the script: Qiskit import, "
              f"execution, scoring); {fresh['ok']}/{fresh['count']} ok, "
              f"{fresh['equivalent']} equivalent")
        print(f"ratio: {c_rate / f_rate:.1f}x (container evaluations/s over fresh-interpreter "
              f"evaluations/s)")
        with_start = _rate(container["count"],
                           container["eval_seconds"] + container["start_seconds"])
        print(f"including the container's start: {with_start:.2f} evaluations/s, "
              f"{with_start / f_rate:.1f}x")
    except PqidError as exc:
        print(f"bench_replay: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bench_replay: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
