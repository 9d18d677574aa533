"""No import cycle in the product: the modules of engine, evaluator and pqid_tui form a DAG.

An import counts when it can run: at module level, or inside a function (a lazy import
closes its cycle the moment it runs; it only hides it from the interpreter's start-up).
An import under `if TYPE_CHECKING:` does not count here: it never runs (the engine package's
lazy exports are named that way). In pqid_tui it counts too: the screens name the app through
a protocol (pqid_tui/context.py), so not even the type checker sees a cycle there.
"""

from __future__ import annotations

import grimp

PACKAGES = ("engine", "evaluator", "pqid_tui")

# Cycles that exist and are being removed, each as the set of modules that import each
# other. Any other cycle fails the test, and so does one of these that grows or goes away:
# delete its entry together with the cycle.
KNOWN_CYCLES: set[frozenset[str]] = set()


def import_graph() -> grimp.ImportGraph:
    # No cache: a test writes nothing into the tree.
    return grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)


def cycles(graph: grimp.ImportGraph) -> list[frozenset[str]]:
    """Every set of two or more modules that import each other (strongly connected
    components, Tarjan's algorithm without recursion), and every module that imports itself."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            targets = edges.get(node, [])
            if i < len(targets):
                work.append((node, i + 1))
                target = targets[i]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges.get(node, []):
                    found.append(frozenset(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def describe(graph: grimp.ImportGraph, component: frozenset[str]) -> str:
    """The imports that close a cycle, as `importer:line -> imported`."""
    lines = []
    for importer in sorted(component):
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & component):
            for detail in graph.get_import_details(importer=importer, imported=imported):
                lines.append(
                    f"  {importer}:{detail['line_number']} -> {imported}  "
                    f"({detail['line_contents']})"
                )
    return "\n".join(lines)


def test_no_import_cycle_in_the_product() -> None:
    graph = import_graph()
    found = set(cycles(graph))
    new = found - KNOWN_CYCLES
    gone = KNOWN_CYCLES - found
    assert not new, "import cycles:\n" + "\n".join(
        describe(graph, c) for c in sorted(new, key=sorted)
    )
    assert not gone, (
        "these known cycles are gone (or changed): delete them from KNOWN_CYCLES: "
        + ", ".join(" <-> ".join(sorted(c)) for c in sorted(gone, key=sorted))
    )


def test_the_app_and_its_screens_import_each_other_in_one_direction_only() -> None:
    # Counted with the type-checking imports too: the screens name the app through the
    # protocol of pqid_tui.context, never through the app's own module.
    counted = grimp.build_graph("pqid_tui", exclude_type_checking_imports=False, cache_dir=None)
    screens = {m for m in counted.modules if m.startswith("pqid_tui.screens.")}
    assert screens
    assert not [
        m for m in sorted(screens) if "pqid_tui.app" in counted.find_modules_directly_imported_by(m)
    ]
    assert cycles(counted) == [], "\n".join(describe(counted, c) for c in cycles(counted))


def test_cycles_finds_lazy_and_long_cycles() -> None:
    graph = grimp.ImportGraph()
    for module in ("p", "p.a", "p.b", "p.c", "p.d", "p.e"):
        graph.add_module(module)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.c")
    graph.add_import(importer="p.c", imported="p.a")  # a three-module cycle
    graph.add_import(importer="p.c", imported="p.d")
    graph.add_import(importer="p.d", imported="p.e")  # a chain, no cycle
    graph.add_import(importer="p.e", imported="p.e")  # a module importing itself
    assert set(cycles(graph)) == {frozenset({"p.a", "p.b", "p.c"}), frozenset({"p.e"})}
