"""Scores the demo release's frozen matrix in the evaluator container.

    python -m tests.tools.demo_frozen [--base-image IMAGE] [--wheelhouse DIR] [--row LABEL ...]

Every row is measured, never typed: its responses are built here, scored by
`engine.replay.replay.replay` (the real evaluator in the hardened, network-disabled container, with
the environment pinned in `release.json`), and the canonical evaluations replay wrote are what
goes into `frozen/<label>.evaluations.jsonl`. No row is a model (`kind` is `reference`,
`provider` and `model` are null): no model was run, so none is named.

| label | split | the response to a prompt |
|---|---|---|
| `oracle` | all | its own reference code (`target_metadata.reference_code`) |
| `retrieval-copy` | test | the reference code of the most similar `dev` prompt (below) |
| `empty` | all | the empty string (scores `no_code`) |

Similarity of `retrieval-copy` (standard library only, deterministic):

- a prompt's text is its user message(s); the system prompt is the same for every prompt;
- tokens are the lower-cased text's `\\w+` runs (Unicode word characters: Φ, π count);
- the index is the `dev` split: `df(t)` is the number of dev prompts holding token `t`,
  `N` the number of dev prompts, `idf(t) = ln((1 + N) / (1 + df(t))) + 1` (smoothed);
- a text's vector is raw token count times idf over the dev vocabulary (a test prompt's tokens
  that no dev prompt has are dropped); similarity is the cosine of the two vectors;
- the nearest dev prompt has the highest similarity rounded to 12 decimals; ties go to the
  smallest `prompt_id`. `nearest_dev` exposes this choice.

The evaluation lines are exactly what replay wrote (keys sorted, release order) with one field
added here, `response_source`: what was answered (`kind` `reference_code` or `empty`, the
`prompt_id` whose reference code it is, the content's `sha256`, and for retrieval-copy the
`similarity`). Volatile fields (`duration_ms`, stderr excerpts) are kept as measured, so
scoring the rows again gives the same categories and flags but not the same bytes: the files
are a measurement, their SHA-256 is fixed in `release.json`, and `build --check` verifies the
digest without scoring anything again.

Afterwards the builder (`tests.tools.demo_build`) rewrites `prompts.jsonl` and `release.json`, which
lists every frozen file with its SHA-256 and pins the evaluator version and requirements. Rows
of the matrix with other labels (for example a real model's row) are kept as they are.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from engine.demo import DEMO_RELEASE_DIR
from engine.rundir.layout import RESPONSES
from tests.tools import demo_build

LOCAL_BASE_IMAGE = "pqid-base:bookworm"
LOCAL_WHEELHOUSE = Path(".ci/wheelhouse")
RESPONSES_FILE = RESPONSES


@dataclass(frozen=True)
class RowSpec:
    label: str
    split: str  # "all" or the one split the row covers
    description: str


ROWS: tuple[RowSpec, ...] = (
    RowSpec(
        "oracle",
        "all",
        "Each prompt answered with its own reference code: the score of a correct answer "
        "(100% execution and structural match).",
    ),
    RowSpec(
        "retrieval-copy",
        "test",
        "Each test prompt answered with the reference code of the most similar dev prompt "
        "(TF-IDF cosine of the user messages over the dev vocabulary, smoothed idf, ties "
        "to the smallest prompt_id): what copying the nearest known solution scores.",
    ),
    RowSpec(
        "empty",
        "all",
        "An empty response for every prompt: every prompt scores no_code (the floor).",
    ),
)
LABELS = tuple(r.label for r in ROWS)


class FreezeError(Exception):
    """A row could not be scored, or its scores break what the row must be."""


class _PromptLike(Protocol):
    @property
    def prompt_id(self) -> str: ...
    @property
    def split(self) -> str: ...
    @property
    def messages(self) -> Sequence[Mapping[str, str]]: ...


# --- similarity ------------------------------------------------------------------------


_TOKEN = re.compile(r"\w+")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def prompt_text(prompt: _PromptLike) -> str:
    """The text a prompt is compared by: its user message(s)."""
    return "\n".join(m["content"] for m in prompt.messages if m["role"] == "user")


@dataclass(frozen=True)
class Match:
    prompt_id: str  # the dev prompt whose reference code is copied
    similarity: float


class DevIndex:
    """TF-IDF vectors of the dev prompts (see the module docstring)."""

    def __init__(self, documents: Mapping[str, str]) -> None:
        counts = {pid: Counter(tokens(text)) for pid, text in documents.items()}
        n = len(counts)
        df: Counter[str] = Counter()
        for c in counts.values():
            df.update(c.keys())
        self.idf = {t: math.log((1 + n) / (1 + d)) + 1 for t, d in sorted(df.items())}
        self.vectors = {pid: self.vector_of(c) for pid, c in sorted(counts.items())}
        self.norms = {pid: _norm(v) for pid, v in self.vectors.items()}

    def vector_of(self, counts: Mapping[str, int]) -> dict[str, float]:
        return {t: counts[t] * self.idf[t] for t in sorted(counts) if t in self.idf}

    def similarity(self, text: str, dev_id: str) -> float:
        query = self.vector_of(Counter(tokens(text)))
        return self._cosine(query, _norm(query), dev_id)

    def _cosine(self, query: Mapping[str, float], qnorm: float, dev_id: str) -> float:
        doc, dnorm = self.vectors[dev_id], self.norms[dev_id]
        if qnorm == 0.0 or dnorm == 0.0:
            return 0.0
        dot = math.fsum(w * doc[t] for t, w in sorted(query.items()) if t in doc)
        return dot / (qnorm * dnorm)

    def nearest(self, text: str) -> Match:
        query = self.vector_of(Counter(tokens(text)))
        qnorm = _norm(query)
        scored = [(round(self._cosine(query, qnorm, pid), 12), pid) for pid in self.vectors]
        best = min(scored, key=lambda s: (-s[0], s[1]))
        return Match(best[1], best[0])


def _norm(vector: Mapping[str, float]) -> float:
    return math.sqrt(math.fsum(w * w for _t, w in sorted(vector.items())))


def nearest_dev(prompts: Iterable[_PromptLike]) -> dict[str, Match]:
    """For each test prompt, the most similar dev prompt (the retrieval-copy baseline's pick)."""
    prompts = list(prompts)
    dev = {p.prompt_id: prompt_text(p) for p in prompts if p.split == "dev"}
    if not dev:
        raise FreezeError("the release has no dev prompts to retrieve from")
    index = DevIndex(dev)
    return {p.prompt_id: index.nearest(prompt_text(p)) for p in prompts if p.split == "test"}


# --- responses -------------------------------------------------------------------------


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def row_responses(prompts: Sequence[Any], label: str) -> list[dict[str, Any]]:
    """The response lines of one row, in release order, each with its `response_source`.

    `prompts` are the release's prompts (`engine.release.Prompt`: prompt_id, split, messages,
    target_metadata).
    """
    by_id = {p.prompt_id: p for p in prompts}
    lines: list[dict[str, Any]] = []
    if label == "oracle":
        for p in prompts:
            code = str(p.target_metadata["reference_code"])
            lines.append(
                {
                    "prompt_id": p.prompt_id,
                    "content": code,
                    "response_source": {
                        "kind": "reference_code",
                        "prompt_id": p.prompt_id,
                        "sha256": _sha256(code),
                    },
                }
            )
    elif label == "retrieval-copy":
        picks = nearest_dev(prompts)
        for p in prompts:
            if p.prompt_id not in picks:
                continue
            match = picks[p.prompt_id]
            code = str(by_id[match.prompt_id].target_metadata["reference_code"])
            lines.append(
                {
                    "prompt_id": p.prompt_id,
                    "content": code,
                    "response_source": {
                        "kind": "reference_code",
                        "prompt_id": match.prompt_id,
                        "similarity": match.similarity,
                        "sha256": _sha256(code),
                    },
                }
            )
    elif label == "empty":
        for p in prompts:
            lines.append(
                {
                    "prompt_id": p.prompt_id,
                    "content": "",
                    "response_source": {"kind": "empty", "prompt_id": None, "sha256": _sha256("")},
                }
            )
    else:
        raise FreezeError(f"unknown row {label!r}; the rows are {', '.join(LABELS)}")
    return lines


# --- checks ----------------------------------------------------------------------------


def _canonical_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def check_row(
    label: str,
    evaluations: Sequence[Mapping[str, Any]],
    responses: Sequence[Mapping[str, Any]],
    requirements: Sequence[str],
) -> None:
    """Raise FreezeError unless the row is complete, scored in the pinned environment, and
    (oracle, empty) scores what it must."""
    import evaluator
    from engine.replay.evaluations import INFRA_CATEGORIES

    problems: list[str] = []
    if [e["prompt_id"] for e in evaluations] != [r["prompt_id"] for r in responses]:
        problems.append("the evaluations do not cover exactly the responses, in order")
    pins = dict(_canonical_name_pin(r) for r in requirements)
    for ev in evaluations:
        pid = ev["prompt_id"]
        if ev.get("category") in INFRA_CATEGORIES:
            problems.append(f"{pid}: {ev['category']} ({ev.get('error')})")
            continue
        if ev.get("evaluator_version") != evaluator.__version__:
            problems.append(
                f"{pid}: scored by evaluator {ev.get('evaluator_version')}, "
                f"not {evaluator.__version__}"
            )
        env = ev.get("environment") or {}
        for key, version in env.items():
            pinned = pins.get(_canonical_name(key))
            if pinned is not None and version != pinned:
                problems.append(f"{pid}: {key} {version}, the release pins {pinned}")
        if label == "oracle" and not (
            ev.get("category") == "ok" and ev.get("execution_ok") and ev.get("structural_match")
        ):
            problems.append(
                f"{pid}: the reference code scored {ev.get('category')} ({ev.get('error')})"
            )
        if label == "empty" and ev.get("category") != "no_code":
            problems.append(f"{pid}: an empty response scored {ev.get('category')}")
    if problems:
        shown = "; ".join(problems[:8]) + (
            f" (and {len(problems) - 8} more)" if len(problems) > 8 else ""
        )
        raise FreezeError(f"row {label}: {shown}")


def _canonical_name_pin(pin: str) -> tuple[str, str]:
    name, _, version = pin.partition("==")
    return _canonical_name(name), version


# --- scoring ---------------------------------------------------------------------------


def _progress(label: str) -> Any:
    from engine.events import EvaluationFinished, ImageBuildLog, ImageReady

    def show(event: object) -> None:
        if isinstance(event, ImageBuildLog):
            print(f"  image: {event.line}", file=sys.stderr, flush=True)
        elif isinstance(event, ImageReady):
            print(
                f"  image {event.tag} ({'built' if event.built else 'reused'})",
                file=sys.stderr,
                flush=True,
            )
        elif isinstance(event, EvaluationFinished):
            done = event.index + 1
            if done == event.total or done % 25 == 0:
                print(f"  {label}: {done}/{event.total} scored", file=sys.stderr, flush=True)

    return show


def _jsonl(objects: Iterable[Mapping[str, Any]]) -> bytes:
    return b"".join(
        json.dumps(o, sort_keys=True, ensure_ascii=False).encode("utf-8") + b"\n" for o in objects
    )


def score_row(
    release_dir: Path,
    prompts: Sequence[Any],
    label: str,
    work_dir: Path,
    *,
    base_image: str | None,
    wheelhouse: Path | None,
    requirements: Sequence[str],
    quiet: bool = False,
) -> list[dict[str, Any]]:
    """Score one row with replay; its canonical evaluations, each with `response_source`."""
    from engine.replay.replay import replay

    responses = row_responses(prompts, label)
    row_dir = work_dir / label
    row_dir.mkdir(parents=True, exist_ok=True)
    responses_path = row_dir / RESPONSES_FILE
    responses_path.write_bytes(
        _jsonl({"prompt_id": r["prompt_id"], "content": r["content"]} for r in responses)
    )
    result = replay(
        release_dir,
        responses_path,
        row_dir / "evaluation",
        acknowledge_code_execution=True,
        build_image=True,
        base_image=base_image,
        wheelhouse=wheelhouse,
        overwrite=True,
        progress=None if quiet else _progress(label),
    )
    check_row(label, result.evaluations, responses, requirements)
    return [
        dict(ev, response_source=r["response_source"])
        for ev, r in zip(result.evaluations, responses, strict=True)
    ]


def evaluations_file(label: str) -> str:
    return f"{demo_build.FROZEN_DIR}/{label}.evaluations.jsonl"


def matrix_rows(
    existing: Sequence[Mapping[str, Any]], labels: Sequence[str]
) -> list[dict[str, Any]]:
    """This script's rows (in ROWS order) followed by every other existing row, unchanged."""
    ours = [
        {
            "label": r.label,
            "kind": "reference",
            "provider": None,
            "model": None,
            "evaluations": evaluations_file(r.label),
            "description": r.description,
            "split": r.split,
        }
        for r in ROWS
        if r.label in labels
    ]
    kept = {r.label for r in ROWS if r.label not in labels}
    previous = {str(r.get("label")): dict(r) for r in existing}
    ours += [previous[label] for label in LABELS if label in kept and label in previous]
    return ours + [dict(r) for r in existing if r.get("label") not in LABELS]


def rates(evaluations: Sequence[Mapping[str, Any]]) -> str:
    n = len(evaluations)

    def pct(field: str) -> str:
        hits = sum(1 for e in evaluations if e.get(field) is True)
        return f"{hits}/{n} ({100 * hits / n:.1f}%)" if n else "0/0"

    checked = sum(1 for e in evaluations if e.get("equivalent") is not None)
    categories = Counter(str(e.get("category")) for e in evaluations)
    return (
        f"execution {pct('execution_ok')}, structural {pct('structural_match')}, "
        f"equivalence {pct('equivalent')} ({checked} checked), "
        f"categories {dict(sorted(categories.items()))}"
    )


def freeze(
    release_dir: Path,
    *,
    labels: Sequence[str] = LABELS,
    base_image: str | None = None,
    wheelhouse: Path | None = None,
    work_dir: Path | None = None,
    quiet: bool = False,
) -> dict[str, list[dict[str, Any]]]:
    """Score the rows, then write them, the matrix, and the rebuilt release.json.

    Nothing in `release_dir` changes unless every row scored as it must.
    """
    from engine.release import load_release

    unknown = [label for label in labels if label not in LABELS]
    if unknown:
        raise FreezeError(f"unknown row(s) {', '.join(unknown)}; the rows are {', '.join(LABELS)}")

    def say(text: str) -> None:
        if not quiet:
            print(text, file=sys.stderr, flush=True)

    prompts = demo_build.build_prompts()
    requirements = demo_build.evaluator_requirements()
    scored: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="pqid-frozen-") as tmp:
        work = work_dir or Path(tmp)
        # A staging release: the prompts and pins the rows are frozen for, an empty matrix.
        staging = work / "release"
        if staging.exists():
            raise FreezeError(f"{staging}: exists; give an empty --work-dir")
        demo_build.write_release(staging, prompts)
        release = load_release(staging)
        if release.evaluator_requirements != tuple(requirements):
            raise FreezeError("the staging release does not pin evaluator/requirements.txt")
        for label in labels:
            started = time.monotonic()
            say(f"scoring {label} ...")
            scored[label] = score_row(
                staging,
                release.prompts,
                label,
                work,
                base_image=base_image,
                wheelhouse=wheelhouse,
                requirements=requirements,
                quiet=quiet,
            )
            say(f"{label}: {rates(scored[label])} ({time.monotonic() - started:.1f} s)")

    frozen = release_dir / demo_build.FROZEN_DIR
    frozen.mkdir(parents=True, exist_ok=True)
    matrix_path = release_dir / demo_build.MATRIX_FILE
    existing: list[dict[str, Any]] = []
    if matrix_path.exists():
        existing = list(json.loads(matrix_path.read_bytes()).get("rows") or [])
    for label, evaluations in scored.items():
        demo_build._write_atomic(release_dir / evaluations_file(label), _jsonl(evaluations))
    matrix = {"rows": matrix_rows(existing, labels)}
    demo_build._write_atomic(matrix_path, demo_build._pretty(matrix))
    demo_build.write_release(release_dir, prompts)
    return scored


