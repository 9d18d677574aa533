"""Replay against the real Docker Engine and the real evaluator image.

Skipped only where no Docker Engine is reachable. Where one is, the base image must exist
(CI builds it with `.ci/base-image`): a missing base image fails these tests, never skips
them. The evaluator image is built once per session and reused by tag afterwards.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from engine.docker_runner import (
    CONTAINER_UID_BASE,
    CONTAINER_USER,
    OWNER_LABEL,
    REPLAY_LABEL,
    RUN_LABEL,
    DockerEvaluatorRunner,
    EvaluationItem,
    EvaluatorConfig,
)
from engine.errors import UsageError
from engine.events import EvaluationStarted, Event, ImageReady
from engine.replay import replay
from tests.conftest import BASE_IMAGE, ROOT, _wheelhouse
from tests.helpers import GHZ_CODE, write_release

pytestmark = pytest.mark.docker

@pytest.fixture
def runner(docker_client: Any, image: str) -> DockerEvaluatorRunner:
    r = DockerEvaluatorRunner(base_image=BASE_IMAGE, wheelhouse=_wheelhouse(),
                              client=docker_client)
    # Normally the session's image; a rebuild only when the evaluator sources changed since.
    r.ensure_image(build=True)
    return r


def replay_containers(client: Any) -> list[Any]:
    return list(client.containers.list(all=True, filters={"label": REPLAY_LABEL}))


# A snippet that reports what it can reach, then builds the right circuit.
PROBE = '''
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
''' + GHZ_CODE.format(n=2)


def test_the_image_runs_the_evaluator_unprivileged(docker_client: Any, image: str) -> None:
    config = docker_client.images.get(image).attrs["Config"]
    assert config["User"] == CONTAINER_USER
    assert config["Entrypoint"][-2:] == ["-m", "evaluator"]
    assert config["Cmd"] == ["serve", "--container"]
    assert "OPENBLAS_NUM_THREADS=1" in config["Env"]


def test_replay_in_the_container_is_contained_and_cleaned_up(
        docker_client: Any, runner: DockerEvaluatorRunner, tmp_path: Path) -> None:
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
                filters={"label": f"{RUN_LABEL}={runner.run_id}"})
            hosts.extend(c.attrs for c in running)

    result = replay(release, responses, tmp_path / "out", acknowledge_code_execution=True,
                    runner=runner, progress=progress)
    cats = {e["prompt_id"]: e["category"] for e in result.evaluations}
    assert cats == {"ghz_00": "ok", "ghz_01": "ok", "ghz_02": "no_code",
                    "ghz_03": "no_response"}
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


def test_a_wall_clock_overrun_is_an_infrastructure_failure(
        docker_client: Any, image: str) -> None:
    runner = DockerEvaluatorRunner(base_image=BASE_IMAGE, wheelhouse=_wheelhouse(),
                                   client=docker_client, wall_clock_seconds=6)
    runner.ensure_image(build=True)
    meta = {"family": "ghz", "entrypoint": "build_circuit", "num_qubits": 2, "num_clbits": 2,
            "ops": {"h": 1, "cx": 1, "measure": 2}, "depth": 3,
            "reference_code": GHZ_CODE.format(n=2)}
    items = [EvaluationItem("sleepy", None, "import time\ntime.sleep(120)\n", meta),
             EvaluationItem("after", None, GHZ_CODE.format(n=2), meta)]
    t0 = time.monotonic()
    outcome = runner.run(items, EvaluatorConfig(timeout_seconds=100))
    assert time.monotonic() - t0 < 45
    assert sorted(outcome.not_evaluated) == ["after", "sleepy"]
    assert "wall-clock limit" in outcome.not_evaluated["sleepy"]
    assert replay_containers(docker_client) == []


def test_leftovers_of_dead_replays_are_removed(docker_client: Any,
                                               runner: DockerEvaluatorRunner) -> None:
    import socket

    def make(owner: str, start: bool) -> Any:
        c = docker_client.containers.create(
            runner.image, entrypoint=["python3", "-c", "import time; time.sleep(120)"],
            network_mode="none", labels={REPLAY_LABEL: "1", RUN_LABEL: "old", OWNER_LABEL: owner})
        if start:
            c.start()
        return c

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    stopped = make(f"{host}:{dead.pid}", start=False)
    orphan = make(f"{host}:{dead.pid}", start=True)
    alive = make(f"{host}:{os.getpid()}", start=True)
    try:
        assert runner.remove_leftovers() == 2
        remaining = {c.id for c in replay_containers(docker_client)}
        assert remaining == {alive.id}
        assert stopped.id not in remaining and orphan.id not in remaining
    finally:
        for c in (stopped, orphan, alive):
            try:
                c.remove(force=True)
            except Exception:
                pass


@pytest.mark.xfail(strict=False, reason=(
    "passes alone, with its file and after the hostile and bench suites, but in the full "
    "suite of a fresh clone the CLI does not exit within 60 s of SIGINT since the evaluator "
    "pipeline changes of issue 7; cause not found yet (see README, known limits)"))
def test_ctrl_c_removes_the_container(docker_client: Any, image: str, tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    responses = tmp_path / "responses.jsonl"
    responses.write_text(json.dumps({"prompt_id": "ghz_00",
                                     "generated_code": "import time\ntime.sleep(120)\n"}) + "\n")
    args = [sys.executable, "-m", "pqid_tui", "--batch", "replay", "--release-dir",
            str(release), "--responses", str(responses), "--output-dir", str(tmp_path / "out"),
            "--base-image", BASE_IMAGE, "--timeout-seconds", "100",
            "--acknowledge-code-execution"]
    if _wheelhouse():
        args += ["--wheelhouse", str(_wheelhouse())]
    # A container of an earlier test that is still going away must not count as this one's.
    earlier = {c.id for c in replay_containers(docker_client)}
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if any(c.status == "running" and c.id not in earlier
                   for c in replay_containers(docker_client)):
                break
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert [c for c in replay_containers(docker_client) if c.id not in earlier] == []
    assert not (tmp_path / "out" / "pqid_bench_canonical_evaluations.jsonl").exists()


def test_a_missing_image_needs_build_image(docker_client: Any) -> None:
    other = DockerEvaluatorRunner(base_image=BASE_IMAGE, client=docker_client,
                                  requirements=["qiskit==2.6.2", "not-built-here==0"])
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
        json.dumps({"prompt_id": "ghz_00", "generated_code": GHZ_CODE.format(n=2)}) + "\n"
        + json.dumps({"prompt_id": "ghz_01", "content": "no code here"}) + "\n")
    args = ["--batch", "replay", "--release-dir", str(release), "--responses", str(responses),
            "--output-dir", str(tmp_path / "out"), "--base-image", BASE_IMAGE,
            "--build-image", "--acknowledge-code-execution"]
    if _wheelhouse():
        args += ["--wheelhouse", str(_wheelhouse())]
    result = cli(*args, timeout=600)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert "[1/2] ghz_00: ok" in lines and "[2/2] ghz_01: no_code" in lines
    summary = json.loads(result.stdout)
    assert summary["categories"]["ok"] == 1 and summary["categories"]["no_code"] == 1
    assert summary["files"]["evaluations"].endswith("pqid_bench_canonical_evaluations.jsonl")


def test_an_incomplete_wheelhouse_fails_the_build_clearly(docker_client: Any,
                                                          tmp_path: Path) -> None:
    from engine.docker_runner import ImageBuildError

    partial = tmp_path / "wheelhouse"
    partial.mkdir()
    (partial / "dill-0.4.1-py3-none-any.whl").write_bytes(b"not a wheel at all")
    runner = DockerEvaluatorRunner(base_image=BASE_IMAGE, wheelhouse=partial,
                                   client=docker_client, requirements=["no-such-package==1.0"])
    expected = (re.escape(f"from {BASE_IMAGE} failed (a build step exited with status 1): ")
                + r"ERROR: .*no-such-package")
    with pytest.raises(ImageBuildError, match=expected):
        runner.ensure_image(build=True)
