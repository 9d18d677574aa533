"""Replay: score a responses file with the evaluator in Docker and write the candidate summary.

Everything that can be checked is checked before anything runs: the acknowledgement, the
release, every line of the responses file, and the output directory. A response line whose
provider call failed (no content and no generated code, or an error or failed status) is an
infrastructure failure, recorded as `no_response` without running anything.

Every response is scored under the release's contract, in the release's environment: the
complete pin set for its pins (`engine.replay.environment`), on a base image whose Python is the one
the release pins (another is refused, unless the caller accepts the mismatch). The summary
records the contract, the predicate, what the image actually holds and whether that is the
release's pinned environment (`environment_matches_release`, and what differs).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from engine.errors import InputError, ResumeRefused, UsageError
from engine.events import (
    EvaluationFinished,
    EvaluationStarted,
    ProgressCallback,
    ReplayFinished,
)
from engine.release import CONTRACT_PQID_BENCH, Release, load_release
from engine.replay.docker import (
    DockerEvaluatorRunner,
    EvaluationItem,
    EvaluatorConfig,
    EvaluatorRunner,
    RunOutcome,
)
from engine.replay.environment import (
    SOURCE_PROJECT,
    EnvironmentPin,
    environment_differences,
    hello_facts,
    release_environment,
)
from engine.replay.evaluations import (
    SUMMARY_FORMAT,
    infrastructure_evaluation,
    render_summary,
    summarize,
)
from engine.rundir.layout import EVALUATIONS_FILE, MANIFEST
from engine.rundir.storage import atomic_write_bytes, iter_jsonl_objects, jsonl_bytes

SUMMARY_STEM = "pqid_bench_candidate_summary"
SUMMARY_FILES = {
    fmt: f"{SUMMARY_STEM}.{ext}"
    for fmt, ext in (("json", "json"), ("text", "txt"), ("markdown", "md"), ("csv", "csv"))
}
OUTPUT_FILES = (EVALUATIONS_FILE, *SUMMARY_FILES.values())
DEFAULT_TIMEOUT_SECONDS = 20.0

# PQID-Bench's code channel: the first of these fields with text (its reference harness reads
# them in this order; a raw provider body is never code).
STUDY_CODE_FIELDS = ("generated_code", "code", "completion", "text")

# A `status` with one of these values marks a provider call that ended in a terminal error.
_ERROR_STATUSES = frozenset(
    {
        "error",
        "failed",
        "failure",
        "terminal_error",
        "provider_error",
        "cancelled",
        "canceled",
        "timeout",
    }
)


@dataclass(frozen=True, slots=True)
class ResponseLine:
    """One usable line of a responses file."""

    prompt_id: str
    content: str | None
    generated_code: str | None
    finish_reason: str | None
    provider_error: str | None  # set: an infrastructure failure, nothing is run
    line: int
    superseded: tuple[int, ...] = ()  # earlier lines of the same prompt (when the last wins)


@dataclass(slots=True)
class ReplayResult:
    """What a replay wrote and found."""

    output_dir: Path
    files: dict[str, Path]
    summary: dict[str, Any]
    evaluations: list[dict[str, Any]] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.summary,
            "output_dir": str(self.output_dir),
            "files": {k: str(v) for k, v in self.files.items()},
        }


def study_code(obj: Mapping[str, Any]) -> str | None:
    """PQID-Bench's code channel: the model's reply text.

    A pqid-tui run records the reply as `content` (its `generated_code` is pqid-tui's own
    extraction, which the study never applied), so `content` comes first; a line in the
    study's format has no `content`, and then the first of `STUDY_CODE_FIELDS` with text.
    """
    content = obj.get("content")
    if isinstance(content, str) and content:
        return content
    for key in STUDY_CODE_FIELDS:
        value = obj.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def read_responses(
    path: Path, release: Release, *, last_wins: bool | None = None
) -> list[ResponseLine]:
    """Every line of a responses file, or InputError naming the first unusable line.

    A prompt may have one line only, except under PQID-Bench's contract (`last_wins` by
    default there), whose reference harness keeps a prompt's last line: the earlier ones are
    then recorded as superseded. Under that contract the code is the study's code channel
    (`study_code`).
    """
    study = release.contract == CONTRACT_PQID_BENCH
    if last_wins is None:
        last_wins = study
    refusal = "; nothing was evaluated"
    lines = iter_jsonl_objects(
        path,
        InputError,
        missing="responses file does not exist",
        directory="is a directory, not a responses file",
        brief=True,
        suffix=refusal,
    )
    known = release.by_id
    seen: dict[str, int] = {}
    out: list[ResponseLine] = []
    for number, obj in lines:
        where = f"{path}:{number}"
        pid = obj.get("prompt_id")
        if not isinstance(pid, str) or not pid:
            raise InputError(f"{where}: no prompt_id{refusal}")
        if pid not in known:
            raise InputError(
                f"{where}: prompt {pid!r} is not in the release "
                f"{release.name} {release.version}{refusal}"
            )
        if pid in seen and not last_wins:
            raise InputError(f"{where}: prompt {pid!r} repeats line {seen[pid]}{refusal}")
        for key in ("content", "generated_code", "finish_reason"):
            if obj.get(key) is not None and not isinstance(obj[key], str):
                raise InputError(f"{where}: {key} must be a string or null{refusal}")
        code = study_code(obj) if study else obj.get("generated_code")
        earlier: tuple[int, ...] = ()
        if pid in seen:
            previous = next(r for r in out if r.prompt_id == pid)
            earlier = (*previous.superseded, previous.line)
            out.remove(previous)
        seen[pid] = number
        out.append(
            ResponseLine(
                pid,
                obj.get("content"),
                code,
                obj.get("finish_reason"),
                _provider_error(obj, code),
                number,
                earlier,
            )
        )
    return out


def _provider_error(obj: Mapping[str, Any], code: str | None) -> str | None:
    error = obj.get("error")
    status = obj.get("status")
    if error:
        text = error if isinstance(error, str) else json.dumps(error, sort_keys=True)
        return f"provider error: {text[:500]}"
    if isinstance(status, str) and status.strip().lower() in _ERROR_STATUSES:
        return f"provider call ended with status {status!r}"
    if isinstance(status, int) and not isinstance(status, bool) and status >= 400:
        return f"provider call ended with HTTP status {status}"
    if obj.get("content") is None and obj.get("generated_code") is None and code is None:
        return "no response: the line has neither content nor generated_code"
    return None


def _sibling_selection(responses_path: Path, release: Release) -> list[str] | None:
    """The selected prompts of the run that wrote these responses, when its manifest is beside
    them and was made on this release (so prompts without a response line count as
    `no_response` rather than vanishing from the denominators)."""
    manifest_path = responses_path.parent / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(manifest, dict):
        return None
    digest = (manifest.get("release") or {}).get("digest")
    ids = manifest.get("selected_prompt_ids")
    if digest != release.digest or not isinstance(ids, list):
        return None
    if not all(isinstance(i, str) and i in release.by_id for i in ids):
        raise InputError(
            f"{manifest_path}: selected_prompt_ids names prompts the release does not have"
        )
    return list(ids)


def check_output_dir(output_dir: Path, *, overwrite: bool) -> None:
    """Refuse to replace earlier results unless asked; a fresh or unrelated directory is fine."""
    if output_dir.exists() and not output_dir.is_dir():
        raise ResumeRefused(f"--output-dir {output_dir}: exists and is not a directory")
    if not output_dir.exists() or overwrite:
        return
    earlier = [name for name in OUTPUT_FILES if (output_dir / name).exists()]
    if earlier:
        raise ResumeRefused(
            f"--output-dir {output_dir} already holds replay results ({', '.join(earlier)}): "
            "choose a new directory, or pass --overwrite to replace them"
        )


def replay(
    release_dir: Path,
    responses_path: Path,
    output_dir: Path,
    *,
    acknowledge_code_execution: bool,
    build_image: bool = False,
    base_image: str | None = None,
    wheelhouse: Path | None = None,
    progress: ProgressCallback | None = None,
    runner: EvaluatorRunner | None = None,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    allow_modified_release: bool = False,
    overwrite: bool = False,
    wall_clock_seconds: float | None = None,
    allow_environment_mismatch: bool = False,
) -> ReplayResult:
    """Evaluate every response in a network-disabled container and write the summaries."""
    if not acknowledge_code_execution:
        raise UsageError(
            "replay executes model-generated Python (untrusted code) inside a network-disabled "
            "Docker container; pass --acknowledge-code-execution to proceed"
        )
    if timeout_seconds <= 0:
        raise UsageError("--timeout-seconds must be positive")
    release = load_release(Path(release_dir), allow_modified=allow_modified_release)
    responses_path = Path(responses_path)
    sibling = _sibling_selection(responses_path, release)
    # A run whose every prompt failed wrote no responses file: each selected prompt is then
    # scored no_response, like any prompt without a line.
    responses = (
        [] if sibling and not responses_path.exists() else read_responses(responses_path, release)
    )
    if not responses and not sibling:
        raise InputError(f"{responses_path}: holds no response lines; nothing to evaluate")
    output_dir = Path(output_dir)
    check_output_dir(output_dir, overwrite=overwrite)

    by_response = {r.prompt_id: r for r in responses}
    wanted = set(by_response) | set(sibling or ())
    order = [p.prompt_id for p in release.prompts if p.prompt_id in wanted]
    position = {pid: i for i, pid in enumerate(order)}
    total = len(order)

    evaluations: dict[str, dict[str, Any]] = {}

    def emit_finished(evaluation: Mapping[str, Any]) -> None:
        if progress is not None:
            pid = str(evaluation["prompt_id"])
            progress(EvaluationFinished(pid, str(evaluation.get("category")), position[pid], total))

    for pid in order:
        response = by_response.get(pid)
        if response is None:
            evaluations[pid] = infrastructure_evaluation(
                pid,
                "no_response",
                f"no line in {responses_path.name}: the run recorded no "
                "successful response (see its records and provider-attempts.jsonl)",
            )
        elif response.provider_error is not None:
            evaluations[pid] = infrastructure_evaluation(
                pid, "no_response", response.provider_error
            )
        else:
            continue
        emit_finished(evaluations[pid])

    items = [
        EvaluationItem(
            pid,
            by_response[pid].content,
            by_response[pid].generated_code,
            release.by_id[pid].target_metadata,
        )
        for pid in order
        if pid not in evaluations
    ]
    config = EvaluatorConfig(timeout_seconds=timeout_seconds, contract=release.contract)
    pin = release_environment(release.evaluator_requirements, release.python_version)
    image: str | None = None
    replay_facts: dict[str, Any] = {"containers": 0, "evaluator_killed": [], "not_evaluated": 0}
    environment: dict[str, Any] = {}
    if items:
        if runner is None:
            runner = evaluator_runner(
                pin,
                base_image=base_image,
                wheelhouse=wheelhouse,
                wall_clock_seconds=wall_clock_seconds,
                allow_environment_mismatch=allow_environment_mismatch,
            )
        image = runner.ensure_image(build=build_image, progress=progress)

        def on_line(message: dict[str, Any]) -> None:
            if progress is None:
                return
            if message["type"] == "started":
                pid = message["prompt_id"]
                progress(EvaluationStarted(pid, position[pid], total))
            elif message["type"] == "evaluation":
                emit_finished(message["evaluation"])

        outcome = runner.run(items, config, on_line)
        environment = environment_record(runner, outcome, pin)
        for item in items:
            pid = item.prompt_id
            if pid in outcome.evaluations:
                evaluations[pid] = stamp_evaluation(
                    dict(outcome.evaluations[pid], prompt_id=pid), release, environment
                )
            else:
                reason = outcome.not_evaluated.get(pid, "not evaluated: no result came back")
                evaluations[pid] = infrastructure_evaluation(pid, "not_evaluated", reason)
                emit_finished(evaluations[pid])
        replay_facts = {
            "containers": outcome.sessions,
            "evaluator_killed": list(outcome.killed),
            "not_evaluated": len(outcome.not_evaluated),
        }
    if any(r.finish_reason is not None for r in responses):
        for pid in order:
            response = by_response.get(pid)
            evaluations[pid].setdefault(
                "finish_reason", response.finish_reason if response else None
            )

    ordered = [evaluations[pid] for pid in order]
    summary = summarize(ordered)
    summary = {
        "format": SUMMARY_FORMAT,
        "created_at_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "release": {
            "name": release.name,
            "version": release.version,
            "digest": release.digest,
            "modified": release.modified,
        },
        "responses": str(responses_path),
        # No responses file (no prompt answered) hashes as the empty file it stands for.
        "responses_sha256": hashlib.sha256(
            responses_path.read_bytes() if responses else b""
        ).hexdigest(),
        "selection": {
            "source": MANIFEST if sibling is not None else "responses",
            "splits": _splits(release, order),
        },
        "evaluator_config": {k: v for k, v in config.message().items() if k != "type"},
        "contract": release.contract,
        "predicate": release.predicate,
        "image": image,
        "replay": replay_facts,
        **summary,
        **environment_summary(environment, pin),
    }
    superseded = {r.prompt_id: list(r.superseded) for r in responses if r.superseded}
    if superseded:
        summary["superseded_lines"] = superseded
    harness = None
    if release.contract == CONTRACT_PQID_BENCH:
        from engine.replay.harness_report import build_report

        harness = build_report(ordered, release, responses=responses_path)
    files = write_outputs(output_dir, ordered, summary, harness=harness)
    if progress is not None:
        progress(ReplayFinished(str(output_dir), dict(summary["categories"])))
    return ReplayResult(output_dir, files, summary, ordered)


def evaluator_runner(
    pin: EnvironmentPin,
    *,
    base_image: str | None,
    wheelhouse: Path | None,
    wall_clock_seconds: float | None = None,
    allow_environment_mismatch: bool = False,
    client: Any = None,
) -> DockerEvaluatorRunner:
    """The Docker runner for a release's environment (its complete pins, its Python)."""
    # The project's own pins go in as the file they are, so its image keeps its digest.
    requirements = None if pin.source == SOURCE_PROJECT else pin.requirements
    return DockerEvaluatorRunner(
        base_image=base_image,
        wheelhouse=wheelhouse,
        requirements=requirements,
        python_version=pin.python,
        wall_clock_seconds=wall_clock_seconds,
        allow_environment_mismatch=allow_environment_mismatch,
        client=client,
    )


