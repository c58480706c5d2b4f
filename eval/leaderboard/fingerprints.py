"""Code -> the sha256 fingerprints that key a bench cell: a method's (its module and the modules of its
package it imports, its option defaults) and the scoring code's, so an edit to either invalidates."""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import sys
from collections.abc import Sequence

from eval.methods.interface import Method


def module_closure(names: Sequence[str]) -> list[str]:
    """`names` and every module of their top-level packages that they import, directly or through
    each other (read from the source with ast): the code a method's or the scorer's output
    depends on. An edit to eval.methods.edge_patching then invalidates ACDC's cells, whose module imports it."""
    import ast

    seen: set[str] = set()
    todo = [n for n in names if n in sys.modules]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            tree = ast.parse(inspect.getsource(sys.modules[name]))
        except (OSError, TypeError, SyntaxError):  # compiled or interactive: its name must do
            continue
        top = name.split(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]  # `from eval.core import tlens`
            else:
                found = []
            todo += [m for m in found if m.split(".")[0] == top and m in sys.modules and m not in seen]
    return sorted(seen)


def sources_of(names: Sequence[str]) -> str:
    """The modules' sources, concatenated in the given order ("" for one without a source file)."""
    parts = []
    for name in names:
        try:
            parts.append(f"# {name}\n" + inspect.getsource(sys.modules[name]))
        except (OSError, TypeError):
            parts.append(f"# {name}")
    return "\n".join(parts)


def method_fingerprint(method: Method) -> str:
    """sha256 of what decides a method's output: its key, the source of its module and of every
    module of the same package it imports (module_closure), and its signature's defaults (option
    dataclasses print their values), so an edited method, helper or option invalidates."""
    fn = base = method.function
    while isinstance(base, functools.partial):  # a partial's options show as signature defaults below
        base = base.func
    name = getattr(base, "__module__", "") or ""
    source = sources_of(module_closure([name])) if name in sys.modules else ""
    try:
        defaults = [(n, repr(p.default)) for n, p in inspect.signature(fn).parameters.items()
                    if p.default is not inspect.Parameter.empty]
    except (TypeError, ValueError):
        defaults = []
    text = json.dumps([method.key, getattr(base, "__qualname__", type(base).__qualname__), source, defaults])
    return hashlib.sha256(text.encode()).hexdigest()


SCORER_MODULES = ("eval.evaluator.evaluate", "eval.core.metrics", "eval.scoring.chance", "eval.scoring.faithfulness",
                  "eval.patching.ablation", "eval.core.graph", "eval.patching.hooks")
"""The code that turns any method's output into a cell's numbers: an edit to it invalidates every cell."""


def scorer_fingerprint() -> str:
    """sha256 of the scoring code's source (SCORER_MODULES and what they import of eval)."""
    import importlib

    for name in SCORER_MODULES:
        importlib.import_module(name)
    return hashlib.sha256(sources_of(module_closure(SCORER_MODULES)).encode()).hexdigest()
