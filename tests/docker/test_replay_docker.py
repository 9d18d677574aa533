"""Replay against the real Docker Engine and the real evaluator image.

Skipped only where no Docker Engine is reachable. Where one is, the base image must exist
(CI builds it with `.ci/base-image`): a missing base image fails these tests, never skips
them. The evaluator image is built once per session and reused by tag afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from engine.errors import UsageError
from engine.events import EvaluationStarted, Event, ImageReady
from engine.replay.docker import (
    CONTAINER_UID_BASE,
    CONTAINER_USER,
    OWNER_LABEL,
    REPLAY_LABEL,
    RUN_LABEL,
    DockerEvaluatorRunner,
    EvaluationItem,
    EvaluatorConfig,
)
from engine.replay.replay import replay
from tests.conftest import BASE_IMAGE, ROOT, _wheelhouse
from tests.helpers import GHZ_CODE, write_release

pytestmark = pytest.mark.docker


@pytest.fixture
def runner(docker_client: Any, image: str) -> DockerEvaluatorRunner:
    r = DockerEvaluatorRunner(base_image=BASE_IMAGE, wheelhouse=_wheelhouse(), client=docker_client)
    # Normally the session's image; a rebuild only when the evaluator sources changed since.
    r.ensure_image(build=True)
    return r


def replay_containers(client: Any) -> list[Any]:
    return list(client.containers.list(all=True, filters={"label": REPLAY_LABEL}))


# A snippet that reports what it can reach, then builds the right circuit.
PROBE = """
import json, os, socket
facts = {"uid": os.getuid(), "gid": os.getgid(), "net": [], "writes": {}}
for address in [("1.1.1.1", 53), ("172.17.0.1", 2375), ("127.0.0.1", 2375)]:
    try:
        socket.create_connection(address, timeout=3).close()
        facts["net"].append("connected")
    except OSError as exc:
        facts["net"].append(type(exc).__name__)
try:
    socket.getaddrinfo("example.com", 80)
    facts["dns"] = "resolved"
except OSError as exc:
    facts["dns"] = type(exc).__name__
for path in ["/opt/pqid/evaluator/planted.py", "/etc/planted", "/usr/planted"]:
    try:
        with open(path, "w") as fh:
            fh.write("x")
        facts["writes"][path] = "written"
    except OSError as exc:
        facts["writes"][path] = type(exc).__name__
try:
    with open("/proc/self/mounts") as fh:
        facts["root"] = [line.split()[3] for line in fh if line.split()[1] == "/"]
except OSError as exc:
    facts["root"] = type(exc).__name__
