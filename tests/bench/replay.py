"""Benchmark (not a test): the evaluator's rate in its container, against what bounds it.

    python -m tests.bench.replay [--count N] [--fresh-count M] [--fresh-jobs J]
                                  [--repeat K] [--release-dir R] [--base-image IMAGE]
                                  [--wheelhouse DIR] [--build-image] [--cold-build]

Scores the oracle answers (each prompt's reference code) of a release, the demo release by
default, in the evaluator image, and prints figures measured in this one run; it never passes
or fails on an absolute time. The last line is `BENCH-JSON {...}` with the same figures.

The product path (what `replay` runs): one hardened container, the evaluator's supervisor with
its forking executor and its grader as two stages of a pipeline (snippets run one at a time
while the grader works through the circuits of earlier ones, a bounded queue between them).

- `container_start_s`: from just before `runner.run` (which removes leftovers, creates,
  attaches and starts the container) until the supervisor's Python code runs, read from the
  supervisor's wall clock (the container shares the host's clock: Docker keeps no time
  namespace).
- `qiskit_import_s`: one `import qiskit` in the executor, the warm parent every snippet is
  forked from, timed inside it during this run (after the evaluator's own few modules, so the
  standard-library modules both need are not counted: a strict figure). Its other preloads
  (Qiskit's lazily loaded modules, qiskit_aer), the interpreters' own start and the grader's
  import, which runs at the same time on the other core, are not in the ideal; `ready_s` says
  when the evaluator was ready to score.
- each response's own execution time: the lifetime of its forked child, from fork to reaping,
  as the executor measures it (which includes the fork, the child's limits and seccomp set-up,
  the snippet, finding the circuit, its QPY, and the child's exit), plus the grader's time on
  its circuit (loading the QPY, structure, QASM 3 export, equivalence), as the grader
  measures it. A response with no code has none; one that fails before a circuit has no grade.
  The snippet's own part inside the child is printed apart (`snippet_s`).
- `ideal_s` = container start + one Qiskit import + the sum of the responses' own execution
  times / cores, where cores is the CPUs the container may use. `wall_s` runs from the same
  start to the last evaluation received; `ideal_ratio` = wall_s / ideal_s. Removing the
  container after the last evaluation is `teardown_s`, shown apart and in
  `ideal_ratio_with_teardown`.
- `evals_per_s`: responses over the time from the first `started` message to the last
  evaluation (start-up excluded, as for the baseline); `evals_per_s_with_start` over `wall_s`.
- The product path runs `--repeat` times (3 by default), each pass a new container, every
  figure of a pass from that pass alone; all are printed, and the pass with the median
  `ideal_ratio` is the result. Before each pass the bench samples how many CPUs the rest of
  the machine keeps busy (`other_busy_cpus`): on a shared machine the cores the ideal counts
  may not all be free.

The baseline (`fresh_evals_per_s`): one fresh interpreter per response, in a container of the
same image with the same limits: a loop starts `python -c` for each response, which imports
Qiskit, executes the snippet and scores it (structure, QASM 3 export, equivalence, with the
evaluator's own grading code) in that one process. `--fresh-jobs` of them run at once (the
container's cores by default, so both sides may use every core); timed inside the container
from the first response to the last. `speedup` = evals_per_s / fresh_evals_per_s.

Image figures: `image_ready_s` is `ensure_image` (reusing the image, or building it with
`--build-image` when it is missing); `build_warm_s` is a build of the same inputs with every
layer cached; `build_cold_s` (with `--cold-build`, minutes) is a `--no-cache` build from the
local base image and the wheelhouse. Both builds go to throwaway tags, removed afterwards with
the layers they made; neither is part of any other figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.demo import DEMO_RELEASE_DIR
from engine.errors import PqidError
from engine.events import Event, ImageBuildLog
from engine.release import load_release
from engine.replay.docker import (
    IMAGE_REPOSITORY,
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
    hardened_host_config,
)

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

# Runs once in the baseline container: `python -c _ONE` per input line, `jobs` at a time.
_LOOP = r"""
import json, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
one, jobs = sys.argv[1], int(sys.argv[2])
lines = [line for line in sys.stdin if line.strip()]

