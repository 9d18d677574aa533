"""Extraction of Python code from model replies: the rules, and that it never raises."""

from __future__ import annotations

import ast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluator.extract import Extraction, extract_code

GHZ = (
    "from qiskit import QuantumCircuit\n"
    "\n"
    "def build_circuit():\n"
    "    qc = QuantumCircuit(3)\n"
    "    qc.h(0)\n"
    "    qc.cx(0, 1)\n"
    "    qc.cx(1, 2)\n"
    "    return qc\n"
)


def test_python_fence_is_taken_and_prose_reported() -> None:
    got = extract_code(f"Here is the circuit:\n\n```python\n{GHZ}```\n\nIt has 3 qubits.")
    assert got == Extraction(code=GHZ, method="fenced", prose_removed=True, fences=1)


@pytest.mark.parametrize("tag", ["python", "py", "Python3", "py {.numberLines}"])
def test_python_tags_are_recognised(tag: str) -> None:
    got = extract_code(f"```{tag}\nx = 1\n```")
    assert (got.code, got.method, got.prose_removed) == ("x = 1\n", "fenced", False)


def test_several_python_blocks_are_joined_in_order_and_other_languages_skipped() -> None:
    text = (
        "Install:\n```bash\npip install qiskit\n```\n"
        "First:\n```python\nfrom qiskit import QuantumCircuit\n```\n"
        "Then:\n```py\nqc = QuantumCircuit(2)\n```\n"
    )
    got = extract_code(text)
    assert got.code == "from qiskit import QuantumCircuit\n\nqc = QuantumCircuit(2)\n"
    assert (got.method, got.fences, got.prose_removed) == ("fenced", 2, True)


def test_untagged_fence_is_used() -> None:
    got = extract_code(f"```\n{GHZ}```")
    assert (got.code, got.method, got.fences) == (GHZ, "fenced", 1)


def test_untagged_output_block_beside_python_is_dropped() -> None:
    text = f"```python\n{GHZ}```\nOutput:\n```\n{{'000': 500, '111': 524}} counts\n```"
    got = extract_code(text)
    assert got.code == GHZ
    assert got.fences == 1 and got.prose_removed


def test_unterminated_fence_runs_to_the_end() -> None:
    got = extract_code("Sure!\n```python\n" + GHZ + "    # the reply was cut off here")
    assert got.method == "fenced"
    assert got.code.startswith("from qiskit import QuantumCircuit")
    assert ast.parse(got.code)


def test_tilde_fences_and_longer_backtick_fences() -> None:
    assert extract_code("~~~python\nx = 1\n~~~").code == "x = 1\n"
    nested = "````python\ns = '''\n```\n'''\n````"
    assert extract_code(nested).code == "s = '''\n```\n'''\n"


def test_indented_fence_body_is_dedented() -> None:
    got = extract_code("1. Do this:\n   ```python\n   x = 1\n   y = 2\n   ```\n")
    assert got.code == "x = 1\ny = 2\n"


def test_bare_code_is_taken_raw() -> None:
    got = extract_code(GHZ)
    assert got == Extraction(code=GHZ, method="raw", prose_removed=False, fences=0)


def test_prose_around_unfenced_code_is_removed() -> None:
    got = extract_code(f"Here is my answer.\n{GHZ}\nThis prepares a GHZ state.\nEnjoy.")
    assert got.code == GHZ
    assert (got.method, got.prose_removed) == ("raw", True)


def test_broken_unfenced_code_is_kept_so_it_fails_as_a_syntax_error() -> None:
    got = extract_code("Answer:\nfrom qiskit import QuantumCircuit\nqc = QuantumCircuit(3\n")
    assert got.method == "raw"
    assert got.code.endswith("qc = QuantumCircuit(3\n")


@pytest.mark.parametrize(
    "text", [None, "", "   \n", "Sorry", "I cannot help with that request.", "42"]
)
def test_text_without_code_gives_none(text: str | None) -> None:
    got = extract_code(text)
    assert (got.code, got.method, got.fences) == ("", "none", 0)


def test_windows_line_endings() -> None:
    got = extract_code("```python\r\nx = 1\r\n```\r\n")
    assert got.code == "x = 1\n"


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_never_raises_on_any_text(text: str) -> None:
    got = extract_code(text)
    assert got.method in ("fenced", "raw", "none")
    assert isinstance(got.code, str) and got.fences >= 0
    assert (got.code == "") == (got.method == "none")


_fragments = st.sampled_from(
    [
        "```",
        "```python",
        "~~~",
        "````py",
        "\n",
        " ",
        "x = 1",
        "def f(:",
        "import os",
        "#",
        "(",
        "\x00",
        "\r",
        "    ",
        "prose here",
        "'''",
        "from . import",
        "@d",
        "\ud800",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_fragments, max_size=40).map("".join))
def test_never_raises_on_markdown_like_text(text: str) -> None:
    got = extract_code(text)
    assert got.method in ("fenced", "raw", "none")


def test_deep_nesting_does_not_raise() -> None:
    assert extract_code("(" * 200_000).method in ("raw", "none")
    assert extract_code("```python\n" + "[" * 50_000 + "\n```").method == "fenced"
