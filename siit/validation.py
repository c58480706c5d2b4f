"""A trained low-level model -> validation.json: per-node effects under resample, mean and zero
ablation (the paper's Tables 1-3 for one model) and accuracy with all non-circuit nodes ablated
at once (Table 4), on held-out data, in every input shape (padded to n_ctx, unpadded, partly
padded) and at every input length (the largest out-of-circuit effect per length, in the shape
where it is largest): the circuit must hold on whatever batch a user builds.

Effect of a node = fraction of labelled positions whose output changes (classification: another
argmax; regression: moves by the tolerance or more) relative to the unablated model's output.
Resample ablation takes the node's activation from a source of any length (Evaluator.strict_sources,
as eval's resample draws it; the IIT pairing's sources, at least as long as the base, hid case 3's m1
moving 36% of length-5 outputs); mean ablation uses the
per-position mean over the validation set; zero ablation uses zeros. A circuit node whose
resample effect is 0 is flagged `inert`: it cannot matter on these pairs (REFERENCE.md).

The validation set has about 100 sequences per length, too few to see an effect of 0.01; given the
task, `effect_bounds` (siit.effect_bounds) proves the out-of-circuit bound on a fresh sample of
BOUND_N sequences per length, with a Clopper-Pearson upper bound per length, shape and ablation, and
`edge_bounds` (siit.edge_bounds) the same bound for every edge outside the circuit patched alone.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from eval.core.device import device_of, device_record
from siit.edge_bounds import edge_bounds
from siit.high_level import as_task
from siit.effect_bounds import effect_bounds
from siit.interventions import ablation_values, node_activations
from siit.logit_shifts import logit_shifts
from siit.losses import agree
from siit.data import SHAPES
from siit.metrics import Evaluator
from siit.saturation import Saturation, saturation_report
from siit.transformer import Transformer

ABLATIONS = ("resample", "mean", "zero")
PARTS = ("metrics and node effects", "node bound", "edge bound", "looks")
"""What validate_model computes given the task, in order: told to its `stage` callback as each starts (a
progress display; on planted large-circuit the bounds take minutes each)."""


def _label_ties(evaluator: Evaluator, high: Any) -> dict[str, Any]:
    """Per high-level node, how many of the validation's IIT labels (the evaluator's pairs) are ties of
    the compiled model (TracrHighLevel.interchange_ties): labels that argmax's tie-break or float noise
    decides, not the program (case 26: a node read off a position its source does not have)."""
    d, corr = evaluator.data.to(torch.device("cpu")), evaluator.correspondence  # where the high-level model lives
    sources, per_node = evaluator.sources.cpu(), {}
    for name, select in zip(corr.interventions, corr.selects()):
        tie = high.interchange_ties(d.tokens, d.mask, d.high_acts[:, sources], select) & d.label_mask
        per_node[name] = {"ties": int(tie.sum()), "labels": int(d.label_mask.sum())}
    return {"per_node": per_node, "any": any(v["ties"] for v in per_node.values()),
            "definition": "labelled positions whose IIT label is a tie of the compiled model's top two logits "
                          "(within 1e-4 of the largest logit): argmax's tie-break or float noise decides it"}


def validate_model(model: Transformer, evaluator: Evaluator, task: Any = None, *,
                   evaluation: tuple[torch.Tensor, dict[str, Any]] | None = None,
                   stage: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """Metrics, per-node effects and circuit-ablated accuracy of `model` on the validation set, in
    every input shape the evaluator's data holds (padded, unpadded, partly padded); given the
    high-level `task` (or compiled case), also `effect_bounds`: the out-of-circuit bound proved on a
    fresh sample that can resolve it (siit.effect_bounds). evaluation: `model`'s clean node
    activations on the evaluator's data and Evaluator.evaluate's metrics from them, when the caller
    has them (TrainResult.final_evaluation): the same numbers, not computed twice. stage: called with
    each of PARTS as it starts (the bounds' only when given the task)."""
    say = stage or (lambda part: None)
    corr, data = evaluator.correspondence, evaluator.data
    say(PARTS[0])
    circuit = set(corr.aligned)
    acts, metrics = evaluation if evaluation is not None else (
        node_activations(model, data.tokens, data.mask, data.present), None)
    metrics = copy.deepcopy(metrics) if metrics is not None else evaluator.evaluate(model, acts=acts)
    effects = _Effects.measure(model, evaluator, acts)
    node_rows = [
        {"node": n, "in_circuit": n in circuit, **effects.worst[n],
         "inert": n in circuit and effects.worst[n]["resample"] == 0.0, "by_shape": effects.by_shape[n]}
        for n in corr.low.nodes
    ]
    outside_rows = [r for r in node_rows if not r["in_circuit"]]
    shapes, lm = effects.shapes, data.label_mask
    bounds = _task_sections(model, evaluator, task, acts, say)
    say(PARTS[3])
    looks = realism(model, evaluator, acts)
    return {
        "schema_version": 2,
        "n_sequences": len(data),
        "n_labelled_positions": int(lm.sum()),
        "input_shapes": list(shapes),
        "metrics": metrics,
        "node_effects": node_rows,
        "effect_definition": "fraction of labelled positions whose output changes under the ablation "
                             "(regression: by >= tolerance), relative to the unablated model; the "
                             "largest over the input shapes (by_shape has each)",
        "max_out_of_circuit_effect": {
            kind: max((r[kind] for r in outside_rows), default=0.0) for kind in ABLATIONS
        },
        "max_out_of_circuit_effect_by_shape": {
            shape: {kind: max((r["by_shape"][shape][kind] for r in outside_rows), default=0.0) for kind in ABLATIONS}
            for shape in shapes
        },
        "max_out_of_circuit_effect_by_length": {
            str(n): dict(effects.out_by_length[n], n_sequences=int((data.lengths == n).sum()) // max(len(shapes), 1))
            for n in sorted(effects.out_by_length)},
        **bounds,
        "min_in_circuit_resample_effect": min((r["resample"] for r in node_rows if r["in_circuit"]), default=0.0),
        "accuracy_non_circuit_ablated": effects.ablated_accuracy,
        "inert_circuit_nodes": [r["node"] for r in node_rows if r["inert"]],
        "tolerance": evaluator.tolerance if evaluator.task_kind == "regression" else None,
        "realism": looks,
        "compute": device_record(device_of(data.tokens)).to_json(),  # float results differ by device
    }


def _task_sections(model: Transformer, evaluator: Evaluator, task: Any, acts: torch.Tensor,
                   say: Callable[[str], Any]) -> dict[str, Any]:
    """validation.json's sections beyond the node effects: given the task, the node and edge bounds
    (siit.effect_bounds, siit.edge_bounds), the compiled labels' ties and a family's saturated heads;
    for a redundant circuit, its logit shifts."""
    corr, data = evaluator.correspondence, evaluator.data
    out: dict[str, Any] = {}
    if task is not None:
        say(PARTS[1])
        out["effect_bounds"] = effect_bounds(model, evaluator, task)
        say(PARTS[2])
        out["edge_bounds"] = edge_bounds(model, evaluator, task)
    if corr.joint:  # a redundant circuit: how far one copy moves the logits beside the copies together
        out["logit_shifts"] = logit_shifts(model, evaluator, acts)
    high = None if task is None else as_task(task).high_level()
    if hasattr(high, "interchange_ties"):  # a compiled high-level model: are its IIT labels its program's?
        out["iit_label_ties"] = _label_ties(evaluator, high)
    saturation = None if high is None else Saturation.build(high, corr, data.tokens, data.mask)
    if saturation is not None:  # a family's saturated heads (siit.saturation): how sharp they are
        out["saturation"] = saturation_report(model, data.tokens, data.mask, acts, saturation, data.present)
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Effects:
    """Each node's effect under each ablation, per input shape and per input length."""

    shapes: dict[str, torch.Tensor]
    """Input shape -> bool [N, T] its labelled positions."""
    by_shape: dict[str, dict[str, dict[str, float]]]
    """node -> shape -> ablation -> effect."""
    worst: dict[str, dict[str, float]]
    """node -> ablation -> its largest effect over the shapes (the bounds hold for every shape)."""
    out_by_length: dict[int, dict[str, float]]
    """input length -> ablation -> the largest out-of-circuit effect at that length, in any shape."""
    ablated_accuracy: dict[str, float | None]
    """ablation -> accuracy with every out-of-circuit node ablated at once (worst shape)."""

    @classmethod
    def measure(cls, model: Transformer, evaluator: Evaluator, acts: torch.Tensor) -> _Effects:
        corr, data = evaluator.correspondence, evaluator.data
        task, tol, lm = evaluator.task_kind, evaluator.tolerance, data.label_mask
        nodes, circuit = corr.low.nodes, set(corr.aligned)
        values = {"resample": acts[:, evaluator.strict_sources], "mean": ablation_values(acts, data.mask, "mean"),
                  "zero": ablation_values(acts, data.mask, "zero")}
        shape_ids = data.shape_ids if data.shape_ids is not None else torch.zeros(len(data), dtype=torch.long,
                                                                                  device=lm.device)
        shapes = {name: lm & (shape_ids == i)[:, None] for i, name in enumerate(SHAPES) if (shape_ids == i).any()}
        single = torch.stack([corr.low.mask([n]) for n in nodes])
        outside = corr.low.mask(corr.non_aligned)[None]
        clean = evaluator.run_groups(model, torch.zeros_like(single[:1]), acts=acts)[0]
        frac = lambda ok, where: float(ok[where].float().mean())  # noqa: E731
        # per input length too: pooled fractions can hide a short length where a node leaks
        lengths = {int(n): lm & (data.lengths == n)[:, None] for n in data.lengths.unique().tolist()}
        by_shape: dict[str, dict[str, dict[str, float]]] = {n: {s: {} for s in shapes} for n in nodes}
        out_by_length: dict[int, dict[str, float]] = {n: {k: 0.0 for k in ABLATIONS} for n in lengths}
        ablated: dict[str, float | None] = {}
        for kind in ABLATIONS:
            preds = evaluator.run_groups(model, single, values[kind], acts=acts)
            for i, node in enumerate(nodes):
                same = agree(preds[i], clean, task, tol)
                for shape, where in shapes.items():
                    by_shape[node][shape][kind] = round(1.0 - frac(same, where), 6)
                if node not in circuit:
                    for n, where in lengths.items():
                        worst = max(1.0 - frac(same, where & s_) for s_ in shapes.values() if (where & s_).any())
                        out_by_length[n][kind] = max(out_by_length[n][kind], round(worst, 6))
            ablated[kind] = None
            if corr.non_aligned:
                pred = evaluator.run_groups(model, outside, values[kind], acts=acts)[0]
                ablated[kind] = round(min(frac(agree(pred, data.labels, task, tol), w) for w in shapes.values()), 6)
        worst_of = {n: {k: max(by_shape[n][s][k] for s in shapes) for k in ABLATIONS} for n in nodes}
        return cls(shapes=shapes, by_shape=by_shape, worst=worst_of, out_by_length=out_by_length,
                   ablated_accuracy=ablated)


def realism(model: Transformer, evaluator: Evaluator, acts: torch.Tensor | None = None) -> dict[str, Any]:
    """What a method that never intervenes sees (eval.core.node_heuristics): per-node output norm, variance and
    weight norm, and how well each ranks the circuit, on the padded validation inputs; `battery`: every
    look of eval.core.looks, with its chance band."""
    from eval.core.looks import battery
    from eval.core.node_heuristics import node_stats, realism_report
    from siit.look_inputs import look_inputs

    data, corr = evaluator.data, evaluator.correspondence
    rows = torch.ones(len(data), dtype=torch.bool, device=data.tokens.device) if data.shape_ids is None else data.shape_ids == 0
    if acts is None:
        acts = node_activations(model, data.tokens, data.mask, data.present)
    per_node = {corr.low.name(l, s): acts[l, rows, :, s] for l in range(corr.low.n_layers)
                for s in range(corr.low.n_heads + 1)}
    stats = node_stats(per_node, data.mask[rows].bool(), model.state_dict(), model.config, set(corr.aligned),
                       evaluator.task_kind)
    looks = look_inputs(model, data.tokens[rows], data.mask[rows], corr.aligned, evaluator.task_kind,
                        data.label_mask[rows])
    return {**realism_report(stats), "battery": battery(looks)}
