"""The package import graph: no package of the platform imports another in a cycle, and training/
never imports the platform. Every import counts, including those inside functions (a lazy import
is still a dependency), except those under `if TYPE_CHECKING:`."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "platform_assets"


def _unit(module: str) -> str | None:
    """The top-level unit of a dotted module inside the platform: a subpackage or a module."""
    parts = module.split(".")
    return parts[1] if parts[0] == PACKAGE and len(parts) > 1 else None


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for child in node.body for n in ast.walk(child))
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        unit = _unit(".".join(rel.parts))
        if unit is None or unit in ("__init__", "__main__"):
            continue
        unit = unit.removesuffix(".py")
        targets = {_unit(m) for m in _imports(path)} - {None, unit, "__init__"}
        graph.setdefault(unit, set()).update(t for t in targets if (ROOT / PACKAGE / t).exists()
                                             or (ROOT / PACKAGE / f"{t}.py").exists())
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one unit (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_package_imports_another_in_a_cycle():
    graph = _graph()
    assert {"config", "ingest", "cleaning", "tokenize", "packing", "contracts"} <= set(graph)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_contracts_import_nothing_of_the_platform():
    assert _graph()["contracts"] == set()


def test_training_never_imports_the_platform():
    offenders = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "training").rglob("*.py"))
                 if any(m == PACKAGE or m.startswith(f"{PACKAGE}.") for m in _imports(p))]
    assert offenders == []
