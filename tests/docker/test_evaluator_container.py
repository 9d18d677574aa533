"""``serve --container`` as PID 1 of its own PID namespace, the way the image runs it.

Uses ``unshare --pid --fork --mount-proc`` (needs root or user namespaces); skipped with the
reason where that is unavailable. Inside, the supervisor is init: a snippet cannot SIGKILL
it, every process it does not own is swept, and orphans are reaped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.evaluator.test_evaluator_serve import GHZ_BODY, TARGET, fenced, ghz_with

ROOT = Path(__file__).resolve().parents[2]

KILL_INIT = """\
import os, signal
try:
    os.kill(1, signal.SIGKILL)
except OSError as exc:
    print('refused', exc)
"""

# Leaves a long-lived process outside its session and many short-lived orphans (future zombies).
LITTER = """\
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(120)
    os._exit(0)
for _ in range(5):
    if os.fork() == 0:
        if os.fork() == 0:
            os._exit(0)
        os._exit(0)
time.sleep(0.2)
"""

CENSUS = """\
import os
me = os.getpid()
states = {}
for pid in filter(str.isdigit, os.listdir('/proc')):
    try:
        with open(f'/proc/{pid}/stat') as fh:
            state = fh.read().rsplit(')', 1)[1].split()[0]
    except OSError:
        continue
    states[int(pid)] = state
print('PROCS', len(states), 'ZOMBIES', sum(s == 'Z' for s in states.values()))
"""


def _unshare() -> list[str] | None:
    tool = shutil.which("unshare")
    if tool is None:
        return None
    command = [tool, "--pid", "--fork", "--mount-proc"]
    if os.geteuid() != 0:
        command.insert(1, "--map-root-user")
    probe = subprocess.run([*command, "true"], capture_output=True, timeout=30)
    return command if probe.returncode == 0 else None


@pytest.fixture(scope="module")
def evaluations(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    unshare = _unshare()
    if unshare is None:
        pytest.skip("cannot create a PID namespace here (unshare missing or not permitted)")
    lines = [
        {"type": "config", "timeout_seconds": 5},
        {
            "type": "item",
            "prompt_id": "kill_init",
            "content": fenced(ghz_with(KILL_INIT)),
            "target_metadata": TARGET,
        },
        {
            "type": "item",
            "prompt_id": "litter",
            "content": fenced(ghz_with(LITTER)),
            "target_metadata": TARGET,
        },
        {
            "type": "item",
            "prompt_id": "census",
            "content": fenced(ghz_with(CENSUS)),
            "target_metadata": TARGET,
        },
        {
            "type": "item",
            "prompt_id": "kill_parent",
            "content": fenced("import os, time\nos.kill(os.getppid(), 9)\ntime.sleep(30)\n"),
            "target_metadata": TARGET,
        },
        {
            "type": "item",
            "prompt_id": "after",
            "content": fenced(GHZ_BODY),
            "target_metadata": TARGET,
        },
    ]
    # The namespace shares this machine's file system: keep the job's temporary files apart.
    scratch = tmp_path_factory.mktemp("container-tmp")
    proc = subprocess.run(
        [*unshare, sys.executable, "-m", "evaluator", "serve", "--container"],
        input="".join(json.dumps(line) + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/tmp",
        start_new_session=True,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(ROOT),
            "TMPDIR": str(scratch),
        },
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = {}
    for line in proc.stdout.splitlines():
        message = json.loads(line)
        if message["type"] == "evaluation":
            found[message["evaluation"]["prompt_id"]] = message["evaluation"]
    assert len(found) == len(lines) - 1
    return found


def test_init_survives_sigkill_from_a_snippet(evaluations: dict[str, dict[str, Any]]) -> None:
    assert evaluations["kill_init"]["category"] == "ok"
    assert evaluations["after"]["category"] == "ok"


def test_strays_are_swept_and_orphans_reaped(evaluations: dict[str, dict[str, Any]]) -> None:
    assert evaluations["litter"]["category"] == "ok"
    assert evaluations["litter"]["stray_processes_killed"] >= 1
    words = evaluations["census"]["stdout_excerpt"].split()
    # Only the supervisor, the executor, the grader and the census snippet itself remain.
    assert words[:4] == ["PROCS", "4", "ZOMBIES", "0"], words


def test_killed_executor_is_replaced(evaluations: dict[str, dict[str, Any]]) -> None:
    assert evaluations["kill_parent"]["category"] == "execution_error"
    assert evaluations["after"]["category"] == "ok"


def test_nothing_is_left_in_the_temporary_directory(
    evaluations: dict[str, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    scratch = tmp_path_factory.getbasetemp() / "container-tmp0"
    assert list(scratch.iterdir()) == []
