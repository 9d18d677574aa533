"""The stability draw: each selected prompt sent a second time, into a separate sub-run."""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path
from typing import Any, Protocol

import httpx

from engine.config import LiveRunConfig
from engine.events import ProgressCallback
from engine.run.control import RunResult
from engine.rundir.layout import MANIFEST
from engine.rundir.records import RunDir

RECAST_SUBDIR = "recast"


class Runner(Protocol):
    """A run's async entry point (the live sender's or the Batch API's)."""

    def __call__(
        self,
        config: LiveRunConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        progress: ProgressCallback | None = None,
        env: dict[str, str] | None = None,
    ) -> Awaitable[RunResult]: ...


def recast_config(config: LiveRunConfig) -> LiveRunConfig:
    """The same contract, into `OUTPUT/recast/`, resumed when it already exists."""
    assert config.output_dir is not None
    target = Path(config.output_dir) / RECAST_SUBDIR
    return config.model_copy(
        update={"output_dir": target, "recast": False, "resume": (target / MANIFEST).exists()}
    )


def stability(main: Path, recast: Path) -> dict[str, Any]:
    """How many prompts answered in both draws got a different response."""
    first = {r["prompt_id"]: r for r in RunDir(main).read_responses()}
    second = {r["prompt_id"]: r for r in RunDir(recast).read_responses()}
    both = [pid for pid in first if pid in second]
    changed = sorted(pid for pid in both if first[pid].get("content") != second[pid].get("content"))
    code_changed = sorted(
        pid for pid in both if first[pid].get("generated_code") != second[pid].get("generated_code")
    )
    return {
        "compared": len(both),
        "identical": len(both) - len(changed),
        "changed": len(changed),
        "changed_prompts": changed,
        "code_changed": len(code_changed),
        "recast_dir": str(recast),
    }


async def run_recast_async(
    runner: Runner,
    config: LiveRunConfig,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    progress: ProgressCallback | None = None,
    env: dict[str, str] | None = None,
) -> tuple[RunResult, dict[str, Any]]:
    """Run the second draw with `runner` and compare it with the first."""
    sub = recast_config(config)
    result = await runner(sub, transport=transport, progress=progress, env=env)
    assert config.output_dir is not None and sub.output_dir is not None
    report = stability(Path(config.output_dir), Path(sub.output_dir))
    report["temperature"] = config.temperature if not config.omit_temperature else None
    return result, report


async def run_with_recast(
    runner: Runner,
    config: LiveRunConfig,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    progress: ProgressCallback | None = None,
    env: dict[str, str] | None = None,
) -> RunResult:
    """Run `config` with `runner`; with `recast`, then the second draw into `OUTPUT/recast/`
    by the same runner, and the summary gains `recast` and `stability`."""
    result = await runner(config, transport=transport, progress=progress, env=env)
    if config.recast:
        second, report = await run_recast_async(
            runner, config, transport=transport, progress=progress, env=env
        )
        result.summary["recast"] = second.to_dict()
        result.summary["stability"] = report
    return result


__all__ = [
    "RECAST_SUBDIR",
    "Runner",
    "recast_config",
    "run_recast_async",
    "run_with_recast",
    "stability",
]
