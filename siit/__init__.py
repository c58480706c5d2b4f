"""(S)IIT: train low-level transformers whose circuit is a given high-level model's graph.

Pipeline: `low_level_config` + `make_correspondence` (which low-level nodes implement each
high-level node) -> `train` (IIT, strictness and behaviour losses on interchange interventions,
Algorithm 1 or Appendix H of InterpBench) -> `validate_model` (per-node effects, ablations; `effect_bounds`: the out-of-circuit
bound on a fresh sample that resolves it).
The model (`Transformer`) is pure torch in TransformerLens's parameterisation, so training never
imports transformer_lens and the saved state dict loads into a HookedTransformer.
Names are imported on first use (PEP 562), so `import siit.config` - which the CLI does to show
the real defaults in `zoo train --help` - does not import torch.
"""

import importlib

_EXPORTS = {
    "ArchConfig": "siit.config",
    "ConfigError": "siit.config",
    "TrainConfig": "siit.config",
    "Correspondence": "siit.correspondence",
    "NodeLayout": "siit.correspondence",
    "low_level_config": "siit.correspondence",
    "make_correspondence": "siit.correspondence",
    "ablation_values": "siit.interventions",
    "interchange": "siit.interventions",
    "node_activations": "siit.interventions",
    "HighLevelModel": "siit.high_level",
    "HighLevelTask": "siit.high_level",
    "TracrTask": "siit.high_level",
    "as_task": "siit.high_level",
    "Evaluator": "siit.metrics",
    "meets_criterion": "siit.metrics",
    "TrainingDiverged": "siit.trainer",
    "TrainingInterrupted": "siit.trainer",
    "TrainResult": "siit.trainer",
    "prepare": "siit.trainer",
    "train": "siit.trainer",
    "Patch": "siit.transformer",
    "Transformer": "siit.transformer",
    "init_weights": "siit.initialise",
    "validate_model": "siit.validation",
    "effect_bounds": "siit.effect_bounds",
}

__all__ = [
    "ArchConfig",
    "ConfigError",
    "Correspondence",
    "Evaluator",
    "HighLevelModel",
    "HighLevelTask",
    "NodeLayout",
    "Patch",
    "TrainConfig",
    "TrainResult",
    "TrainingDiverged",
    "TrainingInterrupted",
    "TracrTask",
    "Transformer",
    "ablation_values",
    "as_task",
    "effect_bounds",
    "init_weights",
    "interchange",
    "low_level_config",
    "make_correspondence",
    "meets_criterion",
    "node_activations",
    "prepare",
    "train",
    "validate_model",
]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'siit' has no attribute {name!r}")
