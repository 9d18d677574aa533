"""pqid-tui's headless engine: releases, plans, live runs, replay and comparison.

    from engine import LiveRunConfig, plan_live_model_run, run_live_model
"""

from __future__ import annotations

__version__ = "0.1.0"

from engine.config import LiveRunConfig, make_config
from engine.plan import build_plan, plan_live_model_run
from engine.release import Release, load_release
from engine.runner import RunControl, RunResult, run_live_model, run_live_model_async

__all__ = ["LiveRunConfig", "Release", "RunControl", "RunResult", "__version__", "build_plan",
           "load_release", "make_config", "plan_live_model_run", "run_live_model",
           "run_live_model_async"]
