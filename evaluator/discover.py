"""Finds the circuit a program produced: its entrypoint's return value, else a module variable."""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["Discovery", "assignment_order", "find_circuit"]

ENTRYPOINT = "entrypoint"
MODULE_LEVEL = "module_level"

# Statements whose bodies do not run at module level when the module is executed.
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


@dataclass(frozen=True)
class Discovery:
    """The circuit found (or None), where it came from, and why nothing was found."""

    circuit: object | None
    source: str | None
    note: str | None


def _target_names(target: ast.AST) -> list[str]:
    """Plain names bound by an assignment target (attributes and subscripts bind none)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in _target_names(element)]
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return []


def assignment_order(source: str) -> list[str]:
    """Module-level names in the order of their last binding in the source text."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    order: dict[str, None] = {}

    def bind(names: list[str]) -> None:
        for name in names:
            order.pop(name, None)
            order[name] = None

    def visit(node: ast.AST) -> None:
        if isinstance(node, _SCOPES):
            return
        if isinstance(node, ast.Assign):
            for target in node.targets:
                bind(_target_names(target))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            bind(_target_names(node.target))
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            bind(_target_names(node.target))
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            bind(_target_names(node.optional_vars))
        elif isinstance(node, ast.NamedExpr):
            bind(_target_names(node.target))
        for child in ast.iter_child_nodes(node):
            visit(child)

    try:
        visit(tree)
    except RecursionError:
        return list(order)
    return list(order)


def find_circuit(
    namespace: Mapping[str, object],
    entrypoint: str | None,
    is_circuit: Callable[[object], bool],
    order: list[str],
) -> Discovery:
    """Call the entrypoint (its exceptions propagate), else pick the last module-level circuit."""
    note: str | None = None
    function = namespace.get(entrypoint) if entrypoint else None
    if entrypoint and callable(function):
        value = function()
        if is_circuit(value):
            return Discovery(circuit=value, source=ENTRYPOINT, note=None)
        note = f"{entrypoint}() returned {type(value).__name__}, not a QuantumCircuit"
    elif entrypoint:
        note = f"no function named {entrypoint}"
    named = [name for name in order if is_circuit(namespace.get(name))]
    if not named:
        # Names bound in ways the source scan cannot see (globals(), exec) still count.
        named = [
            name
            for name, value in namespace.items()
            if not name.startswith("__") and is_circuit(value)
        ]
    if named:
        return Discovery(circuit=namespace[named[-1]], source=MODULE_LEVEL, note=note)
    return Discovery(circuit=None, source=None, note=note or "no QuantumCircuit found")
