"""A trained low-level model -> validation.json: per-node effects under resample, mean and zero
ablation (the paper's Tables 1-3 for one model) and accuracy with all non-circuit nodes ablated
at once (Table 4), on held-out data.

Effect of a node = fraction of labelled positions whose output changes (classification: another
argmax; regression: moves by the tolerance or more) relative to the unablated model's output.
Resample ablation takes the node's activation from the paired source; mean ablation uses the
per-position mean over the validation set; zero ablation uses zeros. A circuit node whose
resample effect is 0 is flagged `inert`: it cannot matter on these pairs (REFERENCE.md).
"""

from __future__ import annotations

from typing import Any

import torch

from siit.interventions import ablation_values, node_activations
from siit.losses import agree
from siit.metrics import Evaluator
from siit.transformer import Transformer

ABLATIONS = ("resample", "mean", "zero")


def validate_model(model: Transformer, evaluator: Evaluator) -> dict[str, Any]:
    """Metrics, per-node effects and circuit-ablated accuracy of `model` on the validation set."""
    corr, data = evaluator.correspondence, evaluator.data
    task, tol, lm = evaluator.task_kind, evaluator.tolerance, data.label_mask
    nodes = corr.low.nodes
    circuit = set(corr.aligned)
    acts = node_activations(model, data.tokens, data.mask)
    values = {
        "resample": acts[:, evaluator.sources],
        "mean": ablation_values(acts, data.mask, "mean"),
        "zero": ablation_values(acts, data.mask, "zero"),
    }
    single = torch.stack([corr.low.mask([n]) for n in nodes])
    outside = corr.low.mask(corr.non_aligned)[None]
    clean = evaluator.run_groups(model, torch.zeros_like(single[:1]))[0]
    frac = lambda ok: float(ok[lm].float().mean())  # noqa: E731
    effects: dict[str, dict[str, float]] = {n: {} for n in nodes}
    ablated_accuracy: dict[str, float | None] = {}
    for kind in ABLATIONS:
        preds = evaluator.run_groups(model, single, values[kind])
        for i, node in enumerate(nodes):
            effects[node][kind] = round(1.0 - frac(agree(preds[i], clean, task, tol)), 6)
        if corr.non_aligned:
            pred = evaluator.run_groups(model, outside, values[kind])[0]
            ablated_accuracy[kind] = round(frac(agree(pred, data.labels, task, tol)), 6)
        else:
            ablated_accuracy[kind] = None
    metrics = evaluator.evaluate(model)
    node_rows = [
        {"node": n, "in_circuit": n in circuit, **effects[n],
         "inert": n in circuit and effects[n]["resample"] == 0.0}
        for n in nodes
    ]
    return {
        "schema_version": 1,
        "n_sequences": len(data),
        "n_labelled_positions": int(lm.sum()),
        "metrics": metrics,
        "node_effects": node_rows,
        "effect_definition": "fraction of labelled positions whose output changes under the ablation "
                             "(regression: by >= tolerance), relative to the unablated model",
        "max_out_of_circuit_effect": {
            kind: max((r[kind] for r in node_rows if not r["in_circuit"]), default=0.0) for kind in ABLATIONS
        },
        "min_in_circuit_resample_effect": min((r["resample"] for r in node_rows if r["in_circuit"]), default=0.0),
        "accuracy_non_circuit_ablated": ablated_accuracy,
        "inert_circuit_nodes": [r["node"] for r in node_rows if r["inert"]],
        "tolerance": tol if task == "regression" else None,
    }
