"""The evaluator as an unprivileged uid, as in the container: RLIMIT_NPROC and privacy hold.

Root ignores RLIMIT_NPROC and may read any process's memory, so when the tests run as root
the supervisor is started as ``nobody`` (through ``setpriv``); if that is impossible on this
machine, the tests are skipped with the reason. The fork bomb is bounded by construction
(at most 64 forks, each child only sleeps), so even a failed limit cannot hurt the host.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.evaluator.test_evaluator_serve import GHZ_BODY, MARKER, SEARCH, TARGET, fenced, ghz_with

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534

FORK_BOMB = """\
import os, time
made = failed = 0
for _ in range(64):
    try:
        pid = os.fork()
    except OSError:
        failed += 1
        continue
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    made += 1
print('MADE', made, 'FAILED', failed)
"""


def _launcher() -> tuple[list[str], dict[str, str]] | None:
    """A command prefix and environment that run this Python's packages unprivileged."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if os.geteuid() != 0:
        return [sys.executable], {**env, "PYTHONPATH": str(ROOT)}
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    drop = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    site = sysconfig.get_paths()["purelib"]
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    # This interpreter may live under a directory nobody cannot enter (/root); a system
    # interpreter of the same version with this environment's packages serves instead.
    for python in (sys.executable, shutil.which(version) or "", f"/usr/bin/{version}"):
        if not python:
            continue
        trial = {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), site])}
        probe = subprocess.run(
            [
                *drop,
                python,
                "-c",
                "import sys, subprocess, qiskit, evaluator; "
                "sys.exit(subprocess.run([sys.executable, '-c', 'import qiskit']).returncode)",
            ],
            env=trial,
            cwd="/tmp",
            capture_output=True,
            timeout=60,
        )
        if probe.returncode == 0:
            return [*drop, python], trial
    return None


@pytest.fixture(scope="module")
def evaluations() -> dict[str, dict[str, Any]]:
    launcher = _launcher()
    if launcher is None:
        pytest.skip(
            "cannot run the evaluator as an unprivileged uid here (running as root "
            "without setpriv or a world-readable Python 3 with these packages)"
        )
    prefix, env = launcher
    target = dict(TARGET)
    lines = [
        {"type": "config", "timeout_seconds": 5},
        {
            "type": "item",
            "prompt_id": "fork_bomb",
            "content": fenced(ghz_with(FORK_BOMB)),
            "target_metadata": target,
        },
        {
            "type": "item",
            "prompt_id": "search",
            "content": fenced(ghz_with(SEARCH.replace("PEEK_MEMORY", "True"))),
            "target_metadata": target,
        },
        {
            "type": "item",
            "prompt_id": "after",
            "content": fenced(GHZ_BODY),
            "target_metadata": target,
        },
    ]
    proc = subprocess.run(
        [*prefix, "-m", "evaluator", "serve"],
        input="".join(json.dumps(line) + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd="/tmp",
        start_new_session=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = {}
    for line in proc.stdout.splitlines():
        message = json.loads(line)
        if message["type"] == "evaluation":
            found[message["evaluation"]["prompt_id"]] = message["evaluation"]
    return found


def test_fork_bomb_is_held_by_rlimit_nproc(evaluations: dict[str, dict[str, Any]]) -> None:
    ev = evaluations["fork_bomb"]
    assert ev["category"] == "ok", ev
    words = ev["stdout_excerpt"].split()
    made, failed = int(words[1]), int(words[3])
    assert made <= 16 and failed >= 48, ev["stdout_excerpt"]
    assert evaluations["after"]["category"] == "ok"


def test_no_process_of_the_job_survives(evaluations: dict[str, dict[str, Any]]) -> None:
    if os.geteuid() != 0:
        pytest.skip("other processes of this uid are not ours to count")
    survivors = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
        uid = int(uid_line.split()[1])
        if uid == NOBODY and "State:\tZ" not in status:
            survivors.append(pid)
    assert survivors == []


def test_memory_of_the_other_processes_is_unreadable(
    evaluations: dict[str, dict[str, Any]],
) -> None:
    ev = evaluations["search"]
    assert ev["category"] == "ok"
    assert ev["stdout_excerpt"].startswith("HITS=0"), ev["stdout_excerpt"]
    assert "READ MEMORY OF" not in ev["stdout_excerpt"]
    assert MARKER not in json.dumps(evaluations)


def test_supervisor_marks_itself_undumpable() -> None:
    code = textwrap.dedent("""\
        from evaluator import processes
        assert processes.is_dumpable() is True
        assert processes.make_undumpable()
        assert processes.is_dumpable() is False
        """)
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
