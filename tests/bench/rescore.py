"""Benchmark (not a test): rescoring the frozen study, hardened, against its reference harness.

    python -m tests.bench.rescore [--release-dir EVIDENCE] [--model LABEL ...]
                                   [--base-image IMAGE] [--wheelhouse DIR] [--build-image]

Both sides score the same cells (every archived response set of the frozen matrix, or the
chosen models') in the same evaluator image, built for the release's pinned environment; the
figures are from this one run and nothing passes or fails on them. The last line is
`BENCH-JSON {...}`.

- Hardened: `engine.replay.rescore.rescore` as `pqid-tui --batch rescore` runs it, with the image
  already there: reading the responses and the frozen cells, one evaluator container
  (network-less, read-only, unprivileged), every response scored under the PQID-Bench
  contract (the strict run and the target-context recovery run, which is skipped, its
  verdict taken from the strict run's circuits, when the code provably cannot see the
  difference: `recovery_reused`), each run in a fresh forked child, its circuits graded in
  another process, and the comparison. `hardened_s` is that
  whole call.
- Unhardened: the study's own reference harness, `scripts/run_pqid_bench_external_model_
  generation_harness.py` of the user's evidence copy (read at benchmark time, never shipped
  with the project), imported in one interpreter in a container of the same image (network
  off, nothing else restricted) and its `evaluate_responses` called once per response set:
  the code runs with `exec` in the harness's own process. `harness_s` is that container's
  start to its exit (the files are copied in before the clock starts); `harness_inside_s` is
  the harness's own time inside it, Qiskit's import included.
- `ratio` = hardened_s / harness_s (the goal: at most 1.5). Cells per second on both sides.
- Where the hardened time goes, from the evaluator's own per-response timing: each forked
  child's life (fork to reaping: limits, seccomp, the snippet, finding the circuits, their QPY,
  exit) for the strict and the recovery run, the snippets' own part of it, and the grader's
  time; `startup_s` is from starting the container until the evaluator was ready.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.errors import PqidError, UsageError
from engine.release import Release, load_release
from engine.replay.docker import DockerEvaluatorRunner
from engine.replay.environment import release_environment
from engine.replay.replay import evaluator_runner
from engine.replay.rescore import ENDPOINTS, ResponseSet, rescore, select_rows, study_sets

__all__ = ["main"]

HARNESS = "scripts/run_pqid_bench_external_model_generation_harness.py"
HARNESS_INPUTS = "/pqid-bench-harness"

# The driver (the project's own code): imports the user's copy of the harness and calls its
# evaluate_responses on each response set, timing each; prints one JSON line at the end.
_DRIVER = r"""
import json, sys, time
from pathlib import Path
root = Path(sys.argv[1])
t0 = time.perf_counter()
sys.path.insert(0, str(root / "scripts"))
import run_pqid_bench_external_model_generation_harness as harness
harness.copy_baseline.import_qiskit()
imported = time.perf_counter() - t0
prompts = [json.loads(l) for l in (root / "prompts.jsonl").read_text().splitlines() if l.strip()]
rows = [{"row_id": p["row_id"], "label": p["label"], "metadata": dict(p["target_metadata"])}
        for p in prompts]
fields = json.loads(sys.argv[2])
out = {"import_s": imported, "sets": {}}
for path in sorted((root / "responses").glob("*.jsonl")):
    started = time.perf_counter()
    records, missing = harness.evaluate_responses(rows, prompts, path)
    seconds = time.perf_counter() - started
    cells = {}
    for r in records:
        ex, checks = r.get("execution") or {}, r.get("structural_checks") or {}
        verdicts = {"execution": bool(ex.get("execution_success") and ex.get("circuit_found")),
                    "assembly": bool((ex.get("qasm3_export") or {}).get("success")),
                    "signature": bool(checks.get("all_match"))}
        for name, key in fields:
            verdicts.setdefault(name, bool(checks.get(key)))
        cells[r["prompt_id"]] = verdicts
    out["sets"][path.stem] = {"seconds": seconds, "cells": cells, "missing": len(missing)}
