"""pqid-tui's headless engine: releases, plans, live runs, replay and comparison.

from engine import LiveRunConfig, plan_live_model_run, run_live_model
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from engine.config import LiveRunConfig, make_config
    from engine.release import Release, load_release
    from engine.release.trace import trace_run
    from engine.replay.compare import Comparison
    from engine.replay.reproduce import Reproduction
    from engine.run.live import RunControl, RunResult, run_live_model, run_live_model_async
    from engine.run.plan import build_plan, plan_live_model_run

# Loaded on first use: `import engine.errors` (every command does) must not pay for pydantic
# and httpx, which only some commands need.
_LAZY = {
    "LiveRunConfig": "engine.config",
    "make_config": "engine.config",
    "build_plan": "engine.run.plan",
    "plan_live_model_run": "engine.run.plan",
    "Release": "engine.release",
    "load_release": "engine.release",
    "RunControl": "engine.run.live",
    "RunResult": "engine.run.live",
    "run_live_model": "engine.run.live",
    "run_live_model_async": "engine.run.live",
    "Comparison": "engine.replay.compare",
    "Reproduction": "engine.replay.reproduce",
    "trace_run": "engine.release.trace",
}

# The operations named like their modules (compare, replay, reproduce, rescore) are imported
# from those modules: `engine.replay.compare` must stay the module whatever was imported first.
__all__ = [
    "Comparison",
    "LiveRunConfig",
    "Release",
    "Reproduction",
    "RunControl",
    "RunResult",
    "__version__",
    "build_plan",
    "load_release",
    "make_config",
    "plan_live_model_run",
    "run_live_model",
    "run_live_model_async",
    "trace_run",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
