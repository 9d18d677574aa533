"""Which frozen PQID-Bench row a run's requests replicate, request for request, and how the
others differ: the run's requests held against every frozen model's archived requests."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import InputError
from engine.release.model import Release
from engine.release.study import (
    STUDY_PROVIDER,
    ArchivedRow,
    StudyIdentity,
    identity,
    read_archived_rows,
    recorded_body,
    sent_body,
)
from engine.rundir.storage import canonical_json, read_json_file, read_jsonl_objects, sha256_hex

TRACE_FORMAT = "pqid-study-trace/1"
TRACE_FORMATS = ("json", "text")
# Body fields that carry the prompt (per wire format); `model` is compared on its own.
MESSAGE_KEYS = frozenset(
    {"messages", "system", "contents", "systemInstruction", "system_instruction", "input", "prompt"}
)
_ABSENT = "(absent)"


@dataclass(frozen=True, slots=True)
class TracedRequest:
    """One request of the run (or the plan): its body and what was recorded beside it."""

    prompt_id: str
    body: Mapping[str, Any]
    sha256: str | None = None  # the project's hash of the bytes sent, as recorded
    recorded: Mapping[str, Any] | None = None  # the study identities, as recorded


@dataclass(frozen=True, slots=True)
class TracedSide:
    """What the requests were made for: route, adapter and model."""

    source: str
    provider: str
    adapter: str
    model: str
    base_url: str | None = None
    release_digest: str | None = None


@dataclass(slots=True)
class RowMatch:
    """How the run's requests compare with one frozen row's archived requests."""

    row: ArchivedRow
    compared: int = 0
    identical_requests: int = 0
    identical_sent_bodies: int = 0
    same_model_input: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.row.to_dict(),
            "compared": self.compared,
            "identical_requests": self.identical_requests,
            "identical_sent_bodies": self.identical_sent_bodies,
            "same_model_input": self.same_model_input,
        }


@dataclass(slots=True)
class Trace:
    """The result: the replicated row (if any), the closest row and the differences."""

    release: Release
    side: TracedSide
    requests: int
    study_provider: str | None
    request_family: str | None
    rows: list[RowMatch]
    replicates: RowMatch | None
    same_sent_bodies: RowMatch | None
    closest: RowMatch | None
    unknown_prompts: list[str]
    recorded_identities: int
    recorded_identities_agree: int
    request_hashes_ok: int
    request_hashes_recorded: int
    differences: dict[str, Any] = field(default_factory=dict)
    differing_prompts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def scope(self) -> str | None:
        match = self.replicates
        if match is None:
            return None
        return "full" if match.compared == len(match.row.records) else "partial"

    def summary_dict(self) -> dict[str, Any]:
        """The verdict in a few fields (the dry-run plan carries this)."""
        rep = self.replicates
        closest = self.closest
        return {
            "replicates": None
            if rep is None
            else {
                "model_label": rep.row.model_label,
                "slug": rep.row.slug,
                "provider": rep.row.provider,
                "api_model_id": rep.row.api_model_id,
                "scope": self.scope,
                "prompts": rep.compared,
                "of": len(rep.row.records),
            },
            "closest": None if closest is None else closest.row.slug,
            "differing_prompts": len(self.differing_prompts),
        }

    def to_dict(self) -> dict[str, Any]:
        s = self.side
        return {
            "trace": TRACE_FORMAT,
            "release": {
                "root": str(self.release.root),
                "format": self.release.format,
                "digest": self.release.digest,
                "same_release_as_run": (
                    None if s.release_digest is None else s.release_digest == self.release.digest
                ),
            },
            "run": {
                "source": s.source,
                "provider": s.provider,
                "adapter": s.adapter,
                "model": s.model,
                "base_url": s.base_url,
                "study_provider": self.study_provider,
                "request_family": self.request_family,
                "requests": self.requests,
                "unknown_prompts": self.unknown_prompts,
                "recorded_identities": self.recorded_identities,
                "recorded_identities_agree": self.recorded_identities_agree,
                "request_hashes_recorded": self.request_hashes_recorded,
                "request_hashes_ok": self.request_hashes_ok,
            },
            **self.summary_dict(),
            "same_sent_bodies_as": (
                None if self.same_sent_bodies is None else self.same_sent_bodies.row.slug
            ),
            "closest_row": None if self.closest is None else self.closest.to_dict(),
            "differences": self.differences,
            "differing_prompt_list": self.differing_prompts,
            "rows": [m.to_dict() for m in self.rows],
        }

    def render(self, fmt: str = "json") -> str:
        if fmt == "json":
            return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"
        return self._text()

    def _text(self) -> str:
        s = self.side
        lines = [
            f"run: {s.source}",
            f"route {s.provider} ({self.request_family or s.adapter}), model {s.model}, "
            f"{self.requests} request(s)",
        ]
        if self.recorded_identities:
            lines.append(
                f"study identities recorded: {self.recorded_identities}, agreeing "
                f"with the release: {self.recorded_identities_agree}"
            )
        if self.request_hashes_recorded != self.request_hashes_ok:
            lines.append(
                f"request hashes that do not match their body: "
                f"{self.request_hashes_recorded - self.request_hashes_ok}"
            )
        if self.unknown_prompts:
            lines.append(
                f"prompts not in the release: {len(self.unknown_prompts)} "
                f"({', '.join(self.unknown_prompts[:5])})"
            )
        rep = self.replicates
        if rep is not None:
            lines.append(
                f"replicates: {rep.row.model_label} [{rep.row.provider} "
                f"{rep.row.api_model_id}], request for request, {rep.compared} of "
                f"{len(rep.row.records)} prompts ({self.scope})"
            )
        else:
            lines.append("replicates: no frozen row")
            if self.same_sent_bodies is not None:
                m = self.same_sent_bodies
                lines.append(
                    f"sends what the study sent for {m.row.model_label} "
                    f"[{m.row.provider} {m.row.api_model_id}] on {m.compared} prompts "
                    "(the study's request records spell those bodies differently)"
                )
        closest = self.closest
        if closest is not None and self.differing_prompts:
            lines.append(
                f"closest row: {closest.row.model_label} [{closest.row.provider} "
                f"{closest.row.api_model_id}]: {closest.identical_requests} of "
                f"{self.requests} requests identical; "
                f"{len(self.differing_prompts)} differ"
            )
            diff = self.differences
            for key in ("route", "model"):
                if key in diff:
                    lines.append(
                        f"  {key}: run {json.dumps(diff[key]['run'])}, study "
                        f"{json.dumps(diff[key]['study'])}"
                    )
            if "messages" in diff:
                ids = diff["messages"]["prompt_ids"]
                lines.append(
                    f"  messages: {diff['messages']['prompts']} prompt(s) "
                    f"({', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''})"
                )
            for item in diff.get("generation_settings", []):
                lines.append(
                    f"  {item['field']}: run {json.dumps(item['run'])}, study "
                    f"{json.dumps(item['study'])} ({item['prompts']} prompt(s))"
                )
            for item in diff.get("recorded_form", []):
                lines.append(
                    f"  {item['field']}: the study's record says "
                    f"{json.dumps(item['study'])}, its runner did not send it; run "
                    f"{json.dumps(item['run'])} ({item['prompts']} prompt(s))"
                )
            if diff.get("not_sent"):
                lines.append(f"  prompts of the row the run did not send: {diff['not_sent']}")
        lines.append("")
        lines.append(f"{'frozen row':<56} {'identical':>9} {'same sent':>9} {'same input':>10}")
        for m in self.rows:
            name = f"{m.row.provider} {m.row.api_model_id}"
            lines.append(
                f"{name[:56]:<56} {m.identical_requests:>9} "
                f"{m.identical_sent_bodies:>9} {m.same_model_input:>10}"
            )
        return "\n".join(lines) + "\n"


def _show(value: Any) -> Any:
    return _ABSENT if value is _MISSING else value


_MISSING = object()


def _closest_key(
    match: RowMatch, side: TracedSide, provider: str | None, family: str | None
) -> tuple[float, ...]:
    """Most identical requests, then sent bodies, then the same model, route and family; a
    model no row has is set beside the row whose model id is most alike."""
    row = match.row
    alike = difflib.SequenceMatcher(None, row.api_model_id, side.model).ratio()
    return (
        match.identical_requests,
        match.identical_sent_bodies,
        int(row.api_model_id == side.model),
        int(row.provider == provider),
        int(row.request_family == family),
        match.same_model_input,
        alike,
    )


def trace_requests(release: Release, side: TracedSide, requests: list[TracedRequest]) -> Trace:
    """Hold the requests against every frozen row's archived requests."""
    rows = read_archived_rows(release)
    by_id = release.by_id
    idents: dict[str, StudyIdentity] = {}
    unknown: list[str] = []
    recorded = agree = hashes = hashes_ok = 0
    for req in requests:
        prompt = by_id.get(req.prompt_id)
        ident = (
            None
            if prompt is None
            else identity(prompt, side.provider, side.adapter, side.model, req.body)
        )
        if prompt is None:
            unknown.append(req.prompt_id)
        elif ident is not None:
            idents[req.prompt_id] = ident
        if req.recorded is not None:
            recorded += 1
            agree += int(ident is not None and dict(req.recorded) == ident.to_dict())
        if req.sha256 is not None:
            hashes += 1
            hashes_ok += int(sha256_hex(canonical_json(dict(req.body))) == req.sha256)
    if requests and len(unknown) == len(requests):
        raise InputError(
            f"{side.source}: none of its {len(requests)} prompts is a prompt of "
            f"{release.root} (a run on another release?)"
        )
    first = next(iter(idents.values()), None)
    provider = first.provider if first else STUDY_PROVIDER.get(side.provider)
    family = first.request_family if first else None

    matches = []
    for row in rows:
        match = RowMatch(row)
        for req in requests:
            rec = row.records.get(req.prompt_id)
            if rec is None:
                continue
            match.compared += 1
            ident = idents.get(req.prompt_id)
            if ident is not None:
                match.identical_requests += int(ident.request_sha256 == rec.get("request_sha256"))
                match.same_model_input += int(
                    ident.model_input_sha256 == rec.get("model_input_sha256")
                )
            match.identical_sent_bodies += int(dict(req.body) == sent_body(rec))
        matches.append(match)

    n = len(requests)
    replicates = next((m for m in matches if n and m.identical_requests == n), None)
    same_sent = (
        None
        if replicates
        else next((m for m in matches if n and m.identical_sent_bodies == n), None)
    )
    closest = (
        replicates
        or same_sent
        or (
            max(matches, key=lambda m: _closest_key(m, side, provider, family)) if matches else None
        )
    )
    trace = Trace(
        release,
        side,
        n,
        provider,
        family,
        matches,
        replicates,
        same_sent,
        closest,
        unknown,
        recorded,
        agree,
        hashes_ok,
        hashes,
    )
    if closest is not None:
        _differences(trace, closest, requests, idents)
    return trace