out["inside_s"] = time.perf_counter() - t0
print(json.dumps(out))
"""


def _tar(files: Mapping[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        dirs = sorted({str(Path(name).parent) for name in files} - {"."})
        for d in [HARNESS_INPUTS.lstrip("/"), *(f"{HARNESS_INPUTS.lstrip('/')}/{x}" for x in dirs)]:
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(f"{HARNESS_INPUTS.lstrip('/')}/{name}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def harness_inputs(release: Release, sets: Sequence[ResponseSet]) -> dict[str, bytes]:
    """The harness's modules (from the user's copy), the prompts and the response sets."""
    scripts = release.root / "scripts"
    if not (release.root / HARNESS).is_file():
        raise UsageError(f"{release.root / HARNESS}: the reference harness is not in this copy")
    files = {f"scripts/{p.name}": p.read_bytes() for p in sorted(scripts.glob("run_*.py"))}
    files["driver.py"] = _DRIVER.encode()
    lines = []
    for p in release.prompts:
        record = dict(p.source_record or {})
        record.setdefault("prompt_id", p.prompt_id)
        record.setdefault("row_id", p.row_id)
        record.setdefault("label", p.label)
        record["target_metadata"] = dict(p.target_metadata)
        lines.append(json.dumps(record))
    files["prompts.jsonl"] = ("\n".join(lines) + "\n").encode()
    for rs in sets:
        files[f"responses/{rs.label}.jsonl"] = rs.responses_path.read_bytes()
    return files


def bench_harness(
    runner: DockerEvaluatorRunner, image: str, files: Mapping[str, bytes]
) -> dict[str, Any]:
    """The reference harness in one container of the image, in process and unhardened."""
    client = runner.client
    fields = [[n, k] for n, k in ENDPOINTS if n not in ("execution", "assembly", "signature")]
    container = client.containers.create(
        image,
        entrypoint=["/opt/pqid-venv/bin/python"],
        command=[f"{HARNESS_INPUTS}/driver.py", HARNESS_INPUTS, json.dumps(fields)],
        network_mode="none",
        working_dir="/tmp",
        environment={"HOME": "/tmp"},
    )
    try:
        container.put_archive("/", _tar(files))
        started = time.monotonic()
        container.start()
        status = container.wait(timeout=3600)
        wall = time.monotonic() - started
        out = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        err = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
    finally:
        container.remove(force=True)
    if status.get("StatusCode") != 0:
        raise PqidError(
            f"the reference harness failed (exit {status.get('StatusCode')}): {err[-800:]}"
        )
    found = json.loads([ln for ln in out.splitlines() if ln.strip()][-1])
    found["wall_s"] = wall
    return dict(found)


def _ms_sum(timings: Sequence[Mapping[str, Any]], *keys: str) -> float:
    total = 0.0
    for t in timings:
        for key in keys:
            value = t.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                total += float(value)
    return total / 1000


def harness_agreement(harness: Mapping[str, Any], sets: Sequence[ResponseSet]) -> dict[str, int]:
    """How many of the harness's own verdicts here equal the frozen cells, per endpoint."""
    agree = {n: 0 for n, _ in ENDPOINTS}
    for rs in sets:
        cells = harness["sets"].get(rs.label, {}).get("cells", {})
        for pid, frozen in (rs.frozen or {}).items():
            now = cells.get(pid)
            if now is None:
                continue
            for name, key in ENDPOINTS:
                agree[name] += now[name] == (frozen.get(key) is True)
    return agree


def default_evidence() -> Path:
    """The evidence copy beside the repository (`../shared/pqid-bench-1.0.0`), unpacked."""
    unpack = Path(__file__).resolve().parents[3] / "shared" / "pqid-bench-1.0.0" / "unpack"
    if not unpack.is_file():
        raise UsageError(
            "no --release-dir given and no PQID-Bench copy beside the repository "
            f"({unpack}): pass --release-dir EVIDENCE"
        )
    dest = (
        subprocess.run(["sh", str(unpack)], check=True, capture_output=True, text=True, timeout=600)
        .stdout.strip()
        .splitlines()[-1]
    )
    return Path(dest) / "evidence"


