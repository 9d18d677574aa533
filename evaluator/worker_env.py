"""The environment variables the evaluator's processes run with, in one place."""

from __future__ import annotations

__all__ = ["DEFAULT_PATH", "SNIPPET_ENV", "THREAD_ENV", "WORKER_ENV"]

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

# Thread pools are sized when their libraries load, so these must be set before the first
# Qiskit import. One thread each keeps a forked snippet within a small RLIMIT_NPROC, and
# QISKIT_IN_PARALLEL stops Qiskit from starting process pools of its own.
THREAD_ENV = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "RAYON_NUM_THREADS": "1",
    "MALLOC_ARENA_MAX": "2",
    "QISKIT_IN_PARALLEL": "TRUE",
}

_COMMON_ENV = {
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    **THREAD_ENV,
    "PYTHONDONTWRITEBYTECODE": "1",
}

# The executor and the grader, started by the supervisor, which adds PATH (its own), HOME,
# TMPDIR and PYTHONPATH.
WORKER_ENV = {
    **_COMMON_ENV,
    # Read only while `import qiskit` runs (Qiskit 1.x), which these processes do.
    "QISKIT_SUPPRESS_PACKAGING_WARNINGS": "Y",
    # Never read ~/.qiskit/settings.conf: nothing a snippet wrote may configure a worker.
    "QISKIT_IGNORE_USER_SETTINGS": "TRUE",
}

# A snippet's forked child, whose environment is replaced by this one (and a HOME and TMPDIR
# in its own work directory). It differs from the workers' on purpose: a fixed PATH, nothing
# of the supervisor's; no packaging-warnings switch, because the child never imports Qiskit
# afresh (it inherits the executor's import); and user settings stay readable, because its
# HOME is a fresh empty directory per snippet, so the only settings file it could find is
# one it wrote itself.
SNIPPET_ENV = {
    **_COMMON_ENV,
    "PATH": DEFAULT_PATH,
}