def _differences(
    trace: Trace, closest: RowMatch, requests: list[TracedRequest], idents: dict[str, StudyIdentity]
) -> None:
    row, side = closest.row, trace.side
    diff: dict[str, Any] = {}
    if (trace.study_provider, trace.request_family) != (row.provider, row.request_family):
        diff["route"] = {
            "run": {"provider": trace.study_provider, "request_family": trace.request_family},
            "study": {"provider": row.provider, "request_family": row.request_family},
        }
    model_differs = side.model != row.api_model_id
    if model_differs:
        diff["model"] = {"run": side.model, "study": row.api_model_id}
    settings: dict[tuple[str, str, str], int] = {}
    recorded_only: dict[tuple[str, str, str], int] = {}
    message_ids: list[str] = []
    listed: list[dict[str, Any]] = []
    sent_ids = set()
    for req in requests:
        rec = row.records.get(req.prompt_id)
        ident = idents.get(req.prompt_id)
        if rec is None:
            listed.append({"prompt_id": req.prompt_id, "aspects": ["not_in_study"]})
            continue
        sent_ids.add(req.prompt_id)
        if ident is not None and ident.request_sha256 == rec.get("request_sha256"):
            continue
        aspects = []
        if "route" in diff:
            aspects.append("route")
        if model_differs:
            aspects.append("model")
        theirs, ours = sent_body(rec), dict(req.body)
        if (
            ident is None
            or ident.model_input_sha256 != rec.get("model_input_sha256")
            or any(theirs.get(k) != ours.get(k) for k in MESSAGE_KEYS)
        ):
            aspects.append("messages")
            message_ids.append(req.prompt_id)
        changed = False
        for key in sorted((set(theirs) | set(ours)) - MESSAGE_KEYS - {"model"}):
            a, b = ours.get(key, _MISSING), theirs.get(key, _MISSING)
            if a != b:
                changed = True
                k = (
                    key,
                    json.dumps(_show(a), sort_keys=True),
                    json.dumps(_show(b), sort_keys=True),
                )
                settings[k] = settings.get(k, 0) + 1
        if changed:
            aspects.append("generation_settings")
        if not aspects:
            # The same JSON sent; the study's record of it holds fields its runner removed.
            aspects.append("recorded_form")
            ours_rec = recorded_body(side.adapter, side.model, ours)
            theirs_rec = dict(rec.get("request_body") or {})
            for key in sorted((set(ours_rec) | set(theirs_rec)) - MESSAGE_KEYS - {"model"}):
                a, b = ours_rec.get(key, _MISSING), theirs_rec.get(key, _MISSING)
                if a != b:
                    k = (
                        key,
                        json.dumps(_show(a), sort_keys=True),
                        json.dumps(_show(b), sort_keys=True),
                    )
                    recorded_only[k] = recorded_only.get(k, 0) + 1
        listed.append({"prompt_id": req.prompt_id, "aspects": aspects})
    if message_ids:
        diff["messages"] = {"prompts": len(message_ids), "prompt_ids": message_ids}
    for name, found in (("generation_settings", settings), ("recorded_form", recorded_only)):
        if found:
            diff[name] = [
                {"field": key, "run": json.loads(a), "study": json.loads(b), "prompts": count}
                for (key, a, b), count in sorted(found.items())
            ]
    diff["not_sent"] = len(set(row.records) - sent_ids)
    trace.differences = diff
    trace.differing_prompts = listed