def score(line):
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", one], input=line, capture_output=True,
                          text=True, timeout=300)
    seconds = time.perf_counter() - started
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        result = {"category": "crashed", "error": proc.stderr[-300:]}
    result["seconds"] = seconds
    return result

first = time.perf_counter()
with ThreadPoolExecutor(jobs) as pool:
    for result in pool.map(score, lines):
        print(json.dumps({"type": "item", **result}), flush=True)
total = time.perf_counter() - first
print(json.dumps({"type": "total", "count": len(lines), "seconds": total}), flush=True)
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
        items.append(
            EvaluationItem(
                pid,
                None,
                str(prompt.target_metadata["reference_code"]),
                dict(prompt.target_metadata),
            )
        )
    return items


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("nan")


def _sum_ms(timings: Sequence[dict[str, Any]], key: str) -> float:
    """Seconds: the sum of one millisecond field over the responses that have it."""
    return (
        sum(
            float(t[key])
            for t in timings
            if isinstance(t.get(key), (int, float)) and not isinstance(t.get(key), bool)
        )
        / 1000
    )


def _seconds(found: object, key: str) -> float:
    value = found.get(key) if isinstance(found, dict) else None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise PqidError(f"the evaluator reported no {key} (an evaluator image without timings?)")
    return float(value)


def cores(runner: DockerEvaluatorRunner) -> float:
    """The CPUs the evaluator container may use (what the runner gives it)."""
    return min(runner.limits.cpus, float(runner.client.info().get("NCPU") or 1))


def bench_container(
    runner: DockerEvaluatorRunner, items: Sequence[EvaluationItem], ncores: float
) -> dict[str, Any]:
    """The product path: one container scores every item; every part of its time apart."""
    first_started: list[float] = []
    finished: list[float] = []

    def on_line(message: dict[str, Any]) -> None:
        now = time.time()
        if message["type"] == "started" and not first_started:
            first_started.append(now)
        elif message["type"] == "evaluation":
            finished.append(now)

    t0 = time.time()
    outcome = runner.run(items, EvaluatorConfig(), on_line)
    t_end = time.time()
    if outcome.not_evaluated or len(outcome.evaluations) != len(items):
        raise PqidError(
            f"the container evaluated {len(outcome.evaluations)} of {len(items)} "
            f"items: {dict(list(outcome.not_evaluated.items())[:3])}"
        )
    if outcome.sessions != 1 or len(outcome.startup_timing) != 1:
        raise PqidError(
            f"{outcome.sessions} containers ran (an evaluator was killed): the "
            "figures need exactly one"
        )
    startup = outcome.startup_timing[0]
    executor = startup.get("executor")
    grader = startup.get("grader")
    timings = [outcome.item_timing.get(item.prompt_id, {}) for item in items]
    evaluations = list(outcome.evaluations.values())
    container_start = _seconds(startup, "started_at") - t0
    qiskit_import = _seconds(executor, "qiskit_import_seconds")
    child = _sum_ms(timings, "child_ms")
    grade = _sum_ms(timings, "grade_ms")
    ideal = container_start + qiskit_import + (child + grade) / ncores
    wall = finished[-1] - t0
    return {
        "n": len(items),
        "cores": ncores,
        "container_start_s": container_start,
        "ready_s": _seconds(startup, "ready_at") - t0,
        "qiskit_import_s": qiskit_import,
        "preload_s": _seconds(executor, "preload_seconds"),
        "grader_import_s": _seconds(grader, "import_seconds"),
        "eval_s": finished[-1] - first_started[0],
        "wall_s": wall,
        "teardown_s": t_end - finished[-1],
        "child_s": child,
        "snippet_s": _sum_ms(timings, "snippet_ms"),
        "grade_s": grade,
        "own_s": child + grade,
        "ideal_s": ideal,
        "ideal_ratio": wall / ideal,
        "ideal_ratio_with_teardown": (t_end - t0) / ideal,
        "median_child_ms": statistics.median(float(t.get("child_ms") or 0) for t in timings),
        "median_grade_ms": statistics.median(float(t.get("grade_ms") or 0) for t in timings),
        "regraded": sum(bool(t.get("regraded")) for t in timings),
        "ok": sum(e["category"] == "ok" for e in evaluations),
        "equivalent": sum(e.get("equivalent") is True for e in evaluations),
    }