print("FACTS" + json.dumps(facts))
""" + GHZ_CODE.format(n=2)


def test_the_image_runs_the_evaluator_unprivileged(docker_client: Any, image: str) -> None:
    config = docker_client.images.get(image).attrs["Config"]
    assert config["User"] == CONTAINER_USER
    assert config["Entrypoint"][-2:] == ["-m", "evaluator"]
    assert config["Cmd"] == ["serve", "--container"]
    assert "OPENBLAS_NUM_THREADS=1" in config["Env"]


def test_replay_in_the_container_is_contained_and_cleaned_up(
    docker_client: Any, runner: DockerEvaluatorRunner, tmp_path: Path
) -> None:
    release = write_release(tmp_path / "release", count=6)
    responses = tmp_path / "responses.jsonl"
    ref = GHZ_CODE.format(n=3)  # ghz_01 has 3 qubits
    lines = [
        {"prompt_id": "ghz_00", "content": "```python\n" + PROBE + "```", "finish_reason": "stop"},
        {"prompt_id": "ghz_01", "content": f"```python\n{ref}```", "finish_reason": "stop"},
        {"prompt_id": "ghz_02", "content": "Sorry, I cannot do that.", "finish_reason": "stop"},
        {"prompt_id": "ghz_03", "content": None, "error": "RateLimitError: 429"},
    ]
    responses.write_text("".join(json.dumps(x) + "\n" for x in lines))
    hosts: list[dict[str, Any]] = []
    events: list[Event] = []

    def progress(event: Event) -> None:
        events.append(event)
        if isinstance(event, EvaluationStarted) and not hosts:
            running = docker_client.containers.list(
                filters={"label": f"{RUN_LABEL}={runner.run_id}"}
            )
            hosts.extend(c.attrs for c in running)

    result = replay(
        release,
        responses,
        tmp_path / "out",
        acknowledge_code_execution=True,
        runner=runner,
        progress=progress,
    )
    cats = {e["prompt_id"]: e["category"] for e in result.evaluations}
    assert cats == {"ghz_00": "ok", "ghz_01": "ok", "ghz_02": "no_code", "ghz_03": "no_response"}
    assert any(isinstance(e, ImageReady) and not e.built for e in events)

    probe = result.evaluations[0]
    facts = json.loads(probe["stdout_excerpt"].split("FACTS", 1)[1].splitlines()[0])
    assert facts["uid"] >= CONTAINER_UID_BASE and facts["gid"] == facts["uid"]
    assert "connected" not in facts["net"] and facts["dns"] != "resolved"
    assert "written" not in facts["writes"].values()
    assert facts["root"] and facts["root"][0].split(",")[0] == "ro"
    assert result.summary["environment"]["qiskit"] == "2.6.2"
    assert result.summary["evaluator_version"]

    assert len(hosts) == 1, "exactly one container ran the evaluation"
    host = hosts[0]["HostConfig"]
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"] and host["SecurityOpt"] == ["no-new-privileges"]
    assert host["Memory"] == host["MemorySwap"] > 0 and host["PidsLimit"] > 0
    assert host["NanoCpus"] > 0 and "/tmp" in host["Tmpfs"]
    assert not host.get("Binds") and not hosts[0]["Mounts"]
    uid, gid = hosts[0]["Config"]["User"].split(":")
    assert int(uid) >= CONTAINER_UID_BASE and uid == gid
    assert replay_containers(docker_client) == []


def test_a_wall_clock_overrun_is_an_infrastructure_failure(docker_client: Any, image: str) -> None:
    runner = DockerEvaluatorRunner(
        base_image=BASE_IMAGE, wheelhouse=_wheelhouse(), client=docker_client, wall_clock_seconds=6
    )
    runner.ensure_image(build=True)
    meta = {
        "family": "ghz",
        "entrypoint": "build_circuit",
        "num_qubits": 2,
        "num_clbits": 2,
        "ops": {"h": 1, "cx": 1, "measure": 2},
        "depth": 3,
        "reference_code": GHZ_CODE.format(n=2),
    }
    items = [
        EvaluationItem("sleepy", None, "import time\ntime.sleep(120)\n", meta),
        EvaluationItem("after", None, GHZ_CODE.format(n=2), meta),
    ]
    t0 = time.monotonic()
    outcome = runner.run(items, EvaluatorConfig(timeout_seconds=100))
    assert time.monotonic() - t0 < 45
    assert sorted(outcome.not_evaluated) == ["after", "sleepy"]
    assert "wall-clock limit" in outcome.not_evaluated["sleepy"]
    assert replay_containers(docker_client) == []


def test_leftovers_of_dead_replays_are_removed(
    docker_client: Any, runner: DockerEvaluatorRunner
) -> None:
    def make(owner: str, start: bool) -> Any:
        c = docker_client.containers.create(
            runner.image,
            entrypoint=["python3", "-c", "import time; time.sleep(120)"],
            network_mode="none",
            labels={REPLAY_LABEL: "1", RUN_LABEL: "old", OWNER_LABEL: owner},
        )
        if start:
            c.start()
        return c

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    host = socket.gethostname()
    stopped = make(f"{host}:{dead.pid}", start=False)
    orphan = make(f"{host}:{dead.pid}", start=True)
    alive = make(f"{host}:{os.getpid()}", start=True)
    # Another live replay's probe, exited, its output not read yet: not a leftover.
    others = make(f"{host}:{other.pid}", start=False)
    try:
        assert runner.remove_leftovers() == 2
        remaining = {c.id for c in replay_containers(docker_client)}
        assert remaining == {alive.id, others.id}
        assert stopped.id not in remaining and orphan.id not in remaining
    finally:
        other.kill()
        other.wait()
        for c in (stopped, orphan, alive, others):
            try:
                c.remove(force=True)
            except Exception:
                pass


# -- Ctrl-C at each stage of a replay ------------------------------------------------------------

SLEEPER = "import time\ntime.sleep(120)\n"

# Runs the command line with SIGINT as a terminal would start it (SIG_DFL, which Python makes
# KeyboardInterrupt), or ignored as the test asks: a shell that runs the suite as a background
# job (`pytest &` in a script) hands its children SIGINT ignored, and Python then leaves it
# ignored, so a Ctrl-C test would hang. SIGUSR1 dumps every thread's stack to stderr: a replay
# that hangs says where.
_RUN_PQID_TUI = (
    "import faulthandler, runpy, signal, sys\n"
    "ignored = sys.argv[1] == 'SIG_IGN'\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN if ignored else signal.default_int_handler)\n"
    "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
    "sys.argv = ['pqid-tui', *sys.argv[2:]]\n"
    "runpy.run_module('pqid_tui', run_name='__main__', alter_sys=True)\n"
)


class ReplayCli:
    """`pqid-tui --batch replay` in a subprocess, observed through its stderr lines and the
    Docker events of its own containers (those whose owner label names its PID).

    The first container it creates is the image probe, the next ones evaluators (the image
    exists already, so nothing is built).
    """

    def __init__(
        self,
        docker_client: Any,
        tmp_path: Path,
        lines: list[dict[str, Any]],
        *,
        sigint: str = "SIG_DFL",
    ) -> None:
        release = write_release(tmp_path / "release", count=6)
        responses = tmp_path / "responses.jsonl"
        responses.write_text("".join(json.dumps(line) + "\n" for line in lines))
        self.output = tmp_path / "out"
        args = [
            "--batch",
            "replay",
            "--release-dir",
            str(release),
            "--responses",
            str(responses),
            "--output-dir",
            str(self.output),
            "--base-image",
            BASE_IMAGE,
            "--timeout-seconds",
            "100",
            "--acknowledge-code-execution",
        ]
        if _wheelhouse():
            args += ["--wheelhouse", str(_wheelhouse())]
        self.client = docker_client
        self.seen: queue.Queue[tuple[str, str]] = queue.Queue()
        self.stderr: list[str] = []
        self.created: list[str] = []
        # Subscribed before the process starts, so that no event of its can be missed.
        self.events = docker_client.events(
            decode=True, filters={"type": "container", "label": REPLAY_LABEL}
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _RUN_PQID_TUI, sigint, *args],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.owner = f"{socket.gethostname()}:{self.proc.pid}"
        self.readers = [
            threading.Thread(target=self._read_events, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def _read_events(self) -> None:
        with contextlib.suppress(Exception):  # the stream ends when `close` cuts it
            for event in self.events:
                attributes = event.get("Actor", {}).get("Attributes", {})
                if attributes.get(OWNER_LABEL) != self.owner:
                    continue
                cid, action = event.get("id", ""), event.get("Action", "")
                if action == "create":
                    self.created.append(cid)
                role = "probe" if self.created[:1] == [cid] else "evaluator"
                self.seen.put((f"{role} {action}", ""))

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip("\n"))
            self.seen.put(("stderr", line.rstrip("\n")))
        self.seen.put(("exited", ""))

    def wait_for(self, kind: str, text: str = "") -> None:
        """Block until the process shows `kind` (`evaluator start`, `stderr` with `text`...)."""
        while True:
            try:
                got, line = self.seen.get(timeout=120)
            except queue.Empty:
                pytest.fail(f"no {kind} {text} within 120 s; stderr: {self.stderr}")
            if got == kind and text in line:
                return
            if got == "exited":
                pytest.fail(f"the replay ended before {kind} {text}: {self.stderr}")

    def send(self, signum: int = signal.SIGINT) -> None:
        self.proc.send_signal(signum)

    def finish(self) -> int:
        """The exit status (a replay still running a minute after its signal has hung)."""
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGUSR1)  # its threads' stacks, on stderr
            time.sleep(2)
            stacks = "\n".join(self.stderr)
            pytest.fail(f"the replay did not exit within 60 s of its signal; stderr:\n{stacks}")

    def containers(self) -> list[dict[str, Any]]:
        return list(
            self.client.api.containers(all=True, filters={"label": f"{OWNER_LABEL}={self.owner}"})
        )

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.readers[1].join(timeout=10)
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        self.events.close()
        self.readers[0].join(timeout=10)
        for container in self.containers():  # not to leave this test's failure to the next
            with contextlib.suppress(Exception):
                self.client.api.remove_container(container["Id"], force=True)


# What each signal interrupts: the responses, then what to wait for before each signal (a Docker
# event of the replay's own containers, or a line of its stderr).
STAGES: dict[str, tuple[list[str], list[tuple[str, str]]]] = {
    "probing the image": ([SLEEPER], [("probe create", "")]),
    "running the image probe": ([SLEEPER], [("probe start", "")]),
    "creating the evaluator": ([SLEEPER], [("evaluator create", "")]),
    "starting the evaluator": ([SLEEPER], [("evaluator start", "")]),
    # The evaluator reports a result once the next snippet has run: two quick ones first.
    "after the first result": (
        [GHZ_CODE.format(n=2), GHZ_CODE.format(n=3), SLEEPER],
        [("stderr", "[1/3] ghz_00: ok")],
    ),
    # Every response answered: the engine is removing the evaluator when the signal comes.
    "removing the evaluator": ([GHZ_CODE.format(n=2)], [("evaluator kill", "")]),
    "twice, the second during the removal": (
        [SLEEPER],
        [("evaluator start", ""), ("evaluator kill", "")],
    ),
}


@pytest.mark.parametrize("stage", list(STAGES))
def test_ctrl_c_at_each_stage_exits_and_leaves_no_container(
    docker_client: Any, image: str, tmp_path: Path, stage: str
) -> None:
    codes, waits = STAGES[stage]
    cli = ReplayCli(
        docker_client,
        tmp_path,
        [{"prompt_id": f"ghz_{i:02d}", "generated_code": code} for i, code in enumerate(codes)],
    )
    try:
        for kind, text in waits:
            cli.wait_for(kind, text)
            cli.send()
        status = cli.finish()
        left = cli.containers()
    finally:
        cli.close()
    assert status == 130, cli.stderr
    assert not any("Traceback" in line for line in cli.stderr), cli.stderr
    said = [line for line in cli.stderr if not line.startswith(("image ", "[")) and line.strip()]
    assert len(said) == 1 and said[0].startswith("pqid-tui: interrupted"), cli.stderr
    assert left == [], f"left behind: {left}; stderr: {cli.stderr}"
    assert not (cli.output / "pqid_bench_canonical_evaluations.jsonl").exists()


def test_sigterm_stops_a_replay_that_ignores_sigint(
    docker_client: Any, image: str, tmp_path: Path
) -> None:
    """A background job of a shell script starts with SIGINT ignored, and keeps it so (the
    shell's wish); SIGTERM still stops it, and removes its container."""
    cli = ReplayCli(
        docker_client,
        tmp_path,
        [{"prompt_id": "ghz_00", "generated_code": SLEEPER}],
        sigint="SIG_IGN",
    )
    try:
        cli.wait_for("evaluator start")
        cli.send(signal.SIGTERM)
        status = cli.finish()
        left = cli.containers()
    finally:
        cli.close()
    assert status == 130, cli.stderr
    assert cli.stderr[-1].startswith("pqid-tui: interrupted"), cli.stderr
    assert left == [], f"left behind: {left}; stderr: {cli.stderr}"


def test_a_missing_image_needs_build_image(docker_client: Any) -> None:
    other = DockerEvaluatorRunner(
        base_image=BASE_IMAGE,
        client=docker_client,
        requirements=["qiskit==2.6.2", "not-built-here==0"],
    )
    with pytest.raises(UsageError, match=r"pqid-evaluator:[0-9a-f]{16}.*pass --build-image"):
        other.ensure_image(build=False)
    absent = DockerEvaluatorRunner(base_image="pqid-no-such-base:0", client=docker_client)
    with pytest.raises(UsageError, match=r"not on the Docker Engine.*--build-image"):
        absent.ensure_image(build=False)


def test_the_batch_replay_prints_progress_and_the_summary(image: str, tmp_path: Path) -> None:
    from tests.conftest import cli

    release = write_release(tmp_path / "release", count=6)
    responses = tmp_path / "responses.jsonl"
    responses.write_text(
        json.dumps({"prompt_id": "ghz_00", "generated_code": GHZ_CODE.format(n=2)})
        + "\n"
        + json.dumps({"prompt_id": "ghz_01", "content": "no code here"})
        + "\n"
    )
    args = [
        "--batch",
        "replay",
        "--release-dir",
        str(release),
        "--responses",
        str(responses),
        "--output-dir",
        str(tmp_path / "out"),
        "--base-image",
        BASE_IMAGE,
        "--build-image",
        "--acknowledge-code-execution",
    ]
    if _wheelhouse():
        args += ["--wheelhouse", str(_wheelhouse())]
    result = cli(*args, timeout=600)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert "[1/2] ghz_00: ok" in lines and "[2/2] ghz_01: no_code" in lines
    summary = json.loads(result.stdout)
    assert summary["categories"]["ok"] == 1 and summary["categories"]["no_code"] == 1
    assert summary["files"]["evaluations"].endswith("pqid_bench_canonical_evaluations.jsonl")


def test_an_incomplete_wheelhouse_fails_the_build_clearly(
    docker_client: Any, tmp_path: Path
) -> None:
    from engine.errors import ImageBuildError

    partial = tmp_path / "wheelhouse"
    partial.mkdir()
    (partial / "dill-0.4.1-py3-none-any.whl").write_bytes(b"not a wheel at all")
    runner = DockerEvaluatorRunner(
        base_image=BASE_IMAGE,
        wheelhouse=partial,
        client=docker_client,
        requirements=["no-such-package==1.0"],
    )
    expected = (
        re.escape(f"from {BASE_IMAGE} failed (a build step exited with status 1): ")
        + r"ERROR: .*no-such-package"
    )
    with pytest.raises(ImageBuildError, match=expected):
        runner.ensure_image(build=True)
