"""A training result -> the JSON files of a zoo entry (config, circuit, case, training,
validation), and an existing entry's files -> the objects needed to validate it again."""

from __future__ import annotations

from typing import Any

import torch

from eval.core.provenance import package_versions as _package_versions
from siit.config import ArchConfig, TrainConfig
from siit.correspondence import Correspondence, NodeLayout
from siit.data import pool_seed
from siit.saturation import SATURATED
from siit.trainer import TrainResult

_PACKAGES = ("zoo", "torch", "numpy", "safetensors", "tracr-pypi", "transformer-lens")


def package_versions() -> dict[str, str]:
    return _package_versions(_PACKAGES)


def circuit_json(compiled: Any, corr: Correspondence) -> dict[str, Any]:
    """circuit.json: the high-level graph mapped through the correspondence (head granularity)."""
    data = corr.map_circuit(compiled.graph).to_json()
    data["correspondence"] = corr.to_json()
    data["high_level_labels"] = dict(compiled.graph.labels)
    data["high_level_edges"] = [[s, d] for s, d in compiled.graph.edges]
    return data


def case_json(compiled: Any) -> dict[str, Any]:
    return dict(compiled.case.metadata(), encoding=compiled.encoding.to_json())


def _criterion(result: TrainResult) -> dict[str, Any]:
    """training.json's criterion: its value, the judged metrics and the rule in words."""
    cfg = result.config
    rule = ("accuracy, every high-level node's IIA (and every joint group's, where the model has joint "
            "interchanges) and every SIIA (each non-aligned node alone and all at once) >= value on the validation set")
    if cfg.trains_edges:
        rule += (f"; with strict_edges also every non-circuit edge's SIIA (patched alone) >= {cfg.edge_criterion}, "
                 "and validation.json's edge_effects exact")
    if "saturated_min" in result.metrics:
        rule += (f"; and each saturated head's fraction of queries at the score margin (saturated_min, "
                 f"siit.saturation) >= {SATURATED}")
    return {"value": cfg.criterion, "metrics": list(cfg.judged_metrics), "rule": rule}


def _loss(result: TrainResult) -> dict[str, Any]:
    """training.json's `loss`, where the task departs from plain cross-entropy (empty otherwise)."""
    loss: dict[str, Any] = {}
    if result.last_position_weight != 1.0:
        loss.update(last_position_weight=result.last_position_weight,
                    rule="the IIT and SIIT losses are weighted means over label positions, the last input "
                         "position (the answer) weighted this much, every other position 1 (the task's choice)")
    if result.logit_template is not None:
        loss.update(logit_template=result.logit_template,
                    template_rule="the IIT, SIIT and behaviour losses are the mean square distance of the centred "
                                  "logits from logit_template x (one-hot of the target class - 1/V) (siit.losses."
                                  "template_loss), not cross-entropy: every logit is a function of the answer")
    return {"loss": loss} if loss else {}


ONE_POSITION_NOTE = (" A distractor with `at` varied at that one position only (0 elsewhere), as a circuit head "
                     "that fires at one position, and its head was trained to attend there to its source and to "
                     "BOS elsewhere at the circuit's attention margin (siit.saturation.one_position_keys).")
"""Said in training.json's realism notes of an entry whose busy heads worked at one position each."""
COMPONENTS_NOTE = (" A distractor with component_shares computed the same function on that many further token "
                   "features (siit.busy_components), each read along a unit direction of its own, with variance "
                   "share x the first's (the node's variance split among them; a share of 0 is no feature, and "
                   "its R² is null) and its R² in component_r2; the shares give the node a participation ratio "
                   "of rank_factor x the circuit's own for its type, measured in training (circuit_ratios at the end; "
                   "siit.busy_ranks).")
"""Said in training.json's realism notes of an entry whose busy nodes wrote several features each."""