def bench_fresh(
    client: Any,
    image: str,
    items: Sequence[EvaluationItem],
    limits: ContainerLimits,
    ncores: float,
    jobs: int,
) -> dict[str, Any]:
    """The baseline: a fresh interpreter per response, in a container of the same image."""
    python = client.images.get(image).attrs["Config"]["Entrypoint"][0]
    host_config = hardened_host_config(client.api, limits, ncores)
    created = client.api.create_container(
        image,
        entrypoint=[python, "-c", _LOOP],
        command=[_ONE, str(jobs)],
        stdin_open=True,
        detach=False,
        tty=False,
        user=container_user(),
        environment={},
        host_config=host_config,
        labels={REPLAY_LABEL: "1", RUN_LABEL: "bench-fresh", OWNER_LABEL: _owner()},
    )
    container = client.containers.get(created["Id"])
    results: list[dict[str, Any]] = []
    total: dict[str, Any] = {}
    sock: Any = None
    try:
        response = container.attach_socket(
            params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        )
        sock = _raw_socket(response)
        sock.settimeout(None)
        reader = _FrameReader(sock)
        container.start()
        for item in items:
            sock.sendall(
                json.dumps(
                    {
                        "prompt_id": item.prompt_id,
                        "code": item.generated_code,
                        "entrypoint": item.target_metadata.get("entrypoint"),
                        "target": item.target_metadata,
                    }
                ).encode()
                + b"\n"
            )
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
        raise PqidError(
            f"the fresh-interpreter loop scored {total.get('count')} of "
            f"{len(items)} items: {reader.stderr.decode(errors='replace')[-500:]}"
        )
    return {
        "n": len(items),
        "jobs": jobs,
        "eval_s": float(total["seconds"]),
        "median_item_s": statistics.median(r["seconds"] for r in results),
        "median_inner_s": statistics.median(r.get("inner_seconds", float("nan")) for r in results),
        "ok": sum(r.get("category") == "ok" for r in results),
        "equivalent": sum(r.get("equivalent") is True for r in results),
    }


def timed_build(runner: DockerEvaluatorRunner, *, nocache: bool) -> float:
    """Seconds to build the evaluator image to a throwaway tag; the tag and its layers go after.

    Only images this build made are removed: with the cache, the result is the existing image
    and just loses the extra tag; a new layer is removed only if nothing else uses it.
    """
    from docker.errors import DockerException

    client = runner.client
    tag = f"{IMAGE_REPOSITORY}:bench-{'cold' if nocache else 'warm'}-{runner.run_id}"
    before = {image.id for image in client.images.list(all=True)}
    made: list[str] = []

    def progress(event: Event) -> None:
        if isinstance(event, ImageBuildLog) and event.line.strip().startswith("---> "):
            made.append(event.line.strip().removeprefix("---> ").strip())

    started = time.perf_counter()
    try:
        runner.build(tag=tag, nocache=nocache, progress=progress)
        return time.perf_counter() - started
    finally:
        with contextlib.suppress(DockerException):
            client.images.remove(tag)
        for short in reversed(made):
            with contextlib.suppress(DockerException):
                image = client.images.get(short)
                if image.id not in before and not image.tags:
                    client.images.remove(image.id)


def _f(value: float) -> float:
    return round(value, 4)


def other_busy_cores(seconds: float = 1.0) -> float:
    """CPUs the rest of the machine keeps busy, sampled while this benchmark is idle.

    From /proc/stat over `seconds`; nan where it cannot be read. A noisy neighbour takes cores
    the ideal counts as ours, so every pass says how busy the machine was just before it.
    """

    def sample() -> tuple[int, int]:
        with open("/proc/stat", encoding="ascii") as handle:
            values = [int(v) for v in handle.readline().split()[1:]]
        idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
        return sum(values[:8]) - idle, sum(values[:8])

    try:
        busy0, total0 = sample()
        time.sleep(seconds)
        busy1, total1 = sample()
    except (OSError, ValueError, IndexError):
        return float("nan")
    cpus = os.cpu_count() or 1
    return cpus * (busy1 - busy0) / (total1 - total0) if total1 > total0 else float("nan")