# --- command line ----------------------------------------------------------------------


def _default_base_image() -> str | None:
    try:
        from engine.replay.docker import connect

        connect().images.get(LOCAL_BASE_IMAGE)
    except Exception:
        return None
    return LOCAL_BASE_IMAGE


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.tools.demo_frozen",
        description="Score the demo release's frozen matrix (oracle, retrieval-copy, empty) "
        "in the evaluator container and rewrite release.json.",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=DEMO_RELEASE_DIR,
        metavar="DIR",
        help="release directory (default: the bundled engine/demo/release)",
    )
    parser.add_argument(
        "--base-image",
        default=None,
        metavar="IMAGE",
        help=f"evaluator base image (default: {LOCAL_BASE_IMAGE} when it "
        "exists locally, else the Dockerfile's default)",
    )
    parser.add_argument(
        "--wheelhouse",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"offline wheels for the image (default: {LOCAL_WHEELHOUSE} when it holds wheels)",
    )
    parser.add_argument(
        "--row",
        action="append",
        choices=LABELS,
        default=None,
        help="score only this row (repeatable; default: all three); other "
        "rows of the matrix are kept",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="keep the staging release, responses and replay outputs here "
        "(default: a temporary directory, removed)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    from engine.errors import PqidError

    base_image = args.base_image or _default_base_image()
    wheelhouse = args.wheelhouse
    if wheelhouse is None and LOCAL_WHEELHOUSE.is_dir() and any(LOCAL_WHEELHOUSE.glob("*.whl")):
        wheelhouse = LOCAL_WHEELHOUSE
    labels = tuple(dict.fromkeys(args.row)) if args.row else LABELS
    started = time.monotonic()
    try:
        scored = freeze(
            args.output,
            labels=labels,
            base_image=base_image,
            wheelhouse=wheelhouse,
            work_dir=args.work_dir,
            quiet=args.quiet,
        )
    except (FreezeError, demo_build.BuildError, PqidError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for label, evaluations in scored.items():
        print(f"{evaluations_file(label)}: {len(evaluations)} evaluations; {rates(evaluations)}")
    print(f"wrote {args.output} ({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
