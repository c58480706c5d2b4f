"""(S)IIT: train low-level transformers whose circuit is a given high-level model's graph.

Pipeline: `low_level_config` + `make_correspondence` (which low-level nodes implement each
high-level node) -> `train` (IIT, strictness and behaviour losses on interchange interventions,
Algorithm 1 or Appendix H of InterpBench) -> `validate_model` (per-node effects, ablations).
The model (`Transformer`) is pure torch in TransformerLens's parameterisation, so training never
imports transformer_lens and the saved state dict loads into a HookedTransformer.
"""

from siit.config import ArchConfig, ConfigError, TrainConfig
from siit.correspondence import Correspondence, NodeLayout, low_level_config, make_correspondence
from siit.interventions import ablation_values, interchange, node_activations
from siit.metrics import Evaluator, meets_criterion
from siit.trainer import TrainingInterrupted, TrainResult, prepare, train
from siit.transformer import Patch, Transformer, init_weights
from siit.validation import validate_model

__all__ = [
    "ArchConfig",
    "ConfigError",
    "Correspondence",
    "Evaluator",
    "NodeLayout",
    "Patch",
    "TrainConfig",
    "TrainResult",
    "TrainingInterrupted",
    "Transformer",
    "ablation_values",
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
