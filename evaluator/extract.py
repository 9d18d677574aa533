"""Pulls the Python program out of a model's free-text reply."""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass

__all__ = ["Extraction", "extract_code"]

# Info strings that mark a fenced block as Python; anything else (bash, text, json) is skipped.
_PYTHON_TAGS = frozenset({"python", "py", "python3", "py3", "ipython", "python-repl"})

# Up to three spaces of indentation, then three or more backticks or tildes (CommonMark).
_FENCE_OPEN = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n]*)$")

# Patterns for a line that starts a program rather than a sentence. Each is anchored and free
# of overlapping repetitions, so a hostile line of any length is matched in linear time.
_STATEMENT_START = re.compile(
    r"(?:import\s+[A-Za-z_]|from\s+[\w.]+\s+import\b|(?:async\s+)?def\s+\w+\s*\("
    r"|class\s+\w+\s*[(:]|@[A-Za-z_]|#|if\s+__name__\s*==)"
)
_ASSIGNMENT = re.compile(
    r"[A-Za-z_][\w.]*(?:\[[^\]\n]*\])?(?:\s*,\s*[A-Za-z_][\w.]*)*\s*"
    r"(?::[^=\n]*)?(?:[-+*/%&|^@]|//|\*\*|<<|>>)?=(?!=)"
)
_CALL = re.compile(r"[A-Za-z_][\w.]*\s*\(")


def _looks_like_code(line: str) -> bool:
    """Whether a line reads like the first line of a program ("qc = ...", "import ...")."""
    stripped = line.strip()
    if not stripped:
        return False
    if _STATEMENT_START.match(stripped) or _ASSIGNMENT.match(stripped):
        return True
    return _CALL.match(stripped) is not None and stripped.endswith(")")


# Trailing prose is peeled off one line at a time; this bounds the re-parsing on huge inputs.
_MAX_TRAILING_TRIMS = 60


@dataclass(frozen=True)
class Extraction:
    """The code found in a reply and how it was found."""

    code: str
    method: str  # "fenced", "raw" or "none"
    prose_removed: bool
    fences: int  # number of fenced blocks whose contents were taken


@dataclass(frozen=True)
class _Block:
    """One fenced block of a Markdown reply."""

    tag: str
    body: str


def _parses(source: str) -> bool:
    """Whether the source is syntactically valid Python."""
    try:
        ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return False
    return True


def _looks_like_program(source: str) -> bool:
    """Whether parsed source does more than name a word (so "Sorry" is not a program)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return False
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, (ast.Name, ast.Constant)):
            continue
        return True
    return False


def _split_fences(lines: list[str]) -> tuple[list[_Block], list[str]]:
    """Split Markdown lines into fenced blocks and the prose lines outside them."""
    blocks: list[_Block] = []
    prose: list[str] = []
    i = 0
    n = len(lines)
    while i < n:
        match = _FENCE_OPEN.match(lines[i])
        if match is None:
            prose.append(lines[i])
            i += 1
            continue
        fence = match.group("fence")
        info = match.group("info").strip()
        # A backtick fence's info string may not contain a backtick (CommonMark); such a
        # line is inline code, not a fence.
        if fence[0] == "`" and "`" in info:
            prose.append(lines[i])
            i += 1
            continue
        tag = info.split()[0].lower().strip("{}.") if info else ""
        closer = re.compile(r"^ {0,3}" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$")
        body: list[str] = []
        i += 1
        # An unterminated fence (a reply cut off mid-block) runs to the end of the text.
        while i < n and closer.match(lines[i]) is None:
            body.append(lines[i])
            i += 1
        i += 1  # skip the closing fence, if any
        blocks.append(_Block(tag=tag, body=textwrap.dedent("\n".join(body)).strip("\n")))
    return blocks, prose


def _from_fences(text: str) -> Extraction | None:
    """Take the Python fenced blocks of a Markdown reply, or None if it has none."""
    lines = text.split("\n")
    blocks, prose = _split_fences(lines)
    if not blocks:
        return None
    tagged = [b for b in blocks if b.tag in _PYTHON_TAGS]
    # Untagged blocks are often program output; keep them beside Python blocks only when they
    # parse, and use them alone when the reply has no Python-tagged block at all.
    chosen = [
        b
        for b in blocks
        if b.tag in _PYTHON_TAGS or (b.tag == "" and (not tagged or _parses(b.body)))
    ]
    chosen = [b for b in chosen if b.body.strip()]
    if not chosen:
        return None
    chosen_ids = {id(b) for b in chosen}
    skipped_text = any(b.body.strip() for b in blocks if id(b) not in chosen_ids)
    prose_text = any(line.strip() for line in prose)
    return Extraction(
        code="\n\n".join(b.body for b in chosen) + "\n",
        method="fenced",
        prose_removed=prose_text or skipped_text,
        fences=len(chosen),
    )


def _from_prose(text: str) -> Extraction | None:
    """Drop prose before the first code-looking line and after the last parseable one."""
    lines = text.split("\n")
    start = next((i for i, line in enumerate(lines) if _looks_like_code(line)), None)
    if start is None:
        return None
    tail = lines[start:]
    while tail and not tail[-1].strip():
        tail.pop()
    removed_before = any(line.strip() for line in lines[:start])
    for trims in range(min(len(tail), _MAX_TRAILING_TRIMS + 1)):
        if trims:
            dropped = tail[len(tail) - trims]
            # Only sentence-like lines are peeled; a broken line of code stays, so that the
            # program fails as a syntax error instead of silently losing its end.
            if dropped[:1].isspace() or _looks_like_code(dropped):
                break
        candidate = tail[: len(tail) - trims]
        if not candidate or not candidate[-1].strip():
            continue
        source = "\n".join(candidate)
        if _parses(source) and _looks_like_program(source):
            return Extraction(
                code=source + "\n",
                method="raw",
                prose_removed=removed_before or trims > 0,
                fences=0,
            )
    # Code-like text that never parses is still the model's program: executing it reports a
    # syntax error, which is a fairer verdict than "no code".
    return Extraction(
        code="\n".join(tail) + "\n",
        method="raw",
        prose_removed=removed_before,
        fences=0,
    )


def _extract(text: str) -> Extraction:
    """Apply the extraction rules in order of preference."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        return Extraction(code="", method="none", prose_removed=False, fences=0)
    fenced = _from_fences(text)
    if fenced is not None:
        return fenced
    if _looks_like_program(text):
        return Extraction(code=text.strip("\n") + "\n", method="raw", prose_removed=False, fences=0)
    found = _from_prose(text)
    if found is not None:
        return found
    return Extraction(code="", method="none", prose_removed=bool(text.strip()), fences=0)


def extract_code(text: str | None) -> Extraction:
    """Find the Python code in a model reply; never raises."""
    if not isinstance(text, str):
        return Extraction(code="", method="none", prose_removed=False, fences=0)
    try:
        return _extract(text)
    except Exception:  # a defensive net: extraction must never take the scorer down
        return Extraction(code="", method="none", prose_removed=bool(text.strip()), fences=0)
