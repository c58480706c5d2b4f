"""The packages form one line, arrows pointing down: zoo -> planted -> rasp_programs -> siit -> eval.

Every import of the project (module level or inside a function, `import` statements and
`importlib.import_module` calls) is read with `ast`; a package may import only itself and packages
below it, the packages above eval use only its core (eval.core), the core imports nothing else of
eval, and no two modules import each other through any chain.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINE = ("zoo", "planted", "rasp_programs", "siit", "eval")
CORE = "eval.core"
"""The part of eval every layer may use; the rest of eval is the evaluator, which only zoo drives."""
DYNAMIC = {
    "eval.core.spec": None,  # a researcher's package.module:function, outside the project
    "rasp_programs.lookup": "rasp_programs.catalogue",  # the factory a case id names
    "eval.methods.registry": "eval.methods.registry",  # METHOD_MODULES
    "eval.leaderboard.fingerprints": "eval.leaderboard.fingerprints",  # SCORER_MODULES, fingerprinted
    "eval": "eval", "siit": "siit", "planted": "planted",  # lazy exports (_EXPORTS)
}
"""Modules allowed to call importlib.import_module with a computed name -> the module whose string
constants hold the names (those naming project modules count as the caller's imports)."""


def _modules() -> dict[str, Path]:
    out = {}
    for package in LINE:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _is_import_module(call: ast.Call) -> bool:
    f = call.func
    return (isinstance(f, ast.Attribute) and f.attr == "import_module") or (
        isinstance(f, ast.Name) and f.id in ("import_module", "__import__"))


def _named_targets(tree: ast.AST, name: str) -> tuple[list[str], list[int]]:
    """Targets of importlib calls: literal names, and for a computed name the strings of its DYNAMIC
    source that name modules (`pkg.mod` or `pkg.mod:function`); plus the lines of computed calls."""
    literal: list[str] = []
    computed: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _is_import_module(node) and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                literal.append(arg.value)
            else:
                computed.append(node.lineno)
    if computed and DYNAMIC.get(name):
        source = DYNAMIC[name]
        if source != name:
            tree = ast.parse(_modules()[source].read_text())
        docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
        literal += [n.value.partition(":")[0] for n in ast.walk(tree)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
                    and n.value.split(".")[0] in LINE and " " not in n.value]
    return literal, computed


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Project modules that `name` imports (the longest known prefix of each imported name)."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names]
            if any(t not in known for t in targets):  # a name of the package's __init__, not a submodule
                targets.append(base)
        for target in targets:
            found |= _known_prefix(target, known, name)
    for target in _named_targets(tree, name)[0]:
        found |= _known_prefix(target, known, name)
    return found


def _known_prefix(target: str, known: set[str], name: str) -> set[str]:
    parts = target.split(".")
    for k in range(len(parts), 0, -1):
        candidate = ".".join(parts[:k])
        if candidate in known:
            return {candidate} if candidate != name else set()
    return set()


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, set(modules)) for name, path in modules.items()}


def test_the_scan_sees_subpackages_and_importlib_calls(graph):
    # The reader must see what it checks: a module of a sub-package, an edge made by an
    # importlib.import_module call, and one made by a registry's module names.
    assert "eval.core.circuit" in graph and "eval.methods.acdc" in graph
    assert "rasp_programs.catalogue_counting" in graph["rasp_programs.catalogue"] | graph["rasp_programs.lookup"] \
        or "rasp_programs.main_counting" in graph["rasp_programs.catalogue"] | graph["rasp_programs.lookup"]
    assert "eval.methods.acdc" in graph["eval.methods.registry"]


def test_no_package_imports_a_package_above_it(graph):
    rank = {p: i for i, p in enumerate(LINE)}
    bad = sorted(
        f"{src} imports {dst}"
        for src, dsts in graph.items() for dst in dsts
        if rank[dst.split(".")[0]] < rank[src.split(".")[0]]
    )
    assert not bad, "imports that point up the line " + " -> ".join(LINE) + ":\n" + "\n".join(bad)


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_layers_below_zoo_use_only_the_core_of_eval(graph):
    bad = sorted(f"{src} imports {dst}" for src, dsts in graph.items() for dst in dsts
                 if src.split(".")[0] in ("planted", "rasp_programs", "siit") and _in(dst, "eval")
                 and not _in(dst, CORE))
    assert not bad, f"below zoo, eval is used through {CORE} only:\n" + "\n".join(bad)


def test_the_core_imports_nothing_else_of_eval(graph):
    bad = sorted(f"{src} imports {dst}" for src, dsts in graph.items() for dst in dsts
                 if _in(src, CORE) and _in(dst, "eval") and not _in(dst, CORE))
    assert not bad, f"{CORE} must stand alone:\n" + "\n".join(bad)


def test_no_hidden_imports():
    # A computed importlib name hides its target from the checks above, except where DYNAMIC says
    # where the names come from (their strings are read as imports).
    bad = []
    for name, path in _modules().items():
        lines = _named_targets(ast.parse(path.read_text()), name)[1]
        if lines and name not in DYNAMIC:
            bad += [f"{path.relative_to(ROOT)}:{line}" for line in lines]
    assert not bad, "importlib.import_module with a computed name (list it in DYNAMIC with its source):\n" + "\n".join(bad)


def test_no_import_cycles_between_modules(graph):
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt] if nxt in stack else [node, nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)