# -- sources: a run directory, a plan -------------------------------------------------------------


def _read_json(path: Path, what: str) -> Any:
    return read_json_file(
        path, InputError, what=what, missing=f"file is missing; is {path.parent} a run directory?"
    )


def run_requests(run_dir: Path) -> tuple[TracedSide, list[TracedRequest]]:
    """A run directory's route, model and recorded requests."""
    from engine.rundir.layout import MANIFEST, REQUESTS

    run_dir = Path(run_dir)
    manifest = _read_json(run_dir / MANIFEST, "the run manifest")
    route = manifest.get("route") if isinstance(manifest, dict) else None
    if not isinstance(route, dict) or not isinstance(manifest.get("model"), str):
        raise InputError(f"{run_dir / MANIFEST}: not a pqid-tui run manifest (no route, model)")
    release = manifest.get("release") if isinstance(manifest.get("release"), dict) else {}
    side = TracedSide(
        str(run_dir),
        str(route.get("provider")),
        str(route.get("adapter")),
        manifest["model"],
        route.get("base_url"),
        release.get("digest"),
    )
    path = run_dir / REQUESTS
    out = []
    for number, obj in read_jsonl_objects(
        path, InputError, missing="file is missing; the run has no recorded requests"
    ):
        if not isinstance(obj.get("prompt_id"), str) or not isinstance(obj.get("body"), dict):
            raise InputError(f"{path}:{number}: not a request record (prompt_id, body)")
        study = obj.get("study")
        out.append(
            TracedRequest(
                obj["prompt_id"],
                obj["body"],
                obj.get("request_sha256"),
                study if isinstance(study, dict) else None,
            )
        )
    if not out:
        raise InputError(f"{path}: holds no requests")
    return side, out


def trace_run(release: Release, run_dir: Path) -> Trace:
    """Trace a run directory against the frozen rows of an evidence release."""
    side, requests = run_requests(run_dir)
    return trace_requests(release, side, requests)
