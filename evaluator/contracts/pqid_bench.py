"""PQID-Bench v1.0.0's scoring contract, as the project's own code.

Evaluator ``pqid-bench-evaluator-1.1.0-safe-builtins`` with the structural predicate
``pqid-bench-reference-signature-1.0.0-count-map``, written from the benchmark's reference
scripts (its generation harness, copy baseline and executable-validity check). Every rule
that can change a verdict is here, in the order a response meets them:

1. The code: the item's `generated_code` when it is a non-empty string, else its `content`
   (never a raw provider body); surrounding whitespace goes, and when a fenced block opens with
   three backticks (optionally tagged `python` or `py`, any case) and closes, the first such
   block's text, trimmed, is the code. Nothing else is removed. A code that is blank then is an
   *empty generation*: nothing runs and every check fails.
2. The namespace: exactly `np`, `numpy`, `math`, `pi`, the classes `QuantumCircuit`,
   `QuantumRegister`, `ClassicalRegister`, `Parameter`, `ParameterVector`, the registers `qr`
   and `q` (one quantum register named "q") and `cr` and `c` (one classical register named
   "c"), and the parameters `theta`, `phi`, `lam` (named "lambda"), `gamma`, `beta`. There is
   no `__name__`. In *strict standalone* mode (the headline) both registers have 4 bits; the
   target-context recovery diagnostic sizes them from the target (see `register_widths`).
3. The built-ins: only `SAFE_BUILTINS`, with `print` a silent no-op returning None, and an
   `__import__` that admits absolute imports of `math`, `numpy` and `qiskit` (and their
   submodules) only. There is no `__build_class__`, so a `class` statement fails.
4. Execution: the code is compiled as ``"<string>"`` with postponed evaluation of annotations
   in effect (the reference compiles it inside a module that imports
   ``annotations`` from ``__future__``, and a string given to `exec` inherits that), then run
   with the namespace as both globals and locals. Any exception is a failed execution, named
   by its class (a `SyntaxError` included).
5. The circuit: every value of the namespace that is a `QuantumCircuit` is a candidate, in
   namespace order. Candidates are ranked by ``100 |qubits - target qubits| + 50 |clbits -
   target clbits| + |gate count - target gate count|``, each term only when the context has
   that value, then by name; the first is chosen. The strict run's context is empty, so it
   picks the candidate whose name sorts first. No function is called.
6. The signature: ``num_qubits`` equal, ``num_clbits`` equal, the complete count map of
   operation names (lower-cased, barriers included, a zero count the same as none) equal, and
   the scalar gate count (the same map's total without barriers) equal. All four is a match.
7. Assembly admissibility: OpenQASM 3 export (`qiskit.qasm3.dumps`) of the chosen circuit.
8. The small-circuit statevector check: at most 4 qubits and no unbound parameter; barriers
   are skipped; a measurement, reset, delay, control-flow operation or anything touching a
   classical bit makes it ineligible; else the state's norm must be 1 within 1e-9.
9. Target-context recovery: the same code run again in a fresh namespace whose registers have
   the target's widths, its circuit chosen by closeness to the target; a diagnostic only.
   The two namespaces differ in nothing but the registers and the parameter objects
   (`CONTEXT_NAMES`), so code that provably never reads those (`context_free`) would build
   the same circuits again: its recovery verdict is then the strict run's circuits chosen
   by the recovery rule, without the second run.

The rules are admissibility, not the security boundary. Here the code runs in the executor's
forked, limited child, which hands back every candidate (name and QPY) and is trusted with
nothing else: the grader, where no generated code ever ran, loads the candidates, applies the
choice and computes every count itself. The child of the recovery run learns the target's
qubit and clbit counts, as its registers show them to the code by this contract's definition;
nothing else of the target ever reaches the executor.

Only the standard library is imported at module level; the executor's and the grader's parts
import Qiskit when they are called.
"""

from __future__ import annotations
import __future__

import ast
import builtins
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evaluator.contracts import CONTRACT_PQID_BENCH, PREDICATE_PQID_BENCH
from evaluator.schema import categorize, short_error

__all__ = [
    "COMPILE_FLAGS",
    "CONTRACT",
    "DEFAULT_REGISTER_WIDTH",
    "EMPTY_GENERATION",
    "IMPORT_ROOTS",
    "PREDICATE",
    "RECOVERY_MODE",
    "SAFE_BUILTINS",
    "SOURCE_NAME",
    "STRICT_MODE",
    "CodeChoice",
    "MetadataAsText",
    "build_namespace",
    "candidates",
    "choose",
    "context_free",
    "evaluation_fields",
    "grade",
    "grader_target",
    "register_widths",
    "run_verdict",
    "select_code",
    "signature",
]