def _print_pass(c: dict[str, Any], number: int, count: int, ncores: float) -> None:
    """One pass of the product path, every figure with what it consists of."""
    label = f"pass {number}/{count}" if count > 1 else "container"
    print(f"{label}: the rest of the machine kept {c['busy_before']:.2f} CPUs busy just before it")
    print(
        f"{label}: start {c['container_start_s']:.2f} s (create, attach, start, the "
        f"supervisor's interpreter); ready {c['ready_s']:.2f} s after that same start "
        f"(executor: import qiskit {c['qiskit_import_s']:.2f} s, all preloads "
        f"{c['preload_s']:.2f} s; grader import {c['grader_import_s']:.2f} s, alongside)"
    )
    print(
        f"{label}: {c['n']} evaluations in {c['eval_s']:.2f} s = "
        f"{_rate(c['n'], c['eval_s']):.2f} evaluations/s from the first start to the last "
        f"result; {_rate(c['n'], c['wall_s']):.2f}/s including the start; "
        f"{c['ok']}/{c['n']} ok, {c['equivalent']} equivalent, {c['regraded']} graded twice"
    )
    print(
        f"{label}: own execution time {c['own_s']:.2f} s = forked children "
        f"{c['child_s']:.2f} s (median {c['median_child_ms']:.1f} ms; the snippets' own part "
        f"{c['snippet_s']:.2f} s) + grading {c['grade_s']:.2f} s (median "
        f"{c['median_grade_ms']:.1f} ms)"
    )
    print(
        f"{label}: ideal {c['ideal_s']:.2f} s = start {c['container_start_s']:.2f} + import "
        f"qiskit {c['qiskit_import_s']:.2f} + own {c['own_s']:.2f} / {ncores:g} cores; "
        f"measured {c['wall_s']:.2f} s to the last evaluation: ratio "
        f"{c['ideal_ratio']:.2f} (with the container's removal, {c['teardown_s']:.2f} s "
        f"more: {c['ideal_ratio_with_teardown']:.2f})"
    )
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.replay",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument(
        "--count",
        type=int,
        default=None,
        help="responses to score (default: every prompt of the release once)",
    )
    parser.add_argument(
        "--fresh-count",
        type=int,
        default=None,
        help="responses for the fresh-interpreter baseline (default: --count)",
    )
    parser.add_argument(
        "--fresh-jobs",
        type=int,
        default=None,
        help="fresh interpreters at once in the baseline (default: the cores)",
    )
    parser.add_argument("--release-dir", type=Path, default=DEMO_RELEASE_DIR)
    parser.add_argument(
        "--base-image", default=None, help="base image of the evaluator image (as for replay)"
    )
    parser.add_argument(
        "--wheelhouse",
        type=Path,
        default=None,
        help="offline wheelhouse for the evaluator image (as for replay)",
    )
    parser.add_argument(
        "--build-image", action="store_true", help="build the evaluator image if it does not exist"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="passes of the product path; the median-ratio pass is the result (default 3)",
    )
    parser.add_argument(
        "--cold-build",
        action="store_true",
        help="also time a --no-cache build of the image (takes minutes)",
    )
    args = parser.parse_args(argv)
    if any(
        v is not None and v < 1
        for v in (args.count, args.fresh_count, args.fresh_jobs, args.repeat)
    ):
        parser.error("counts must be positive")
    try:
        release = load_release(args.release_dir)
        items = _items(args.release_dir, args.count)
        fresh_items = (
            items if args.fresh_count is None else _items(args.release_dir, args.fresh_count)
        )
        runner = DockerEvaluatorRunner(
            base_image=args.base_image,
            wheelhouse=args.wheelhouse,
            requirements=release.evaluator_requirements,
        )
        ncores = cores(runner)
        jobs = args.fresh_jobs or max(1, int(ncores))
        t0 = time.perf_counter()
        image = runner.ensure_image(build=args.build_image)
        image_ready = time.perf_counter() - t0
        print(
            f"release {release.name} {release.version}: {len(items)} oracle responses "
            f"(the reference code of each prompt); the container may use {ncores:g} cores"
        )
        print(
            f"image {image}: ensure_image {image_ready:.2f} s (reused or built; excluded "
            f"from every other figure)"
        )
        sys.stdout.flush()
        build_warm = timed_build(runner, nocache=False)
        print(f"image build, warm (every layer cached): {build_warm:.2f} s")
        sys.stdout.flush()

        passes = []
        for number in range(1, args.repeat + 1):
            busy = other_busy_cores()
            c = bench_container(runner, items, ncores)
            c["busy_before"] = busy
            passes.append(c)
            _print_pass(c, number, args.repeat, ncores)
        # The pass with the median ratio stands for the run (all were printed).
        c = sorted(passes, key=lambda p: float(p["ideal_ratio"]))[(len(passes) - 1) // 2]
        c_rate = _rate(c["n"], c["eval_s"])
        if len(passes) > 1:
            ratios = ", ".join(f"{float(p['ideal_ratio']):.2f}" for p in passes)
            rates = ", ".join(f"{_rate(p['n'], p['eval_s']):.1f}" for p in passes)
            print(
                f"median pass (by ideal ratio): {c_rate:.2f} evaluations/s, ideal ratio "
                f"{c['ideal_ratio']:.2f} (all passes: ratios {ratios}; evaluations/s "
                f"{rates})"
            )
        sys.stdout.flush()

        fresh = bench_fresh(runner.client, image, fresh_items, runner.limits, ncores, jobs)
        f_rate = _rate(fresh["n"], fresh["eval_s"])
        print(
            f"fresh interpreter per response (same image, {jobs} at a time): {fresh['n']} "
            f"evaluations in {fresh['eval_s']:.2f} s = {f_rate:.2f} evaluations/s (median "
            f"{fresh['median_item_s'] * 1000:.0f} ms each, of which "
            f"{fresh['median_inner_s'] * 1000:.0f} ms in the script: Qiskit import, "
            f"execution, scoring); {fresh['ok']}/{fresh['n']} ok, "
            f"{fresh['equivalent']} equivalent"
        )
        print(
            f"speedup: {c_rate / f_rate:.1f}x (container evaluations/s over fresh-interpreter "
            f"evaluations/s)"
        )
        sys.stdout.flush()

        build_cold: float | None = None
        if args.cold_build:
            build_cold = timed_build(runner, nocache=True)
            print(
                f"image build, cold (--no-cache, local base image"
                f"{' and wheelhouse' if args.wheelhouse else ''}): {build_cold:.1f} s"
            )
        figures = {
            "n": c["n"],
            "cores": ncores,
            "evals_per_s": _f(c_rate),
            "evals_per_s_with_start": _f(_rate(c["n"], c["wall_s"])),
            "fresh_evals_per_s": _f(f_rate),
            "fresh_n": fresh["n"],
            "fresh_jobs": jobs,
            "speedup": _f(c_rate / f_rate),
            "ideal_ratio": _f(c["ideal_ratio"]),
            "ideal_ratio_with_teardown": _f(c["ideal_ratio_with_teardown"]),
            **{
                k: _f(c[k])
                for k in (
                    "wall_s",
                    "ideal_s",
                    "container_start_s",
                    "qiskit_import_s",
                    "preload_s",
                    "grader_import_s",
                    "ready_s",
                    "eval_s",
                    "own_s",
                    "child_s",
                    "snippet_s",
                    "grade_s",
                    "teardown_s",
                )
            },
            "regraded": c["regraded"],
            "ok": c["ok"],
            "equivalent": c["equivalent"],
            "passes": len(passes),
            "ideal_ratios": [_f(float(p["ideal_ratio"])) for p in passes],
            "evals_per_s_passes": [_f(_rate(p["n"], p["eval_s"])) for p in passes],
            "other_busy_cpus": _f(float(c["busy_before"])),
            "image_ready_s": _f(image_ready),
            "build_warm_s": _f(build_warm),
            "build_cold_s": None if build_cold is None else _f(build_cold),
        }
        print("BENCH-JSON " + json.dumps(figures, sort_keys=True))
    except PqidError as exc:
        print(f"bench_replay: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bench_replay: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
