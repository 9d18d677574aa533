"""One invocation's hold on its run directory: the resume policy and what it will send.

Both sending strategies (one POST per prompt, or the OpenAI Batch API) start from the same
session: the acknowledgement, the output directory's refusals, the credential, the run
directory created or resumed, its records reconciled, the uncertain refusal and the list of
prompts to send (DESIGN.md, "Resume rules").
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable

from engine import __version__
from engine.config import LiveRunConfig
from engine.errors import ConfigError, ResumeRefused
from engine.providers.credentials import Credential, resolve_credential
from engine.run.plan import Plan, PlannedRequest, check_resumable, environment_dict, release_dict
from engine.rundir.layout import BATCH_STATE
from engine.rundir.records import RUN_FORMAT, PromptStatus, Reconciled, RunDir, utc_now
from engine.rundir.shapes import RequestLine, RunManifest
from engine.states import PromptState


def build_manifest(plan: Plan, credential_source: str) -> RunManifest:
    c = plan.config
    return {
        "format": RUN_FORMAT,
        "kind": "live_replication",
        "created_at_utc": utc_now(),
        "tool": {"name": "pqid-tui", "version": __version__},
        "environment": environment_dict(),
        "release": release_dict(plan.release),
        "publishable": not plan.release.modified,
        "route": plan.route_dict(),
        "model": c.model,
        "selection": plan.selection_dict(),
        "selected_prompt_ids": list(plan.prompt_ids),
        "request_set_sha256": plan.request_set_sha256,
        "generation_contract": plan.contract,
        "generation_contract_preset": c.generation_contract,
        "credential_source": credential_source,
        "contacts_provider": plan.route.adapter != "oracle",
        "send_mode": "batch-api" if c.batch_api else "live",
        "target_metadata_exported": False,
    }


def request_record(req: PlannedRequest) -> RequestLine:
    """One line of requests.jsonl: the exact body, the project's hash of its bytes and, on a
    PQID-Bench release, the frozen study's identities of the same request (`study`)."""
    record: RequestLine = {
        "prompt_id": req.prompt_id,
        "request_sha256": req.sha256,
        "body": req.body,
    }
    if req.study is not None:
        record["study"] = req.study
    return record


def refuse_live_resume_of_open_batch(run_dir: RunDir) -> None:
    """A batch still open at the provider must be finished by the batch path: sending its
    prompts live as well would pay for each of them twice."""
    path = run_dir.path / BATCH_STATE
    if not path.exists():
        return
    try:
        phase = json.loads(path.read_text()).get("phase")
    except (OSError, ValueError, AttributeError):
        phase = "unreadable"
    if phase != "materialised":
        raise ResumeRefused(
            f"{run_dir.path} holds an OpenAI batch that is not finished "
            f"(phase {phase!r}); resume it with --batch-api so its prompts are "
            "not sent (and paid for) twice"
        )


class Session:
    """The run directory of one invocation, prepared for sending (`prepare`)."""

    def __init__(
        self,
        config: LiveRunConfig,
        plan: Plan,
        run_dir: RunDir,
        *,
        env: dict[str, str] | None = None,
        only: Iterable[str] | None = None,
    ) -> None:
        """`only`: this invocation sends no prompt outside it (the selection, and so the
        run's identity, stays the run directory's), and only its own uncertain prompts can
        block it. Every one of them must be a prompt of the run."""
        self.config = config
        self.plan = plan
        self.run_dir = run_dir
        self.env = env
        self.only: set[str] | None = None if only is None else set(only)
        if self.only is not None:
            unknown = sorted(self.only - set(plan.prompt_ids))
            if unknown:
                raise ConfigError(f"the run has no prompt {unknown[0]!r}")
        self.credential: Credential | None = None
        self.reconciled: Reconciled | None = None

    @property
    def secret(self) -> str | None:
        return self.credential.secret if self.credential else None

    @property
    def statuses(self) -> dict[str, PromptStatus]:
        assert self.reconciled is not None, "only after prepare()"
        return self.reconciled.statuses

    def prepare(
        self,
        *,
        held: Collection[str] = (),
        uncertain_held: bool = False,
    ) -> list[PlannedRequest]:
        """Check the output directory, read the credential, create or resume the run dir;
        return the prompts to send, in plan order.

        Of the session's `only` prompts, when it has them. `held`: prompts an unfinished batch
        holds; they are settled by that batch, never sent again. `uncertain_held`: the caller
        has checked that every uncertain prompt is one of `held` (pending in the batch, not
        uncertain).
        """
        c, plan, only = self.config, self.plan, self.only
        if plan.route.adapter != "oracle" and not c.acknowledge_prompt_export:
            raise ConfigError(
                "sending prompts to a provider needs --acknowledge-third-party-prompt-export "
                "(the provider's retention, policy, quota and billing terms apply)"
            )
        # The same refusals as the dry run's plan (engine.run.plan), read-only.
        resuming = check_resumable(plan)
        if resuming and not c.batch_api:
            refuse_live_resume_of_open_batch(self.run_dir)
        self.credential = resolve_credential(
            plan.route, c.api_key_file, no_auth=c.no_auth, env=self.env
        )
        requests = [request_record(r) for r in plan.requests]
        if resuming:
            self.run_dir.ensure_layout()
            if not self.run_dir.requests_path.exists():
                self.run_dir.write_requests(requests)
        else:
            self.run_dir.create(build_manifest(plan, self.credential.source), requests)
        if resuming:
            rec = self.run_dir.reconcile(plan.prompt_ids)
        else:  # just created: nothing to read back
            rec = Reconciled(
                statuses={pid: PromptStatus(pid, PromptState.PENDING) for pid in plan.prompt_ids}
            )
        self.reconciled = rec
        uncertain = [p for p in rec.by_state(PromptState.UNCERTAIN) if only is None or p in only]
        if uncertain and not c.retry_uncertain and not uncertain_held:
            raise ResumeRefused(
                f"{len(uncertain)} prompt(s) were in flight when an earlier run stopped "
                f"({', '.join(uncertain[:5])}{', ...' if len(uncertain) > 5 else ''}); the "
                "provider may have answered them. Pass --retry-uncertain to send them again "
                "(a possible extra paid draw; the uncertain attempt stays in the history)"
            )
        to_send = []
        for req in plan.requests:
            if (only is not None and req.prompt_id not in only) or req.prompt_id in held:
                continue
            state = rec.statuses[req.prompt_id].state
            if (
                state == PromptState.PENDING
                or (state == PromptState.ERROR and c.retry_errors)
                or (state == PromptState.UNCERTAIN and c.retry_uncertain)
            ):
                to_send.append(req)
        if c.max_new is not None:
            to_send = to_send[: c.max_new]
        return to_send


__all__ = ["Session", "build_manifest", "refuse_live_resume_of_open_batch", "request_record"]