CONTRACT = CONTRACT_PQID_BENCH
PREDICATE = PREDICATE_PQID_BENCH
STRICT_MODE = "strict_standalone"
RECOVERY_MODE = "target_context"
EMPTY_GENERATION = "EmptyGeneration"
EQUIVALENCE_REASON = "not part of the pqid-bench contract"

# -- 1. the code ------------------------------------------------------------------------------

# The first fenced block: three backticks, an optional `python` or `py` tag (any case), any
# whitespace, then everything up to the next three backticks. Matched, nothing else is kept.
_FENCED_BLOCK = re.compile(r"```(?:python|py)?\s*(.*?)```", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class CodeChoice:
    """The code a response is scored on, and where it came from."""

    code: str
    source: str | None  # "generated_code", "content", or None when neither has text
    fenced: bool  # a fenced block was found and its contents taken
    outside_text: bool  # something other than whitespace surrounded that block

    @property
    def empty(self) -> bool:
        """Whether this is an empty generation (nothing to run)."""
        return not self.code.strip()


def select_code(generated_code: object, content: object) -> CodeChoice:
    """Apply the code-channel rule: `generated_code` if non-empty, else `content`, unfenced."""
    for source, value in (("generated_code", generated_code), ("content", content)):
        if isinstance(value, str) and value:
            text = value.strip()
            match = _FENCED_BLOCK.search(text)
            if match is None:
                return CodeChoice(code=text, source=source, fenced=False, outside_text=False)
            outside = (text[: match.start()] + text[match.end() :]).strip()
            return CodeChoice(
                code=match.group(1).strip(), source=source, fenced=True, outside_text=bool(outside)
            )
    return CodeChoice(code="", source=None, fenced=False, outside_text=False)


# -- 2. and 3. the namespace and the built-ins ------------------------------------------------

DEFAULT_REGISTER_WIDTH = 4
IMPORT_ROOTS = frozenset({"math", "numpy", "qiskit"})
# The safe built-ins, besides `print` (silent) and `__import__` (the whitelist below).
SAFE_BUILTINS: tuple[str, ...] = (
    "abs",
    "all",
    "any",
    "bool",
    "complex",
    "dict",
    "enumerate",
    "float",
    "int",
    "len",
    "list",
    "max",
    "min",
    "pow",
    "range",
    "reversed",
    "round",
    "set",
    "sum",
    "tuple",
    "zip",
)
# How the code is compiled: as the reference's `exec` of a string does, inside a module with
# postponed annotations, so an annotation naming something absent is not an error.
SOURCE_NAME = "<string>"
COMPILE_FLAGS = __future__.annotations.compiler_flag


def register_widths(context: Mapping[str, Any]) -> tuple[int, int]:
    """The widths of the preloaded registers `qr`/`q` and `cr`/`c` for an execution context.

    The qubits are the context's `num_qubits` when truthy, else 4; the clbits its `num_clbits`
    when truthy, else the qubits; each at least 1. The strict run's context is empty (4 and 4).
    """
    qubits = int(context.get("num_qubits") or DEFAULT_REGISTER_WIDTH)
    clbits = int(context.get("num_clbits") or max(qubits, 1))
    return max(qubits, 1), max(clbits, 1)


def _silent_print(*_args: object, **_kwargs: object) -> None:
    """`print` under this contract: accepts anything, writes nothing, returns None."""
    return None


def _whitelisted_import(
    name: object,
    globals: object = None,
    locals: object = None,
    fromlist: object = (),
    level: int = 0,
) -> object:
    """`__import__` under this contract: absolute imports of the whitelisted roots only."""
    if level != 0:
        raise ImportError("relative imports are not admitted under the pqid-bench contract")
    root = str(name).split(".", maxsplit=1)[0]
    if root not in IMPORT_ROOTS:
        raise ImportError(f"import of {name!r} is not admitted under the pqid-bench contract")
    return builtins.__import__(name, globals, locals, fromlist, level)  # type: ignore[arg-type]


def safe_builtins() -> dict[str, object]:
    """The built-ins a response's code sees: the whitelist, a silent print, a guarded import."""
    table: dict[str, object] = {"__import__": _whitelisted_import, "print": _silent_print}
    for name in SAFE_BUILTINS:
        table[name] = getattr(builtins, name)
    return table


def build_namespace(qubits: int, clbits: int) -> dict[str, Any]:
    """The execution namespace with registers of the given widths (imports Qiskit)."""
    import numpy
    from qiskit import ClassicalRegister, QuantumCircuit, QuantumRegister
    from qiskit.circuit import Parameter, ParameterVector

    quantum = QuantumRegister(qubits, "q")
    classical = ClassicalRegister(clbits, "c")
    return {
        "__builtins__": safe_builtins(),
        "np": numpy,
        "numpy": numpy,
        "math": math,
        "pi": math.pi,
        "QuantumCircuit": QuantumCircuit,
        "QuantumRegister": QuantumRegister,
        "ClassicalRegister": ClassicalRegister,
        "Parameter": Parameter,
        "ParameterVector": ParameterVector,
        "qr": quantum,
        "q": quantum,
        "cr": classical,
        "c": classical,
        "theta": Parameter("theta"),
        "phi": Parameter("phi"),
        "lam": Parameter("lambda"),
        "gamma": Parameter("gamma"),
        "beta": Parameter("beta"),
    }


# -- 9. when the recovery run cannot differ from the strict run ------------------------------

# The names whose values differ between the strict and the recovery namespace: the registers
# (their widths) and the parameters (fresh objects, each with its own random identity).
CONTEXT_NAMES = frozenset({"qr", "q", "cr", "c", "theta", "phi", "lam", "gamma", "beta"})
# Ways to reach a namespace, a frame, the heap or a dynamic lookup without naming a context
# name: reflective built-ins and modules, frame and function internals, string formatting
# (which follows attributes and keys), deserializers that call arbitrary callables. Any of
# them, as a name, an attribute or an imported name, anywhere in the code: not context-free.
_REFLECTIVE = frozenset(
    """
    globals locals vars dir eval exec compile getattr setattr delattr hasattr breakpoint type
    object super format format_map vformat f_globals f_locals f_back f_builtins f_code
    tb_frame tb_next gi_frame gi_code cr_frame ag_frame gc inspect sys get_objects
    get_referrers get_referents currentframe stack trace getouterframes getinnerframes
    getargvalues getframeinfo getmembers getattr_static attrgetter methodcaller operator
    builtins modules settrace setprofile exc_info exception traceback frame ctypes weakref
    pickle marshal copyreg loads load os subprocess importlib import_module reload types
    functools threading signal code
    """.split()
)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _suspicious(identifier: str) -> bool:
    return identifier.startswith("__") or identifier in _REFLECTIVE


def _plain_format(node: ast.Attribute) -> bool:
    """`"literal".format`, whose fields name only positions or keywords (no `.` or `[`)."""
    import string

    receiver = node.value
    if node.attr != "format" or not isinstance(receiver, ast.Constant):
        return False
    if not isinstance(receiver.value, str):
        return False
    try:
        fields = list(string.Formatter().parse(receiver.value))
    except ValueError:
        return False
    return all(
        name is None or (re.fullmatch(r"\w*", name) and "{" not in (spec or ""))
        for _, name, spec, _ in fields
    )


def _bound_names(target: ast.AST) -> set[str]:
    """Plain names an assignment target binds (not attributes or subscripts)."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return {name for element in target.elts for name in _bound_names(element)}
    return set()


def _comprehension_parts(node: ast.AST) -> list[ast.AST]:
    """A comprehension's expressions, without its targets."""
    parts: list[ast.AST] = []
    if isinstance(node, ast.DictComp):
        parts += [node.key, node.value]
    elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
        parts.append(node.elt)
    for generator in getattr(node, "generators", []):
        parts += [generator.iter, *generator.ifs]
    return parts


def _arguments(arguments: ast.arguments) -> list[ast.arg]:
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    return every + [a for a in (arguments.vararg, arguments.kwarg) if a is not None]


def _function_locals(scope: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """Names local to a function or lambda: its parameters and every name bound in its body
    (a comprehension's own targets excepted: they are local to the comprehension)."""
    found = {a.arg for a in _arguments(scope.args)}
    body = scope.body if isinstance(scope.body, list) else [scope.body]
    pending: list[ast.AST] = list(body)
    while pending:
        node = pending.pop()
        if isinstance(node, _COMPREHENSIONS):
            pending.extend(_comprehension_parts(node))
            continue
        if isinstance(node, _SCOPES):
            if not isinstance(node, ast.Lambda):
                found.add(node.name)
            # Defaults and decorators run here; the nested body is another scope.
            inner = node.args
            pending.extend([*inner.defaults, *(d for d in inner.kw_defaults if d is not None)])
            pending.extend(getattr(node, "decorator_list", []))
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            found.add(node.id)
        elif isinstance(node, ast.alias):
            found.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            found.add(node.name)
        pending.extend(ast.iter_child_nodes(node))
    return found


def _first_bindings(module: ast.Module) -> dict[str, int]:
    """Each name's first top-level statement that binds it whenever it completes."""
    first: dict[str, int] = {}
    for index, statement in enumerate(module.body):
        names: set[str] = set()
        if isinstance(statement, ast.Assign):
            names = {n for target in statement.targets for n in _bound_names(target)}
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            names = _bound_names(statement.target)
        elif isinstance(statement, (ast.Import, ast.ImportFrom)):
            names = {(a.asname or a.name).split(".")[0] for a in statement.names}
        elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = {statement.name}
        for name in names:
            first.setdefault(name, index)
    return first


def context_free(code: str) -> bool:
    """Whether the code provably never reads a value the recovery namespace changes.

    True only when the code parses, contains no class, no `global`/`nonlocal` or `:=` naming
    a context name and nothing reflective (`_REFLECTIVE`, or any identifier that starts with
    two underscores), and every use of a context name can only run after the code itself
    has bound that name: in a function, lambda or comprehension where it is local, inside
    the body of a module-level `for` loop that assigns it, or in a top-level statement after
    the first top-level statement that binds it. Once the code has bound a name the
    preloaded value is gone from the namespace for good. Anything else: False (run both).
    """
    try:
        module = ast.parse(code, SOURCE_NAME, "exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    first = _first_bindings(module)
    # (node, its top-level statement's index, names local to the enclosing scopes, names a
    # module-level loop around it has assigned, whether it is in module scope)
    stack: list[tuple[ast.AST, int, frozenset[str], frozenset[str], bool]] = [
        (statement, index, frozenset(), frozenset(), True)
        for index, statement in enumerate(module.body)
    ]
    while stack:
        node, index, local, looped, at_module = stack.pop()
        if isinstance(node, ast.ClassDef):
            return False
        if isinstance(node, (ast.Global, ast.Nonlocal)) and CONTEXT_NAMES & set(node.names):
            return False
        if isinstance(node, ast.NamedExpr) and _bound_names(node.target) & CONTEXT_NAMES:
            return False
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            # `q += 1` reads q before it binds it: checked as a read.
            stack.append((ast.Name(node.target.id, ast.Load()), index, local, looped, at_module))
        if isinstance(node, ast.Name):
            if _suspicious(node.id):
                return False
            if (
                node.id in CONTEXT_NAMES
                and not isinstance(node.ctx, ast.Store)  # binding it reads nothing
                and node.id not in local
                and node.id not in looped
                and not index > first.get(node.id, len(module.body))
            ):
                return False
        elif isinstance(node, ast.Attribute) and _suspicious(node.attr):
            if not _plain_format(node):
                return False
        elif isinstance(node, ast.alias):
            parts = [*node.name.split("."), *([node.asname] if node.asname else [])]
            if any(_suspicious(part) for part in parts):
                return False
        elif isinstance(node, ast.ImportFrom):
            if any(_suspicious(part) for part in (node.module or "").split(".")):
                return False
        if isinstance(node, _SCOPES):
            arguments = node.args
            outer = [*arguments.defaults, *(d for d in arguments.kw_defaults if d is not None)]
            outer += getattr(node, "decorator_list", [])
            outer += [a.annotation for a in _arguments(arguments) if a.annotation is not None]
            returns = getattr(node, "returns", None)
            if isinstance(returns, ast.expr):
                outer.append(returns)
            stack.extend((child, index, local, looped, at_module) for child in outer)
            inner = local | _function_locals(node)
            body = node.body if isinstance(node.body, list) else [node.body]
            stack.extend((child, index, inner, looped, False) for child in body)
            continue
        if isinstance(node, _COMPREHENSIONS):
            generators = node.generators
            # The first iterable is evaluated outside; targets are local to the comprehension.
            stack.append((generators[0].iter, index, local, looped, at_module))
            inner = local | {n for g in generators for n in _bound_names(g.target)}
            rest: list[ast.AST] = [g.target for g in generators]
            rest += [g.iter for g in generators[1:]] + [c for g in generators for c in g.ifs]
            rest += [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            stack.extend((child, index, inner, looped, False) for child in rest)
            continue
        if isinstance(node, (ast.For, ast.AsyncFor)) and at_module:
            # In module scope the body runs only after the target has been assigned.
            head = [node.target, node.iter, *node.orelse]
            stack.extend((child, index, local, looped, at_module) for child in head)
            inner_loop = looped | _bound_names(node.target)
            stack.extend((child, index, local, inner_loop, at_module) for child in node.body)
            continue
        stack.extend(
            (child, index, local, looped, at_module) for child in ast.iter_child_nodes(node)
        )
    return True


# -- 5. the candidates (executor side) and the choice (grader side) ----------------------------


def candidates(
    namespace: Mapping[Any, object], is_circuit: Callable[[object], bool]
) -> list[tuple[str, object]]:
    """Every circuit bound in the namespace after execution, with its name, in namespace order.

    Names that are not plain strings (only `globals()` tricks make them) cannot be ranked by
    name and are left out.
    """
    return [
        (name, value)
        for name, value in list(namespace.items())
        if type(name) is str and is_circuit(value)
    ]


class MetadataAsText(json.JSONEncoder):
    """Serializes circuit metadata QPY cannot (a set, an object) as its repr.

    A circuit's metadata plays no part in this contract, so it must not stop a candidate from
    reaching the grader.
    """

    def default(self, o: object) -> object:
        return repr(o)


def scalar_gate_count(counts: Mapping[str, int]) -> int:
    """The scalar gate count: every operation of a lower-cased count map except barriers."""
    return sum(count for name, count in counts.items() if name != "barrier")


def observed_counts(raw: Mapping[Any, Any]) -> dict[str, int]:
    """A circuit's `count_ops()` as the predicate sees it: names lower-cased (a later name
    that lower-cases the same replaces an earlier one, as a dict built in order does)."""
    return {str(name).lower(): int(count) for name, count in raw.items()}


def expected_counts(raw: object) -> dict[str, int]:
    """The target's `gate_types` as the predicate sees it (lower-cased, None counts 0)."""
    if not isinstance(raw, dict):
        return {}
    return {str(name).lower(): int(count or 0) for name, count in raw.items()}


def same_counts(left: Mapping[str, int], right: Mapping[str, int]) -> bool:
    """Count maps compared as multisets: a name with count 0 is the same as an absent one."""
    return all(left.get(name, 0) == right.get(name, 0) for name in {*left, *right})


@dataclass(frozen=True)
class Facts:
    """What the choice and the signature need of one candidate (computed by the grader)."""

    name: str
    num_qubits: int
    num_clbits: int
    counts: dict[str, int]  # lower-cased count map


def choose(facts: Sequence[Facts], context: Mapping[str, Any]) -> int | None:
    """Index of the chosen candidate: closest to the context's widths and gate count, by name."""
    if not facts:
        return None
    want_qubits = context.get("num_qubits")
    want_clbits = context.get("num_clbits")
    want_gates = context.get("gate_count")

    def rank(index: int) -> tuple[float, str]:
        fact = facts[index]
        distance = 0.0
        if want_qubits is not None:
            distance += 100.0 * abs(fact.num_qubits - float(want_qubits))
        if want_clbits is not None:
            distance += 50.0 * abs(fact.num_clbits - float(want_clbits))
        if want_gates is not None:
            distance += abs(scalar_gate_count(fact.counts) - float(want_gates))
        return distance, fact.name

    return min(range(len(facts)), key=rank)


# -- 6. the signature -------------------------------------------------------------------------


def signature(fact: Facts, target: Mapping[str, Any]) -> dict[str, Any]:
    """The reference-signature checks of a chosen candidate against the target."""
    want_counts = expected_counts(target.get("gate_types"))
    gate_count = scalar_gate_count(fact.counts)
    checks = {
        "num_qubits_match": bool(target.get("num_qubits") == fact.num_qubits),
        "num_clbits_match": bool(target.get("num_clbits") == fact.num_clbits),
        "gate_count_match": bool(target.get("gate_count") == gate_count),
        "gate_types_match": same_counts(want_counts, fact.counts),
    }
    checks["all_match"] = all(checks.values())
    return {
        "checks": checks,
        "expected": {
            "num_qubits": target.get("num_qubits"),
            "num_clbits": target.get("num_clbits"),
            "gate_count": target.get("gate_count"),
            "gate_types": want_counts,
        },
        "observed": {
            "num_qubits": fact.num_qubits,
            "num_clbits": fact.num_clbits,
            "gate_count": gate_count,
            "raw_operation_count": sum(fact.counts.values()),
            "gate_types": dict(fact.counts),
        },
    }


def differences(result: Mapping[str, Any]) -> list[str]:
    """Each failed part of the signature, in words."""
    expected, observed = result["expected"], result["observed"]
    found: list[str] = []
    for key in ("num_qubits", "num_clbits", "gate_count"):
        if not result["checks"][f"{key}_match"]:
            found.append(f"{key}: expected {expected[key]}, found {observed[key]}")
    want, have = expected["gate_types"], observed["gate_types"]
    for name in sorted({*want, *have}):
        if want.get(name, 0) != have.get(name, 0):
            found.append(f"{name}: expected {want.get(name, 0)}, found {have.get(name, 0)}")
    return found


def grader_target(target_metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The part of the target metadata this contract reads."""
    return {
        key: target_metadata.get(key)
        for key in ("num_qubits", "num_clbits", "gate_count", "gate_types")
    }


# -- 7. and 8. assembly and the statevector check (grader side) --------------------------------

_SIMULATION_MAX_QUBITS = 4
_NOT_SIMULATED = frozenset(
    {"measure", "reset", "if_else", "for_loop", "while_loop", "switch_case", "delay"}
)


def assembly(circuit: Any) -> dict[str, Any]:
    """OpenQASM 3 export of the chosen circuit: whether it succeeds, and the error's class."""
    from qiskit import qasm3

    try:
        text = qasm3.dumps(circuit)
    except Exception as exc:
        return {"success": False, "error_type": type(exc).__name__, "length": 0}
    return {"success": True, "error_type": None, "length": len(text)}


def statevector_check(circuit: Any) -> dict[str, Any]:
    """The small-circuit check: eligibility, and a norm of 1 for the state it prepares."""
    from qiskit import QuantumCircuit
    from qiskit.quantum_info import Statevector

    def skipped(reason: str) -> dict[str, Any]:
        return {"eligible": False, "success": False, "skip_reason": reason, "error_type": None}

    if circuit.num_qubits > _SIMULATION_MAX_QUBITS:
        return skipped("too_many_qubits")
    if circuit.parameters:
        return skipped("unbound_parameters")
    unitary = QuantumCircuit(circuit.num_qubits)
    for instruction in circuit.data:
        operation = instruction.operation
        name = operation.name.lower()
        if name == "barrier":
            continue
        if name in _NOT_SIMULATED or instruction.clbits:
            return skipped(f"non_unitary_or_classical:{name}")
        qubits = [circuit.find_bit(qubit).index for qubit in instruction.qubits]
        try:
            unitary.append(operation, qubits)
        except Exception as exc:
            return skipped(f"append_failed:{type(exc).__name__}")
    try:
        state = Statevector.from_instruction(unitary)
        norm = float(sum(abs(amplitude) ** 2 for amplitude in state.data))
    except Exception as exc:
        return {
            "eligible": True,
            "success": False,
            "skip_reason": None,
            "error_type": type(exc).__name__,
        }
    return {
        "eligible": True,
        "success": abs(norm - 1.0) < 1e-9,
        "skip_reason": None,
        "error_type": None,
    }


# -- the grader's part ------------------------------------------------------------------------


def _load(data: bytes, names: list[str]) -> list[Any]:
    """The candidates of one run from their QPY, one circuit per name, or ValueError."""
    from evaluator.circuits import load_circuits

    circuits = load_circuits(data)
    if len(circuits) != len(names):
        raise ValueError(f"{len(names)} candidates named, {len(circuits)} in the payload")
    return circuits


def _facts(name: str, circuit: Any) -> Facts:
    return Facts(
        name=name,
        num_qubits=int(circuit.num_qubits),
        num_clbits=int(circuit.num_clbits),
        counts=observed_counts(circuit.count_ops()),
    )


def grade(request: Mapping[str, Any], data: bytes) -> Iterator[dict[str, Any]]:
    """Grade one item's runs: the choice and the signature first, then assembly and simulation.

    `request["runs"]` lists each run's mode, candidate names and payload size, in the order
    their QPY is concatenated in `data`; a run with `"same_as": i` (an earlier run's index)
    has that run's candidates, and the checks of a circuit chosen twice are done once. Every
    count comes from the circuits as loaded here.
    """
    raw_target = request.get("target")
    target: dict[str, Any] = raw_target if isinstance(raw_target, dict) else {}
    raw_runs = request.get("runs")
    runs: list[Any] = raw_runs if isinstance(raw_runs, list) else []
    chosen: list[Any] = []
    structures: list[dict[str, Any] | None] = []
    # Per run: its candidates and their facts, or the structure that reports the failure.
    loaded: list[tuple[list[Any], list[Facts]] | dict[str, Any] | None] = []
    offset = 0
    for number, run in enumerate(runs):
        if not isinstance(run, dict):
            chosen.append(None)
            structures.append(None)
            loaded.append(None)
            continue
        same = run.get("same_as")
        if isinstance(same, int) and not isinstance(same, bool) and 0 <= same < number:
            found = loaded[same]
        else:
            size = run.get("size")
            size = size if isinstance(size, int) and not isinstance(size, bool) else 0
            part = data[offset : offset + size]
            offset += size
            names = [str(n) for n in run.get("names") or []]
            found = None
            if names:
                try:
                    circuits = _load(part, names)
                    facts = [_facts(n, c) for n, c in zip(names, circuits, strict=True)]
                    found = (circuits, facts)
                except Exception as exc:
                    found = {
                        "loaded": False,
                        "load_error": short_error(type(exc).__name__, str(exc)),
                    }
        loaded.append(found)
        if not isinstance(found, tuple):
            chosen.append(None)
            structures.append(None if found is None else dict(found))
            continue
        circuits, facts = found
        context = target if run.get("mode") == RECOVERY_MODE else {}
        index = choose(facts, context)
        assert index is not None
        result = signature(facts[index], target)
        chosen.append(circuits[index])
        structures.append(
            {
                "loaded": True,
                "load_error": None,
                "selected": facts[index].name,
                "count": len(facts),
                **result,
                "differences": differences(result),
            }
        )
    yield {"stage": "structure", "loaded": True, "runs": structures}
    finals: list[dict[str, Any] | None] = []
    for number, circuit in enumerate(chosen):
        if circuit is None:
            finals.append(None)
            continue
        earlier = next((i for i in range(number) if chosen[i] is circuit), None)
        if earlier is not None:
            finals.append(dict(finals[earlier] or {}))
            continue
        finals.append({"qasm3_export": assembly(circuit), "simulation": statevector_check(circuit)})
    yield {"stage": "final", "runs": finals}


# -- the verdict (supervisor side) -------------------------------------------------------------

_SYNTAX_ERRORS = frozenset({"SyntaxError", "IndentationError", "TabError"})
_CHECKS = ("num_qubits_match", "num_clbits_match", "gate_count_match", "gate_types_match")


def run_verdict(
    *,
    execution_success: bool,
    execution_error_type: str | None,
    error: str | None,
    timed_out: bool = False,
    names: Sequence[str] = (),
    structure: Mapping[str, Any] | None = None,
    final: Mapping[str, Any] | None = None,
    final_error: str | None = None,
) -> dict[str, Any]:
    """One run's verdict (the strict run or the recovery run) from what the stages reported."""
    verdict: dict[str, Any] = {
        "execution_success": execution_success,
        "execution_error_type": execution_error_type,
        "error": error,
        "timed_out": timed_out,
        "circuit_found": False,
        "circuit_count": None,
        "selected_circuit_name": None,
        "checks": {**dict.fromkeys(_CHECKS, False), "all_match": False},
        "qasm3_export": None,
        "simulation": None,
        "structure": None,
    }
    if not execution_success:
        return verdict
    verdict["circuit_count"] = len(names)
    if not names:
        return verdict
    if structure is None or not structure.get("loaded"):
        # No credit for circuits the grader could not load (only a forged payload, or a grader
        # that failed on them twice, gets here).
        why = (structure or {}).get("load_error") or final_error or "no verdict from the grader"
        kind = "CircuitLoadError"
        if structure is None or structure.get("grading_failed"):
            kind = "GradingError"
        verdict.update(
            execution_success=False,
            execution_error_type=kind,
            error=short_error(kind, str(why)),
            circuit_count=None,
        )
        return verdict
    verdict.update(
        circuit_found=True,
        selected_circuit_name=structure.get("selected"),
        checks={key: bool(structure["checks"].get(key)) for key in (*_CHECKS, "all_match")},
        structure={
            "expected": structure.get("expected"),
            "found": structure.get("observed"),
            "differences": list(structure.get("differences") or []),
        },
    )
    if final is not None:
        verdict["qasm3_export"] = final.get("qasm3_export")
        verdict["simulation"] = final.get("simulation")
    elif final_error is not None:
        verdict["error"] = short_error("GradingError", f"not exported or simulated: {final_error}")
    return verdict


def empty_verdict() -> dict[str, Any]:
    """The verdict of an empty generation: nothing ran, every check fails."""
    verdict = run_verdict(
        execution_success=False,
        execution_error_type=EMPTY_GENERATION,
        error=short_error(EMPTY_GENERATION, "the response contained no generated code"),
    )
    verdict["qasm3_export"] = {"success": False, "error_type": EMPTY_GENERATION, "length": 0}
    verdict["simulation"] = {
        "eligible": False,
        "success": False,
        "skip_reason": "empty_generation",
        "error_type": None,
    }
    return verdict


def _report(verdict: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical per-run fields PQID-Bench users read."""
    checks = verdict["checks"]
    export = verdict.get("qasm3_export") or {}
    simulation = verdict.get("simulation")
    return {
        "report_executable": bool(verdict["execution_success"] and verdict["circuit_found"]),
        "report_assembly_admissible": bool(export.get("success")),
        "report_signature_match": bool(checks["all_match"]),
        "num_qubits_match": bool(checks["num_qubits_match"]),
        "num_clbits_match": bool(checks["num_clbits_match"]),
        "gate_count_match": bool(checks["gate_count_match"]),
        "gate_types_match": bool(checks["gate_types_match"]),
        "selected_circuit_name": verdict["selected_circuit_name"],
        "execution_error_type": verdict["execution_error_type"],
        "circuit_count": verdict["circuit_count"],
        "simulation": None
        if simulation is None
        else {
            key: simulation.get(key) for key in ("eligible", "success", "skip_reason", "error_type")
        },
    }


def category(verdict: Mapping[str, Any], *, empty: bool) -> str:
    """The project's failure category for a strict-run verdict (`clbit_mismatch` included)."""
    checks = verdict["checks"]
    return categorize(
        has_code=not empty,
        compiled=verdict["execution_error_type"] not in _SYNTAX_ERRORS,
        timed_out=bool(verdict["timed_out"]),
        execution_ok=bool(verdict["execution_success"]),
        circuit_found=bool(verdict["circuit_found"]),
        width_match=bool(checks["num_qubits_match"]),
        clbits_match=bool(checks["num_clbits_match"]),
        gate_types_match=bool(checks["gate_types_match"]),
        gate_counts_match=bool(checks["gate_count_match"]),
    )


def evaluation_fields(
    strict: Mapping[str, Any], recovery: Mapping[str, Any] | None, choice: CodeChoice
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The project's fields (for `make_evaluation`) and this contract's own fields."""
    report = _report(strict)
    export = strict.get("qasm3_export") or {}
    project: dict[str, Any] = {
        "category": category(strict, empty=choice.empty),
        "execution_ok": bool(strict["execution_success"]),
        "circuit_found": bool(strict["circuit_found"]),
        "width_match": report["num_qubits_match"],
        "gate_types_match": report["gate_types_match"],
        "gate_counts_match": report["gate_count_match"],
        "structural_match": report["report_signature_match"],
        "qasm3_ok": report["report_assembly_admissible"],
        "qasm3_error": None if export.get("success") else export.get("error_type"),
        "equivalent": None,
        "equivalence_reason": EQUIVALENCE_REASON,
        "error": strict["error"],
        "circuit_source": "module_level" if strict["circuit_found"] else None,
        "structure": strict["structure"],
        "extraction": {
            "method": "none" if choice.empty else ("fenced" if choice.fenced else "raw"),
            "prose_removed": choice.outside_text,
            "fences": int(choice.fenced),
        },
    }
    own: dict[str, Any] = {
        **report,
        "empty_generation": choice.empty,
        "execution_mode": STRICT_MODE,
        "code_source": choice.source,
        "generated_code_length": len(choice.code),
        "target_context_recovery": None if recovery is None else _report(recovery),
    }
    return project, own
