"""docs/architecture.md's layers hold in the code: no module imports, at module level, from a layer below it."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "opcost"
# bottom up, as in docs/architecture.md; every other top-level module is `base`
ORDER = ("base", "model", "database", "measure", "analysis", "report", "stages", "cli")


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ORDER else "base"


def _module_level_imports(path: Path):
    """(line, imported module) of the opcost imports at the top level of ``path`` (not inside functions)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "opcost":
            if node.module == "opcost":  # from opcost import io, tables
                yield from ((node.lineno, f"opcost.{a.name}") for a in node.names)
            else:
                yield node.lineno, node.module
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "opcost")


def test_no_module_imports_from_a_layer_below_it():
    upward = []
    for path in sorted(SRC.rglob("*.py")):
        me = _layer("opcost." + ".".join(path.relative_to(SRC).with_suffix("").parts))
        for line, target in _module_level_imports(path):
            if ORDER.index(_layer(target)) > ORDER.index(me):
                upward.append(f"{path.relative_to(ROOT)}:{line} ({me}) imports {target} ({_layer(target)})")
    assert not upward, "docs/architecture.md's layers:\n" + "\n".join(upward)


def test_the_layers_are_the_documented_ones():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    for name in ("model/", "database", "measure/", "analysis/", "report/", "stages/", "cli.py"):
        assert f"| `{name}`" in doc, name
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages - {"schemas"} == {"model", "measure", "analysis", "report", "stages"}, \
        "a new package: add it to the layers"


def _imports_anywhere(path: Path, modules: set[str], package: str) -> set[str]:
    """The modules of ``modules`` that ``path`` imports, at any depth (inside functions too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                name = f"{node.module}.{a.name}"
                out.add(name if name in modules else node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out & modules


def _cycles(root: Path, package: str) -> list[list[str]]:
    """The import cycles among the modules under ``root`` (named ``package``.…): strongly connected components of
    two or more modules, a package's own ``__init__`` importing its submodules not counted as the submodules
    importing it."""
    paths = {}
    for p in root.rglob("*.py"):
        parts = p.relative_to(root).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        paths[".".join(filter(None, (package, *parts)))] = p
    graph = {m: _imports_anywhere(p, set(paths), package) - {m} for m, p in paths.items()}
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_not_even_inside_functions():
    assert _cycles(SRC, "opcost") == []
    assert _cycles(ROOT / "benchmarks", "") == []
