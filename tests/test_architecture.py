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


def _imports(nodes):
    """(line, module, name) of each import among the AST ``nodes``: ``from m import a`` gives (line, m, a), ``import
    m`` gives (line, m, None)."""
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module:
            yield from ((node.lineno, node.module, a.name) for a in node.names)
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, a.name, None) for a in node.names)


def _module_level_imports(path: Path):
    """(line, imported module) of the opcost imports at the top level of ``path`` (not inside functions)."""
    for line, module, name in _imports(ast.parse(path.read_text()).body):
        if module.split(".")[0] == "opcost":
            yield line, f"opcost.{name}" if module == "opcost" and name else module  # from opcost import io, tables


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
    for name in ("model/", "database", "measure/", "analysis/", "report/", "stages/", "cli/"):
        assert f"| `{name}`" in doc, name
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages - {"schemas"} == {"model", "measure", "analysis", "report", "stages", "cli"}, \
        "a new package: add it to the layers"


def _imports_anywhere(path: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``path`` imports, at any depth (inside functions too)."""
    found = {f"{m}.{n}" if f"{m}.{n}" in modules else m for _, m, n in _imports(ast.walk(ast.parse(path.read_text())))}
    return found & modules


def _cycles(root: Path, package: str) -> list[list[str]]:
    """The import cycles among the modules under ``root`` (named ``package``.…): the strongly connected components
    of two or more modules (scipy's), a package's own ``__init__`` importing its submodules not counted as the
    submodules importing it."""
    from scipy.sparse import lil_array
    from scipy.sparse.csgraph import connected_components

    paths = {}
    for p in root.rglob("*.py"):
        parts = p.relative_to(root).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        paths[".".join(filter(None, (package, *parts)))] = p
    names = sorted(paths)
    graph = lil_array((len(names), len(names)))
    for i, m in enumerate(names):
        for target in _imports_anywhere(paths[m], set(names)) - {m}:
            graph[i, names.index(target)] = 1
    _, label = connected_components(graph.tocsr(), directed=True, connection="strong")
    groups = [[n for n, k in zip(names, label) if k == c] for c in sorted(set(label))]
    return [g for g in groups if len(g) > 1]


def test_no_import_cycles_not_even_inside_functions():
    assert _cycles(SRC, "opcost") == []
    assert _cycles(ROOT / "benchmarks", "") == []
