"""Method keys -> the built-in circuit-discovery methods, in report order.

Adding a method is one module in eval/methods/ that defines `METHODS = (Method(...),)` (see
eval.methods.interface) plus one line in METHOD_MODULES below. The keys are spelled here so the CLI
lists them without importing torch; `REGISTRY` imports the modules when first read.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Mapping
from typing import Any

METHOD_MODULES: Mapping[str, str] = types.MappingProxyType({
    "random": "eval.methods.random_scores",
    "activation_patching": "eval.methods.activation_patching",
    "gradient_attribution": "eval.methods.gradient_attribution",
    "ablation_scan": "eval.methods.ablation_scan",
    "greedy": "eval.methods.greedy",
    "edge_patching": "eval.methods.edge_patching",
    "eap": "eval.methods.edge_patching",
    "eap_ig_inputs": "eval.methods.edge_patching",
    "eap_ig_activations": "eval.methods.edge_patching",
    "acdc": "eval.methods.acdc",
    "node_sp": "eval.methods.subnetwork_probing",
    "edge_sp": "eval.methods.subnetwork_probing",
    "ifr": "eval.methods.ifr",
    "ensemble": "eval.methods.ensemble",
})
"""Each built-in method's key -> the module whose METHODS defines it (a module may define several)."""

BUILTIN_METHOD_KEYS = tuple(METHOD_MODULES)


def builtin_methods() -> Mapping[str, Any]:
    """Read-only key -> Method for every built-in method, in METHOD_MODULES order. Register your own
    by passing a Method (or package.module:function) instead."""
    found = {}
    for key, module in METHOD_MODULES.items():
        by_key = {m.key: m for m in importlib.import_module(module).METHODS}
        found[key] = by_key[key]
    return types.MappingProxyType(found)


def __getattr__(name: str) -> Any:
    # REGISTRY is built on first read, so importing this module (the CLI does) costs no torch.
    if name == "REGISTRY":
        return builtin_methods()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
