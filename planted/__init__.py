"""Hand-written high-level causal models trained by SIIT (siit.high_level's protocols).

`get_planted(name)` -> a PlantedTask (task, encoding, causal model, low-level architecture);
`planted_names()` lists them: CAUSAL-BENCH's planted circuit at 2x2 ... 12x12 (planted.causal_bench),
InterpBench's IOI (planted.ioi), and the failure-mode families' models (planted.failure_modes;
`family_members(family)`).
Names are imported on first use (PEP 562): `zoo list planted` stays light.
"""

import importlib

_EXPORTS = {
    "CausalModel": "planted.causal_model",
    "Node": "planted.causal_model",
    "PlantedTask": "planted.causal_model",
    "get_planted": "planted.registry",
    "family_members": "planted.registry",
    "planted_names": "planted.registry",
}

__all__ = ["CausalModel", "Node", "PlantedTask", "family_members", "get_planted", "planted_names"]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'planted' has no attribute {name!r}")
