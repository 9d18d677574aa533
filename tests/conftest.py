"""Shared fixtures: small releases, a real Secret Service keyring, the fault server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import write_release

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def release_dir(tmp_path: Path) -> Path:
    return write_release(tmp_path / "release", count=6)


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """No provider key in the environment and a keyring that must not be touched."""
    for name in list(os.environ):
        if name.endswith(("_API_KEY", "_TOKEN")):
            monkeypatch.delenv(name, raising=False)

    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("the keyring was read")

    import keyring

    monkeypatch.setattr(keyring, "get_password", refuse)


@pytest.fixture(scope="session")
def secret_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A real, unlocked gnome-keyring Secret Service on a private D-Bus session bus.

    Yields the environment variables a process needs to use it.
    """
    for tool in ("dbus-daemon", "gnome-keyring-daemon"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed: .ci/setup installs dbus and gnome-keyring")
    home = tmp_path_factory.mktemp("keyring-home")
    runtime = home / "run"
    runtime.mkdir(mode=0o700)
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_RUNTIME_DIR": str(runtime),
        "XDG_CONFIG_HOME": str(home / "config"),
    }
    bus = subprocess.Popen(
        ["dbus-daemon", "--session", "--nofork", "--print-address=1"],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert bus.stdout is not None
    address = bus.stdout.readline().strip()
    env["DBUS_SESSION_BUS_ADDRESS"] = address
    daemon = subprocess.run(
        ["gnome-keyring-daemon", "--unlock", "--components=secrets", "--daemonize"],
        input="test-keyring-password",
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    if daemon.returncode != 0:
        bus.kill()
        bus.wait()
        bus.stdout.close()
        pytest.fail(f"gnome-keyring-daemon failed: {daemon.stderr}")
    keyring_env = {
        k: env[k]
        for k in (
            "HOME",
            "XDG_DATA_HOME",
            "XDG_RUNTIME_DIR",
            "XDG_CONFIG_HOME",
            "DBUS_SESSION_BUS_ADDRESS",
        )
    }
    keyring_env["PYTHON_KEYRING_BACKEND"] = "keyring.backends.SecretService.Keyring"
    try:
        yield keyring_env
    finally:
        subprocess.run(["pkill", "-f", f"gnome-keyring-daemon.*{home}"], check=False)
        for line in daemon.stdout.splitlines():
            if line.startswith("GNOME_KEYRING_PID="):
                subprocess.run(["kill", line.split("=", 1)[1]], check=False)
        bus.kill()
        bus.wait()
        bus.stdout.close()


@pytest.fixture
def real_keyring(secret_service: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Point this process's keyring library at the real Secret Service."""
    for key, value in secret_service.items():
        monkeypatch.setenv(key, value)
    import keyring
    from keyring.backends import SecretService

    previous = keyring.get_keyring()
    keyring.set_keyring(SecretService.Keyring())
    yield secret_service  # type: ignore[misc]
    keyring.set_keyring(previous)


def cli(
    *args: str, env: dict[str, str] | None = None, input: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run `pqid-tui` as a user would, in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "pqid_tui", *args],
        capture_output=True,
        text=True,
        env=env,
        input=input,
        timeout=timeout,
        cwd=ROOT,
    )


# -- Docker: shared by every test module marked `docker` -------------------------------------

BASE_IMAGE = os.environ.get("PQID_TEST_BASE_IMAGE", "pqid-base:bookworm")
WHEELHOUSE = ROOT / ".ci" / "wheelhouse"


def _wheelhouse() -> Path | None:
    return WHEELHOUSE if any(WHEELHOUSE.glob("*.whl")) else None


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    from docker.errors import ImageNotFound

    from engine.errors import DockerUnavailable
    from engine.replay.docker import connect

    try:
        client = connect()
    except DockerUnavailable as exc:
        pytest.skip(str(exc))
    try:
        client.images.get(BASE_IMAGE)
    except ImageNotFound:
        client.close()
        pytest.fail(
            f"the base image {BASE_IMAGE} is missing: build it with .ci/base-image "
            "(no registry is needed)"
        )
    yield client
    client.close()


@pytest.fixture(scope="session")
def image(docker_client: Any) -> str:
    """The evaluator image for the current sources, built once (reused when the tag exists)."""
    from engine.replay.docker import DockerEvaluatorRunner

    runner = DockerEvaluatorRunner(
        base_image=BASE_IMAGE, wheelhouse=_wheelhouse(), client=docker_client
    )
    return runner.ensure_image(build=True)


# -- PQID-Bench v1.0.0: the real benchmark, from ../shared (absent in a user's own clone) ----

SHARED_PQID_BENCH = ROOT.parent / "shared" / "pqid-bench-1.0.0"


class PqidBenchCopies:
    """Byte-exact copies of PQID-Bench v1.0.0, unpacked once per test session (read-only)."""

    def __init__(self, dest: Path) -> None:
        self.dest = dest
        self.core_zip = dest / "PQID-Bench-v1.0.0-core.zip"
        self.evidence = dest / "evidence"
        self._core: Path | None = None

    @property
    def core(self) -> Path:
        """The core distribution extracted (as `pqid-bench download` lays it out)."""
        if self._core is None:
            import zipfile

            out = self.dest / "core-extracted"
            if not (out / "PQID-Bench-v1.0.0-core" / "benchmark.json").is_file():
                with zipfile.ZipFile(self.core_zip) as archive:
                    archive.extractall(out)
            self._core = out / "PQID-Bench-v1.0.0-core"
        return self._core


@pytest.fixture(scope="session")
def pqid_bench(tmp_path_factory: pytest.TempPathFactory) -> PqidBenchCopies:
    """PQID-Bench v1.0.0 (core zip, extracted core, evidence repository). Tests must not write
    into these folders: copy what they modify into their own tmp_path."""
    unpack = SHARED_PQID_BENCH / "unpack"
    if not unpack.is_file():
        pytest.skip(
            f"PQID-Bench v1.0.0 copies not found at {SHARED_PQID_BENCH} (only the "
            "project's CI and development machines have ../shared)"
        )
    dest = tmp_path_factory.mktemp("pqid-bench-1.0.0")
    subprocess.run(["sh", str(unpack), str(dest)], check=True, capture_output=True, timeout=600)
    return PqidBenchCopies(dest)


# -- PQID-Bench v1.0.0's pinned environment: CPython 3.13 on Debian trixie --------------------

PQID_BENCH_BASE_IMAGE = os.environ.get("PQID_TEST_PQID_BENCH_BASE_IMAGE", "pqid-base:trixie")
WHEELHOUSE_PY313 = ROOT / ".ci" / "wheelhouse-py313"
PQID_BENCH_PINS = "pqid-bench-1.0.0.txt"


@pytest.fixture(scope="session")
def pqid_bench_image(docker_client: Any) -> str:
    """The evaluator image in PQID-Bench v1.0.0's environment (evaluator/environments/
    pqid-bench-1.0.0.txt on Python 3.13), built once; the tag a rescore of the release uses."""
    from docker.errors import ImageNotFound

    from engine.replay.docker import DockerEvaluatorRunner
    from engine.replay.environment import environments_dir, read_pin_file

    try:
        docker_client.images.get(PQID_BENCH_BASE_IMAGE)
    except ImageNotFound:
        pytest.fail(
            f"the base image {PQID_BENCH_BASE_IMAGE} is missing: build it with "
            "`.ci/base-image pqid-base:trixie trixie` (no registry is needed)"
        )
    python, pins = read_pin_file(environments_dir() / PQID_BENCH_PINS)
    wheelhouse = WHEELHOUSE_PY313 if any(WHEELHOUSE_PY313.glob("*.whl")) else None
    runner = DockerEvaluatorRunner(
        base_image=PQID_BENCH_BASE_IMAGE,
        wheelhouse=wheelhouse,
        requirements=pins,
        python_version=python,
        client=docker_client,
    )
    return runner.ensure_image(build=True)


@pytest.fixture
def pqid_bench_runner(docker_client: Any, pqid_bench_image: str) -> Any:
    """A Docker runner in PQID-Bench v1.0.0's pinned environment, its image ready."""
    from engine.replay.docker import DockerEvaluatorRunner
    from engine.replay.environment import environments_dir, read_pin_file

    python, pins = read_pin_file(environments_dir() / PQID_BENCH_PINS)
    wheelhouse = WHEELHOUSE_PY313 if any(WHEELHOUSE_PY313.glob("*.whl")) else None
    runner = DockerEvaluatorRunner(
        base_image=PQID_BENCH_BASE_IMAGE,
        wheelhouse=wheelhouse,
        requirements=pins,
        python_version=python,
        client=docker_client,
    )
    runner.ensure_image(build=False)
    return runner
