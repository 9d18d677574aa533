"""Start-up time of the command line against `python -c pass` on the same interpreter.

    python -m tests.bench.startup [--runs N]

Times `pqid-tui --batch --help` and `pqid-tui --batch run-model --provider oracle --dry-run`
(the bundled demo release) with hyperfine when it is installed, else with its own
interleaved timing loop, and counts the modules each command leaves in `sys.modules`.
Prints the ratios to the bare interpreter, never a verdict: absolute times on a shared
machine say little. The last line is `BENCH-JSON {...}` for an aggregator.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Packages a command loads only when it needs them; reported when found.
HEAVY = ("textual", "qiskit", "docker", "httpx", "keyring", "pydantic", "rich")

# Runs pqid-tui's main with ARGS in a fresh interpreter and reports the exit status and
# sys.modules afterwards. It imports nothing of its own beyond what start-up already did,
# so the count is the command's; the command's stdout goes to /dev/null.
_PROBE = """
import os, sys
out = os.dup(1)
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
code = 0
if len(sys.argv) > 1:
    from pqid_tui.cli.main import main
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
    sys.stdout.flush()
with open(out, "w") as f:
    f.write(str(code) + "\\n" + "\\n".join(sorted(sys.modules)))
"""

HELP_ARGS = ["--batch", "--help"]
DRY_RUN_ARGS = ["--batch", "run-model", "--provider", "oracle", "--dry-run"]


def imported_modules(args: Sequence[str]) -> tuple[int, set[str]]:
    """Run `pqid-tui ARGS` in a fresh interpreter: its exit status and the modules it loaded.

    With no ARGS, the modules of a bare interpreter start-up.
    """
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0 or not done.stdout:
        raise RuntimeError(f"probe of {list(args)} failed: {done.stderr.strip()[-2000:]}")
    first, _, rest = done.stdout.partition("\n")
    return int(first), set(rest.split("\n"))


def pqid_command() -> list[str]:
    """The `pqid-tui` console script of this interpreter, else `python -m pqid_tui`."""
    script = Path(sys.executable).parent / "pqid-tui"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "pqid_tui"]


def cases() -> dict[str, list[str]]:
    pqid = pqid_command()
    return {
        "python_pass": [sys.executable, "-c", "pass"],
        "help": [*pqid, *HELP_ARGS],
        "dry_run": [*pqid, *DRY_RUN_ARGS],
    }


def time_with_hyperfine(
    hyperfine: str, commands: dict[str, list[str]], runs: int, warmup: int
) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="pqid-bench-startup-") as tmp:
        export = Path(tmp) / "hyperfine.json"
        # -N: no intermediate shell, whose own start-up would blur a 20 ms command.
        cmd = [
            hyperfine,
            "-N",
            "--style",
            "none",
            "--warmup",
            str(warmup),
            "--runs",
            str(runs),
            "--export-json",
            str(export),
            *(shlex.join(c) for c in commands.values()),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"hyperfine failed: {done.stderr.strip()[-2000:]}")
        results = json.loads(export.read_text(encoding="utf-8"))["results"]
    return {
        name: [float(t) for t in result["times"]]
        for name, result in zip(commands, results, strict=True)
    }


def time_with_loop(
    commands: dict[str, list[str]], runs: int, warmup: int
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in commands}
    # Interleaved rounds: a noisy neighbour slows every command alike, not just one.
    for i in range(warmup + runs):
        for name, cmd in commands.items():
            t0 = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            if i >= warmup:
                times[name].append(time.perf_counter() - t0)
    return times


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.startup",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--runs", type=int, default=30, help="timed runs per command")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs per command")
    parser.add_argument(
        "--no-hyperfine",
        action="store_true",
        help="use the built-in timing loop even when hyperfine is installed",
    )
    args = parser.parse_args(argv)

    commands = cases()
    for name, cmd in commands.items():
        # A command that fails would be timed failing fast: check each runs before timing.
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(
                f"{name}: {shlex.join(cmd)} exited {done.returncode}: "
                f"{done.stderr.strip()[-2000:]}",
                file=sys.stderr,
            )
            return 1

    hyperfine = None if args.no_hyperfine else shutil.which("hyperfine")
    if hyperfine:
        times = time_with_hyperfine(hyperfine, commands, args.runs, args.warmup)
        tool = "hyperfine"
    else:
        times = time_with_loop(commands, args.runs, args.warmup)
        tool = "loop"

    modules = {
        "python_pass": imported_modules([])[1],
        "help": imported_modules(HELP_ARGS)[1],
        "dry_run": imported_modules(DRY_RUN_ARGS)[1],
    }
    median = {name: statistics.median(t) for name, t in times.items()}
    low = {name: min(t) for name, t in times.items()}
    base = median["python_pass"]

    print(f"pqid-tui start-up, {args.runs} runs each ({tool}), interpreter {sys.executable}")
    print(f"{'command':<58} {'median':>9} {'min':>9} {'ratio':>6} {'min ratio':>9} {'modules':>8}")
    for name, cmd in commands.items():
        shown = shlex.join(
            [
                "python" if c == sys.executable else Path(c).name if i == 0 else c
                for i, c in enumerate(cmd)
            ]
        )
        print(
            f"{shown:<58} {median[name] * 1e3:>7.1f}ms {low[name] * 1e3:>7.1f}ms "
            f"{median[name] / base:>6.2f} {low[name] / low['python_pass']:>9.2f} "
            f"{len(modules[name]):>8}"
        )
    heavy = {
        name: sorted({m.split(".")[0] for m in mods} & set(HEAVY)) for name, mods in modules.items()
    }
    for name in ("help", "dry_run"):
        print(f"{name}: heavy packages loaded: {', '.join(heavy[name]) or 'none'}")

    figures: dict[str, Any] = {
        "tool": tool,
        "runs": args.runs,
        "python_pass_s": round(base, 6),
        "help_s": round(median["help"], 6),
        "dry_run_s": round(median["dry_run"], 6),
        "python_pass_min_s": round(low["python_pass"], 6),
        "help_min_s": round(low["help"], 6),
        "dry_run_min_s": round(low["dry_run"], 6),
        "help_ratio": round(median["help"] / base, 3),
        "dry_run_ratio": round(median["dry_run"] / base, 3),
        # Minimum over minimum: on a loaded machine the least disturbed runs agree better.
        "help_min_ratio": round(low["help"] / low["python_pass"], 3),
        "dry_run_min_ratio": round(low["dry_run"] / low["python_pass"], 3),
        "python_pass_modules": len(modules["python_pass"]),
        "help_modules": len(modules["help"]),
        "dry_run_modules": len(modules["dry_run"]),
        "help_heavy": heavy["help"],
        "dry_run_heavy": heavy["dry_run"],
    }
    print("BENCH-JSON " + json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
