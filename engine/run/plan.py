"""Planning a live run: selection, request bodies and digests; no credential, file or socket."""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Any

from engine import __version__
from engine.config import LiveRunConfig
from engine.errors import ConfigError, ReleaseError, ResumeRefused
from engine.providers.adapters import adapter_for
from engine.providers.routes import Route, resolve_route
from engine.release import Prompt, Release, load_release
from engine.release.model import FORMAT_PQID_BENCH_EVIDENCE
from engine.release.prices import estimate_tokens, load_prices, plan_cost
from engine.release.study import identity as study_identity
from engine.release.study import is_pqid_bench
from engine.release.trace import Trace, TracedRequest, TracedSide, trace_requests
from engine.rundir.storage import canonical_json, sha256_hex
from engine.states import PromptState


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One prompt's exact, credential-free request body and its hash."""

    prompt_id: str
    body: dict[str, Any]
    body_bytes: bytes
    sha256: str
    # PQID-Bench releases: the frozen study's identities of this request (engine.release.study).
    study: dict[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    """What a run would send: the route, the selection and every request body."""

    config: LiveRunConfig
    release: Release
    route: Route
    contract: dict[str, Any]
    prompts: tuple[Prompt, ...]
    requests: tuple[PlannedRequest, ...]

    @property
    def prompt_ids(self) -> tuple[str, ...]:
        return tuple(p.prompt_id for p in self.prompts)

    @property
    def prompt_ids_sha256(self) -> str:
        return sha256_hex("\n".join(self.prompt_ids) + "\n")

    @property
    def request_set_sha256(self) -> str:
        return sha256_hex("".join(f"{r.prompt_id}\t{r.sha256}\n" for r in self.requests))

    def route_dict(self) -> dict[str, Any]:
        return {
            "provider": self.route.name,
            "adapter": self.route.adapter,
            "base_url": self.route.base_url,
            "auth": self.route.auth,
            "credential_env": self.route.credential_env,
            "headers": sorted(self.route.headers),
        }

    def selection_dict(self) -> dict[str, Any]:
        c = self.config
        return {
            "split": c.split,
            "limit": c.limit,
            "prompt_ids_filter": list(c.prompt_ids) if c.prompt_ids else None,
            "count": len(self.prompts),
            "prompt_ids_sha256": self.prompt_ids_sha256,
        }

    def identity(self) -> dict[str, Any]:
        """The fields of a run manifest that make a run directory one contract."""
        return {
            "release": release_dict(self.release),
            "route": self.route_dict(),
            "model": self.config.model,
            "selection": self.selection_dict(),
            "request_set_sha256": self.request_set_sha256,
            "generation_contract": self.contract,
        }

    def cost_estimate(self) -> dict[str, Any]:
        if self.route.adapter == "oracle":
            return {"usd_low": 0.0, "usd_high": 0.0, "price": "oracle: no provider"}
        table = load_prices(self.config.prices_path)
        prompt_tokens = sum(estimate_tokens(r.body_bytes) for r in self.requests)
        return plan_cost(
            table,
            self.config.model,
            prompt_tokens,
            len(self.requests),
            self.config.max_output_tokens,
            batch=self.config.batch_api,
        )

    def to_dict(self) -> dict[str, Any]:
        """The dry-run plan as printed by `run-model --dry-run`."""
        c = self.config
        return {
            "plan": "pqid-live-run",
            "contacts_provider": False,
            "target_metadata_exported": False,
            "release": release_dict(self.release),
            "route": self.route_dict(),
            "model": c.model,
            "selection": self.selection_dict(),
            "selected_prompt_count": len(self.prompts),
            "prompt_ids_sha256": self.prompt_ids_sha256,
            "first_prompt_ids": list(self.prompt_ids[:5]),
            "request_set_sha256": self.request_set_sha256,
            "generation_contract": self.contract,
            "generation_contract_preset": c.generation_contract,
            **study_plan_dict(self),
            "credential": (
                "none (--no-auth)"
                if c.no_auth and self.route.needs_credential
                else "none (in-process oracle)"
                if self.route.adapter == "oracle"
                else "none (the route needs no key)"
                if not self.route.needs_credential
                else "read when the run starts: --api-key-file, then "
                f"${self.route.credential_env}, then the OS keyring"
                if self.route.credential_env
                else "read when the run starts: --api-key-file, then the OS keyring"
            ),
            "output_dir": str(c.output_dir) if c.output_dir else None,
            "cost_estimate": self.cost_estimate(),
            "require_exact_model": c.require_exact_model,
            "send_mode": "batch-api" if c.batch_api else "live",
            "concurrency": c.concurrency,
            "retry_policy": {
                "max_retries": c.max_retries,
                "retry_backoff_seconds": c.retry_backoff_seconds,
                "max_backoff_seconds": c.max_backoff_seconds,
                "max_retry_after_seconds": c.max_retry_after_seconds,
                "request_timeout_seconds": c.request_timeout_seconds,
            },
        }


def release_dict(release: Release) -> dict[str, Any]:
    return {
        "name": release.name,
        "version": release.version,
        "digest": release.digest,
        "prompts_sha256": release.prompts_sha256,
        "modified": release.modified,
        "prompt_count": len(release.prompts),
        "release_format": release.format,
        "profile": release.profile,
        "absent_files": len(release.absent),
        "absent": list(release.absent_summary()),
    }


def generation_contract(config: LiveRunConfig, route: Route) -> dict[str, Any]:
    """The settings that shape every request body; part of the run's identity."""
    if config.max_output_field is not None and route.adapter not in ("openai-chat", "oracle"):
        raise ConfigError(
            f"--max-output-field applies to OpenAI-compatible routes; the "
            f"{route.adapter} adapter always sends {route.max_output_field}",
            fields={
                "max_output_field": "applies to OpenAI-compatible routes; "
                f"the {route.adapter} adapter always sends "
                f"{route.max_output_field}"
            },
        )
    return {
        "temperature": None if config.omit_temperature else config.temperature,
        "top_p": None if config.omit_top_p else config.top_p,
        "max_output_tokens": config.max_output_tokens,
        "max_output_field": config.max_output_field or route.max_output_field,
        "seed": config.seed,
        "extra_body": dict(sorted(config.extra_body.items())),
        "samples_per_prompt": 1,
    }


def select_prompts(release: Release, config: LiveRunConfig) -> tuple[Prompt, ...]:
    prompts = list(release.prompts)
    if config.split is not None:
        splits = release.split_counts()
        if config.split not in splits:
            raise ConfigError(
                f"--split {config.split!r}: the release has splits {', '.join(splits)}",
                fields={"split": f"the release has splits {', '.join(splits)}"},
            )
        prompts = [p for p in prompts if p.split == config.split]
    if config.prompt_ids:
        wanted = list(dict.fromkeys(config.prompt_ids))
        by_id = release.by_id
        missing = [pid for pid in wanted if pid not in by_id]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise ConfigError(
                f"--prompt-ids: the release has no prompt {missing[0]!r}{more}",
                fields={"prompt_ids": f"the release has no prompt {missing[0]!r}{more}"},
            )
        keep = set(wanted)
        prompts = [p for p in prompts if p.prompt_id in keep]
    if config.limit is not None:
        prompts = prompts[: config.limit]
    if not prompts:
        raise ConfigError(
            "the selection is empty: check --split, --prompt-ids and --limit",
            fields={
                "limit": "the selection is empty: check the split, the prompt IDs and the limit"
            },
        )
    return tuple(prompts)


def build_plan(config: LiveRunConfig, release: Release | None = None) -> Plan:
    """Validate everything and compute the requests; reads the release, nothing else."""
    route = resolve_route(config.provider, config.base_url, config.headers)
    if config.no_auth and route.adapter == "oracle":
        pass
    release = release or load_release(
        config.release_dir, allow_modified=config.allow_modified_release
    )
    contract = generation_contract(config, route)
    adapter = adapter_for(route)
    prompts = select_prompts(release, config)
    if route.adapter == "oracle":
        without = [p.prompt_id for p in prompts if not p.target_metadata.get("reference_code")]
        if without:
            raise ConfigError(
                f"the oracle route answers each prompt with its reference code, and "
                f"{len(without)} of the {len(prompts)} selected prompts of {release.name} "
                f"{release.version} have none (first: {without[0]}); choose a model route"
            )
    requests = []
    for prompt in prompts:
        body = adapter.build_body(config.model, prompt.request_messages(), contract)
        data = canonical_json(body)
        ident = (
            study_identity(prompt, route.name, route.adapter, config.model, body)
            if is_pqid_bench(release)
            else None
        )
        requests.append(
            PlannedRequest(
                prompt.prompt_id, body, data, sha256_hex(data), ident.to_dict() if ident else None
            )
        )
    return Plan(config, release, route, contract, prompts, tuple(requests))


def check_resumable(plan: Plan) -> bool:
    """The output directory's refusals, read-only: ResumeRefused when the run would refuse it.
    True when the run would resume a run there, False when it would create one."""
    c = plan.config
    if c.output_dir is None:
        raise ConfigError("--output-dir is required for a run")
    if not (c.output_dir.is_dir() and any(c.output_dir.iterdir())):
        return False  # a new run; a dry run need not load the run-directory code for that
    from engine.rundir.records import RunDir, check_same_contract

    run_dir = RunDir(c.output_dir)
    if run_dir.is_nonempty() and not c.resume:
        raise ResumeRefused(
            f"{run_dir.path} is not empty: pass --resume to continue "
            "the run there, or choose a new --output-dir"
        )
    resuming = c.resume and run_dir.manifest_path.exists()
    if c.resume and run_dir.is_nonempty() and not resuming:
        raise ResumeRefused(f"{run_dir.path}: not a run directory (no run-manifest.json)")
    if resuming:
        check_same_contract(run_dir.read_manifest(), plan.identity())
        run_dir.reconcile(plan.prompt_ids, repair=False)  # corrupt files: refuse now
    return bool(resuming)


def output_outcome(plan: Plan) -> dict[str, Any]:
    """What the run would do with its output directory, refusals included; reads, never
    writes (an interrupted append is not repaired here)."""
    c = plan.config
    if c.output_dir is None:
        return {"action": "none", "detail": "no --output-dir given: a run needs one"}
    try:
        resuming = check_resumable(plan)
    except ResumeRefused as exc:
        return {"action": "refused", "reason": str(exc)}
    if not resuming:
        count = len(plan.requests)
        return {
            "action": "create",
            "would_send": count if c.max_new is None else min(count, c.max_new),
        }
    from engine.rundir.records import RunDir

    rec = RunDir(c.output_dir).reconcile(plan.prompt_ids, repair=False)
    counted = (PromptState.SUCCESS, PromptState.ERROR, PromptState.PENDING, PromptState.UNCERTAIN)
    states: dict[str, int] = {s: len(rec.by_state(s)) for s in counted}
    uncertain = states[PromptState.UNCERTAIN]
    if uncertain and not c.retry_uncertain:
        return {
            "action": "refused",
            "states": states,
            "reason": (
                f"{uncertain} prompt(s) were in flight when an earlier run stopped; "
                "the provider may have answered them. Pass --retry-uncertain to send them again "
                "(a possible extra paid draw)"
            ),
        }
    send = (
        states[PromptState.PENDING]
        + (states[PromptState.ERROR] if c.retry_errors else 0)
        + (uncertain if c.retry_uncertain else 0)
    )
    return {
        "action": "resume",
        "states": states,
        "would_send": send if c.max_new is None else min(send, c.max_new),
    }


def plan_live_model_run(config: LiveRunConfig) -> dict[str, Any]:
    """The dry-run plan as a dict: no credential read, no file written, no connection.
    `output` says what the run would do with its directory (`action` "refused": the run
    would refuse it, with the reason)."""
    plan = build_plan(config)
    return dict(plan.to_dict(), output=output_outcome(plan))


def environment_dict() -> dict[str, str]:
    import httpx

    return {
        "pqid_tui": __version__,
        "python": platform.python_version(),
        "httpx": httpx.__version__,
        "platform": platform.platform(terse=True),
    }


def trace_plan(plan: Plan, release: Release | None = None) -> Trace:
    """Trace a plan (a dry run) before anything is sent."""
    side = TracedSide(
        "dry-run plan",
        plan.route.name,
        plan.route.adapter,
        plan.config.model,
        plan.route.base_url,
        plan.release.digest,
    )
    requests = [TracedRequest(r.prompt_id, r.body, r.sha256, r.study) for r in plan.requests]
    return trace_requests(release or plan.release, side, requests)


def study_plan_dict(plan: Plan) -> dict[str, Any]:
    """The dry-run plan's study block (PQID-Bench releases only): each request's identities and,
    on the evidence repository, the frozen row the requests replicate."""
    if not is_pqid_bench(plan.release):
        return {}
    first = next((r.study for r in plan.requests if r.study), None)
    block: dict[str, Any] = {
        "provider": first["provider"] if first else None,
        "api_model_id": first["api_model_id"] if first else None,
        "request_family": first["request_family"] if first else None,
        "requests": [
            {
                "prompt_id": r.prompt_id,
                **{
                    k: (r.study or {}).get(k)
                    for k in ("model_input_sha256", "prompt_record_sha256", "request_sha256")
                },
            }
            for r in plan.requests
        ],
    }
    if plan.release.format == FORMAT_PQID_BENCH_EVIDENCE and first is not None:
        try:
            block["trace"] = trace_plan(plan).summary_dict()
        except ReleaseError as exc:
            block["trace"] = {"error": str(exc)}
    else:
        block["trace"] = None
    return {"study": block}
