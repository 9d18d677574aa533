"""The grader process: loads candidate circuits and grades them where no snippet ever ran.

The supervisor starts it as a fresh interpreter and sends, per candidate, a JSON frame (prompt
id, target metadata, equivalence settings) and a QPY frame; it answers with a "structure"
frame and then a "final" frame, so a grade that stalls still leaves the structural verdict.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from typing import Any

from evaluator import processes, wire

__all__ = ["main"]

# Importing Qiskit reserves ~1.3 GB of address space; this much more is left for grading.
_HEADROOM_BYTES = 1 << 30


def _vm_size() -> int:
    """This process's current address-space size in bytes."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _limit_memory(memory_mb: int) -> None:
    """Cap the address space so one huge circuit fails with MemoryError instead of thrashing."""
    limit = max(memory_mb << 20, _vm_size() + _HEADROOM_BYTES)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ValueError, OSError):
        pass


def main(argv: list[str] | None = None) -> int:
    """Serve grading requests until the supervisor closes the pipe."""
    parser = argparse.ArgumentParser(prog="python -m evaluator.grader")
    parser.add_argument("--memory-mb", type=int, default=2048)
    args = parser.parse_args(argv)
    processes.make_undumpable()
    proto_in = os.dup(0)
    proto_out = os.dup(1)
    # Prints from reference code must not land in the protocol stream.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]

    began = time.perf_counter()
    from evaluator.grading import Grader

    seconds = time.perf_counter() - began
    grader = Grader()
    _limit_memory(args.memory_mb)
    reader = wire.FrameReader(proto_in)
    timing = {
        "import_seconds": seconds,
        "import_began_at": time.time() - (time.perf_counter() - began),
        "ready_at": time.time(),
    }
    ready = {"type": "ready", "pid": os.getpid(), "timing": timing}
    wire.send_frames(proto_out, [wire.encode_json(ready)])
    while True:
        try:
            raw = reader.read()
            data = reader.read()
        except wire.PeerClosed:
            return 0
        try:
            request: Any = wire.decode_json(raw)
            if not isinstance(request, dict):
                raise ValueError("request is not an object")
            received = time.perf_counter()
            for stage in grader.grade(request, data):
                # The time spent on this circuit so far (it is what a grade costs).
                stage["seconds"] = time.perf_counter() - received
                wire.send_frames(proto_out, [wire.encode_json(stage)])
        except wire.PeerClosed:
            return 0
        except Exception as exc:
            failure = {"stage": "failed", "error": f"{type(exc).__name__}: {exc}"[:300]}
            wire.send_frames(proto_out, [wire.encode_json(failure)])


if __name__ == "__main__":
    sys.exit(main())