def environment_record(
    runner: EvaluatorRunner, outcome: RunOutcome, pin: EnvironmentPin
) -> dict[str, Any]:
    """What the responses were scored in: the image's own listing where the runner has one
    (the Docker runner does), else the evaluator's `hello`; and how it differs from the pin."""
    describe = getattr(runner, "environment_facts", None)
    facts = describe() if callable(describe) else None
    if not isinstance(facts, dict):
        facts = hello_facts(outcome.environment)
    differences = environment_differences(pin, facts)
    notes = getattr(runner, "environment_notes", None)
    for note in notes if isinstance(notes, list) else []:
        if (
            isinstance(note, str)
            and note not in differences
            and not any(d.startswith("python ") for d in differences)
        ):
            differences.append(note)
    return {"facts": facts, "differences": differences}


def environment_summary(environment: Mapping[str, Any], pin: EnvironmentPin) -> dict[str, Any]:
    """The summary's environment keys (nothing scored: nothing to record but the pin)."""
    out: dict[str, Any] = {"environment_pin": pin.to_dict()}
    if environment:
        differences = list(environment["differences"])
        out.update(
            {
                "evaluation_environment": environment["facts"],
                "environment_matches_release": not differences,
                "environment_differences": differences,
            }
        )
    return out


def stamp_evaluation(
    evaluation: dict[str, Any], release: Release, environment: Mapping[str, Any]
) -> dict[str, Any]:
    """One scored evaluation with its contract, predicate and the image that produced it."""
    evaluation.setdefault("contract", release.contract)
    if release.predicate is not None:
        evaluation.setdefault("predicate", release.predicate)
    facts = environment.get("facts") or {}
    env = dict(evaluation.get("environment") or {})
    for key in ("python", "image", "image_id"):
        if facts.get(key) is not None:
            env.setdefault(key, facts[key])
    if facts.get("complete"):
        env.setdefault("packages", facts.get("packages"))
    evaluation["environment"] = env
    return evaluation


def _splits(release: Release, ids: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pid in ids:
        split = release.by_id[pid].split
        counts[split] = counts.get(split, 0) + 1
    return dict(sorted(counts.items()))


def write_outputs(
    output_dir: Path,
    evaluations: list[dict[str, Any]],
    summary: Mapping[str, Any],
    *,
    harness: Mapping[str, Any] | None = None,
) -> dict[str, Path]:
    """Write the evaluations and the four summaries, each file replaced atomically; and, when
    given (PQID-Bench's contract), the harness report in the reference's JSON and Markdown."""
    output_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    path = output_dir / EVALUATIONS_FILE
    atomic_write_bytes(path, jsonl_bytes(evaluations))
    files["evaluations"] = path
    for fmt, name in SUMMARY_FILES.items():
        path = output_dir / name
        atomic_write_bytes(path, render_summary(summary, fmt).encode())
        files[fmt] = path
    if harness is not None:
        from engine.replay.harness_report import write_report

        files.update(write_report(output_dir, harness))
    return files