def training_json(result: TrainResult, *, command: list[str] | None = None) -> dict[str, Any]:
    cfg = result.config
    return {
        "schema_version": 1,
        "met_criterion": result.met_criterion,
        "criterion": _criterion(result),
        "config": cfg.to_json(),
        **_loss(result),
        "arch": {"overrides": _arch_json(result.arch), "low_level_config": result.low_config},
        "seeds": {"seed": cfg.seed, "train_data": pool_seed(cfg.seed, "train"),
                  "validation_data": pool_seed(cfg.seed, "validation"),
                  "correspondence": result.case_seed, "distractors": result.case_seed,
                  "head_rescale": result.case_seed, "init": cfg.seed, "step": "derived from (seed, step)",
                  "per_case": "siit.data.case_seed(seed, case id): choices that must differ between cases"},
        "steps": result.steps,
        "epochs": round(result.steps / cfg.steps_per_epoch, 3),
        "wall_time_s": round(result.seconds, 3),
        "resumed_from_step": result.resumed_from_step,
        "final_metrics": result.metrics,
        "history": result.history,
        "train_validation_overlap": round(result.train_val_overlap, 4),
        "adaptation": dict(result.adaptation.to_json(),
                           notes="What training changed when progress stalled (siit.adaptation): IIT "
                                 "emphasis on lagging nodes, learning-rate restarts, budget extensions."),
        "realism": {
            "distractors": result.distractors,
            **({"circuit_ratios": result.circuit_ratios} if result.circuit_ratios is not None else {}),
            "head_rescale": result.head_scales,
            "notes": "Each out-of-circuit node was trained to encode its distractor (a scalar function "
                     "of the input) along a learned unit direction of its own output, while strictness kept "
                     "it irrelevant to the task; its target's variance and mean absolute value were the "
                     "circuit nodes' running medians of output variance and mean output norm times "
                     "variance_factor and sqrt(offset_factor), measured as zoo realism measures them (siit.loudness: "
                     "sources weighted back to the inputs' lengths, one reference per drawn input shape), the "
                     "target trimmed by target_gain [variance, norm] (at most 1) until the node measured what its "
                     "factors say. Circuit nodes had an rms output-norm ceiling "
                     "(config.circuit_norm_ceiling). After training, each head's Q/K and V/O pairs were "
                     "rescaled by opposite factors (head_rescale: [qk, vo]), which changes no output."
                     + (ONE_POSITION_NOTE if any("at" in d for d in result.distractors) else "")
                     + (COMPONENTS_NOTE if any("component_shares" in d for d in result.distractors) else ""),
        },
        "versions": package_versions(),
        "compute": {"torch_threads": torch.get_num_threads(),
                    **(result.device.to_json() if result.device is not None else {}),
                    "note": "float32 training is deterministic for a given seed, torch thread count and device; "
                            "another thread count (`zoo train --threads`), CPU or GPU (`--device`) gives other "
                            "weights"},
        "command": command,
        "notes": [
            "Weight_SIIT is applied once (InterpBench's code applied it twice).",
            "IIT samples one high-level node per example and strictness samples non-aligned nodes per "
            "example (the paper samples per batch): the same loss in expectation.",
            "Sources are paired with bases by TrainConfig.pairing; see the config docstring.",
        ],
    }


def _arch_json(arch: ArchConfig) -> dict[str, Any]:
    return {k: v for k, v in vars(arch).items() if v is not None}


def config_from_training_json(training: dict[str, Any]) -> tuple[TrainConfig, ArchConfig]:
    """The TrainConfig and ArchConfig recorded in an entry's training.json."""
    cfg = dict(training["config"])
    cfg["betas"] = tuple(cfg["betas"])
    cfg.setdefault("strict_edges", False)  # recorded before edge-level strictness existed
    cfg.setdefault("distractor_profile", 0.0)  # absent: flat targets (TrainConfig.to_json)
    cfg.setdefault("busy_attention", False)  # absent: trained before it existed
    cfg.setdefault("distractor_components", 1)  # absent: one scalar a busy node
    cfg.setdefault("distractor_reads", 0)  # absent: busy nodes compute on tokens
    cfg.setdefault("regression_hinge", 0.0)  # absent: plain MSE on regression outputs
    cfg.setdefault("view_phase", False)  # absent: the stall test read the pooled check alone
    cfg.setdefault("strict_all", 0.0)  # absent: no strictness row ablated every non-aligned node by design
    return TrainConfig(**cfg), ArchConfig(**training["arch"]["overrides"])


def correspondence_from_circuit_json(circuit: dict[str, Any], hl_config: dict[str, Any],
                                     ll_config: dict[str, Any]) -> Correspondence:
    return Correspondence(
        mapping={hl: tuple(lls) for hl, lls in circuit["correspondence"].items()},
        high=NodeLayout(hl_config["n_layers"], hl_config["n_heads"]),
        low=NodeLayout(ll_config["n_layers"], ll_config["n_heads"]),
    )