def run(
    release_dir: Path,
    *,
    models: Sequence[str] | None,
    base_image: str | None,
    wheelhouse: Path | None,
    build_image: bool,
) -> dict[str, Any]:
    release = load_release(release_dir)
    rows = select_rows(release, models)
    sets = study_sets(release, rows)
    cells = sum(len(rs.lines) for rs in sets)
    pin = release_environment(release.evaluator_requirements, release.python_version)
    runner = evaluator_runner(pin, base_image=base_image, wheelhouse=wheelhouse)
    t = time.monotonic()
    image = runner.ensure_image(build=build_image)
    image_s = time.monotonic() - t
    print(
        f"image {image} ready in {image_s:.1f} s; {cells} cells of {len(sets)} models", flush=True
    )

    harness = bench_harness(runner, image, harness_inputs(release, sets))
    harness_cells = sum(len(s["cells"]) for s in harness["sets"].values())
    agree = harness_agreement(harness, sets)
    print(
        f"reference harness: {harness_cells} cells in {harness['wall_s']:.1f} s "
        f"(inside {harness['inside_s']:.1f} s, Qiskit import {harness['import_s']:.2f} s); "
        f"its verdicts equal the frozen ones on "
        + ", ".join(f"{n} {agree[n]}" for n in ("execution", "assembly", "signature")),
        flush=True,
    )

    t = time.monotonic()
    result = rescore(
        release, acknowledge_code_execution=True, models=[r.label for r in rows], runner=runner
    )
    hardened = time.monotonic() - t
    report, outcome = result.report, result.outcome
    assert outcome is not None
    totals = report["totals"]["endpoints"]
    timings = list(outcome.item_timing.values())
    hello = outcome.startup_timing[0] if outcome.startup_timing else {}
    ready = hello.get("ready_at") if isinstance(hello, dict) else None
    began = hello.get("started_at") if isinstance(hello, dict) else None
    figures: dict[str, Any] = {
        "cells": cells,
        "models": len(sets),
        "image": image,
        "image_ready_s": image_s,
        "hardened_s": hardened,
        "scoring_s": report["timing"]["scoring_s"],
        "harness_s": harness["wall_s"],
        "harness_inside_s": harness["inside_s"],
        "harness_import_s": harness["import_s"],
        "harness_evaluate_s": sum(s["seconds"] for s in harness["sets"].values()),
        "ratio": hardened / harness["wall_s"],
        "hardened_cells_per_s": cells / hardened,
        "harness_cells_per_s": cells / harness["wall_s"],
        "agreement": {n: totals[n]["agree"] for n, _ in ENDPOINTS},
        "harness_agreement": agree,
        "startup_s": (float(ready) - float(began))
        if isinstance(ready, (int, float)) and isinstance(began, (int, float))
        else None,
        "strict_child_s": _ms_sum(timings, "child_ms"),
        "recovery_child_s": _ms_sum(timings, "recovery_child_ms"),
        "snippet_s": _ms_sum(timings, "snippet_ms", "recovery_snippet_ms"),
        "grade_s": _ms_sum(timings, "grade_ms"),
        # Responses whose recovery verdict came from the strict run's circuits (one child).
        "recovery_reused": sum(1 for t in timings if t.get("recovery_reused") is True),
        "containers": report["containers"],
        "cores": min(runner.limits.cpus, float(runner.client.info().get("NCPU") or 1)),
    }
    children = figures["strict_child_s"] + figures["recovery_child_s"]
    figures["child_ms_per_cell"] = 1000 * children / cells if cells else None
    figures["grade_ms_per_cell"] = 1000 * figures["grade_s"] / cells if cells else None
    return figures


def describe(f: Mapping[str, Any]) -> list[str]:
    return [
        f"cells: {f['cells']} ({f['models']} models), image {f['image']}",
        f"hardened rescore: {f['hardened_s']:.1f} s ({f['hardened_cells_per_s']:.1f} cells/s; "
        f"scoring {f['scoring_s']:.1f} s, {f['containers']} container)",
        f"reference harness, unhardened: {f['harness_s']:.1f} s "
        f"({f['harness_cells_per_s']:.1f} cells/s; Qiskit import {f['harness_import_s']:.2f} s, "
        f"evaluate_responses {f['harness_evaluate_s']:.1f} s)",
        f"ratio hardened / harness: {f['ratio']:.2f} (goal <= 1.5)",
        f"hardened time: start-up {f['startup_s'] or 0:.2f} s; forked children "
        f"{f['strict_child_s']:.1f} s strict + {f['recovery_child_s']:.1f} s recovery "
        f"({f['child_ms_per_cell']:.1f} ms per cell, of which the snippets themselves "
        f"{f['snippet_s']:.1f} s); grader {f['grade_s']:.1f} s "
        f"({f['grade_ms_per_cell']:.1f} ms per cell, overlapped); {f['cores']:.0f} cores",
        f"recovery run reused from the strict run (provably the same): "
        f"{f['recovery_reused']} of {f['cells']} cells",
        "agreement with the frozen cells: "
        + ", ".join(f"{n} {v}/{f['cells']}" for n, v in f["agreement"].items()),
        "the harness's own agreement here: "
        + ", ".join(f"{n} {v}/{f['cells']}" for n, v in f["harness_agreement"].items()),
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tests.bench.rescore", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--release-dir",
        type=Path,
        default=None,
        help="the PQID-Bench evidence repository (default: ../shared's copy)",
    )
    p.add_argument("--model", action="append", dest="models", metavar="LABEL")
    p.add_argument("--base-image", default=None)
    p.add_argument("--wheelhouse", type=Path, default=None)
    p.add_argument("--build-image", action="store_true")
    args = p.parse_args(argv)
    try:
        release_dir = args.release_dir or default_evidence()
        figures = run(
            release_dir,
            models=args.models,
            base_image=args.base_image,
            wheelhouse=args.wheelhouse,
            build_image=args.build_image,
        )
    except PqidError as exc:
        print(f"bench_rescore: {exc}", file=sys.stderr)
        return 2
    for line in describe(figures):
        print(line)
    print("BENCH-JSON " + json.dumps({"rescore": figures}, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
