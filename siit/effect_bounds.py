"""A trained model + its task -> validation.json's `effect_bounds`: the node-level bound (no
out-of-circuit node moves more than BOUND of the outputs) proved on a fresh sample big enough to
resolve it, at every input length and in every input shape the model is validated in.

siit.validation measures effects on the validation set (about 100 sequences per length), which
cannot see an effect of 0.01: with 1000 pairs per length, resample effects of 0.8-1.1% showed where
validation.json said 0.000 (issue 36). Here BOUND_N fresh sequences per length (drawn from the
case's sampler with BOUND_SEED, kept per length; with repetition, as the sampler draws) go through
every shape (under causal attention the padded copy stands for all: measured_shapes); each out-of-circuit node is ablated alone under resample (each source drawn from the
sample independently of the base's length, as `zoo eval`'s resample ablation and the strictness
rows of edge-level training draw them; the validation set's IIT pairing draws sources at least as
long as the base and hides effects of shorter ones) and mean ablation (the sample's own mean).

The unit of the bound is the sequence: the positions of one sequence are not independent draws,
but within one length every sequence has the same number of labelled positions, so the fraction
of changed positions is at most the fraction of sequences with any changed position, whose
one-sided Clopper-Pearson upper bound (eval.core.proportion_bound) is `upper_95`. With no change
in 300 sequences it is 0.00994 <= 0.01: `resolved`. `exact`: no observed effect above the bound
(zoo.train_entry.with_bound_verdict fails an entry that is not).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from eval.core.proportion_bound import upper_bound
from siit.data import SHAPES, Dataset, pair_sources, with_shapes
from siit.high_level import as_high_level, as_task
from siit.bound_chunks import sample_chunks, sample_means
from siit.losses import agree
from siit.metrics import Evaluator
from siit.transformer import Transformer

BOUND = 0.01
"""Largest effect an out-of-circuit node may have (issue 36)."""
BOUND_N = 300
"""Sequences per input length: with none changed the 95% upper bound is 0.00994 <= BOUND."""
BOUND_SEED = 36_000_017
"""Seed of the sample: not the validation set's (2·seed + 2), `zoo eval`'s 0 or edge_exactness's 7."""
CONFIDENCE = 0.95
BOUND_ABLATIONS = ("resample", "mean")
PAIRING = "independent"
"""How resample sources are drawn (siit.data.pair_sources): any length, as eval draws them."""
MAX_ROUNDS = 50
"""Draws of the sampler (BOUND_N per length each) before a rare length is left short of BOUND_N."""


def effect_bounds(model: Transformer, evaluator: Evaluator, task: Any, *, n: int = BOUND_N,
                  seed: int = BOUND_SEED, bound: float = BOUND, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """validation.json's `effect_bounds` (see the module docstring) of `model`, validated by
    `evaluator` (its correspondence, shapes, task kind and tolerance), on a fresh sample
    of `task` (a siit.high_level.HighLevelTask or a compiled case)."""
    task = as_task(task)
    ev, shapes = bound_sample(model, evaluator, task, n, seed)
    measured = shapes["measured_shapes"]
    outside = list(ev.correspondence.non_aligned)
    changed = _changes(model, ev, outside)
    d, lm = ev.data, ev.data.label_mask
    cells = by_length_and_shape(d, measured, lambda rows, distinct: {
        kind: cell_of(changed[kind][:, rows], lm[rows], outside, distinct, confidence) for kind in BOUND_ABLATIONS})
    flat = [dict(c, length=int(length), shape=shape, ablation=kind)
            for length, by_shape in cells.items() for shape, by_kind in by_shape.items() for kind, c in by_kind.items()]
    worst = max(flat, key=lambda c: (c["effect"], c["upper_95"]), default=None)
    return {"bound": bound, "confidence": confidence, "unit": "sequence", "n_per_length": n, "seed": seed,
            "pairing": PAIRING, **shapes, "ablations": list(BOUND_ABLATIONS),
            "out_of_circuit_nodes": len(outside), "n_sequences": len(d),
            "max_effect": max((c["effect"] for c in flat), default=0.0),
            "max_upper_95": max((c["upper_95"] for c in flat), default=0.0),
            "resolved": all(c["upper_95"] <= bound for c in flat),
            "exact": all(c["effect"] <= bound for c in flat),
            "worst": None if worst is None else {k: worst[k] for k in (
                "node", "length", "shape", "ablation", "effect", "changed_sequences", "n_sequences", "upper_95")},
            "by_length": cells,
            "definition": f"per input length, shape and ablation, over every out-of-circuit node ablated alone on "
                          f"{n} fresh sequences per length: the largest fraction of labelled positions whose output "
                          f"changes (effect) and the {confidence:.0%} Clopper-Pearson upper bound on the fraction of "
                          f"sequences with any change (upper_95), which bounds the effect; resolved: every upper_95 "
                          f"<= {bound}; exact: every effect <= {bound}"}


def bound_evaluator(evaluator: Evaluator, task: Any, n: int, seed: int, shapes: list[str] | None = None) -> Evaluator:
    """The fresh sample (n sequences per length, in the evaluator's shapes, or `shapes`) with its
    resample sources (PAIRING), on the evaluator's device; it holds no IIT targets (none needed)."""
    seqs = [s for group in stratified_sample(task.case, n, seed).values() for s in group]
    tokens, mask = task.encoding.encode(seqs)
    labels = as_high_level(task.high_level(), task.case.task_kind).run(tokens, mask)[0]
    base = Dataset(tokens=tokens, mask=mask, lengths=mask.sum(1) - 1, labels=labels,
                   high_acts=torch.zeros(0, len(seqs)), seqs=tuple(seqs))
    gen = torch.Generator().manual_seed(seed)
    shapes = shape_names(evaluator.data) if shapes is None else shapes
    data = with_shapes(base, shapes, gen)
    first = pair_sources(base.lengths, torch.arange(len(base)), PAIRING, gen)
    sources = torch.cat([first + k * len(base) for k in range(len(shapes))])
    device = evaluator.data.tokens.device
    return Evaluator(data.to(device), sources.to(device), torch.zeros(0, device=device), evaluator.correspondence,
                     evaluator.task_kind, evaluator.tolerance, sum_heads=evaluator.sum_heads)


def stratified_sample(case: Any, n: int, seed: int) -> dict[int, list[tuple]]:
    """input length -> the first n sequences of that length the case's sampler draws (rounds of
    n per possible length, seeds seed, seed + 1, ...), for every length it draws; a length the
    sampler draws rarely may stay short of n after MAX_ROUNDS rounds."""
    span = case.max_seq_len - case.min_seq_len + 1
    kept: dict[int, list[tuple]] = {}
    for r in range(MAX_ROUNDS):
        for s in case.sample(n * span, seed + r):
            group = kept.setdefault(len(s), [])
            if len(group) < n:
                group.append(s)
        if all(len(g) >= n for g in kept.values()):
            break
    return dict(sorted(kept.items()))


def by_length_and_shape(data: Dataset, shapes: list[str], cell: Any) -> dict[str, dict[str, Any]]:
    """length -> shape -> cell(rows, distinct): rows bool [N] of that length and shape, distinct the
    number of different sequences among them (the bounds' per-cell loop, nodes' and edges')."""
    out: dict[str, dict[str, Any]] = {}
    for length in sorted(set(data.lengths.tolist())):
        out[str(length)] = {}
        for shape in shapes:
            rows = (data.lengths == length) & (data.shape_ids == SHAPES.index(shape))
            distinct = len({data.seqs[i] for i in rows.nonzero().flatten().tolist()})
            out[str(length)][shape] = cell(rows, distinct)
    return out


def bound_sample(model: Transformer, evaluator: Evaluator, task: Any, n: int,
                 seed: int) -> tuple[Evaluator, dict[str, Any]]:
    """The bounds' fresh sample in the shapes they patch (bound_evaluator, measured_shapes), and what
    validation.json records of the shapes: input_shapes, measured_shapes, shapes_rule."""
    shapes = shape_names(evaluator.data)
    measured = measured_shapes(model, shapes)
    return bound_evaluator(evaluator, task, n, seed, measured), {
        "input_shapes": shapes, "measured_shapes": measured,
        "shapes_rule": ("causal attention: every shape computes the same, the padded one is measured for all"
                        if measured != shapes else "every shape measured")}


def measured_shapes(model: Transformer, shapes: list[str]) -> list[str]:
    """The input shapes a bound patches. Under causal attention PAD follows every real token and no
    query attends it, and an absent position (siit.data.SHAPES) is a PAD position no query attends
    either, so every shape computes the same activations everywhere and the padded copy stands for
    all (tests/test_siit/test_effect_bounds.py checks it, node by node, on a random causal model);
    under bidirectional attention PAD keys are attended, so each shape is measured."""
    return ["padded"] if model.causal and "padded" in shapes else list(shapes)


def shape_names(data: Dataset) -> list[str]:
    if data.shape_ids is None:
        return ["padded"]
    return [SHAPES[i] for i in sorted(set(data.shape_ids.tolist()))]


def _changes(model: Transformer, ev: Evaluator, outside: list[str],
             per_chunk: int | None = None) -> dict[str, torch.Tensor]:
    """ablation -> bool [nodes, N, T]: labelled positions whose output changes with the node alone
    ablated (regression: by the tolerance or more), one stacked pass per ablation (run_groups), chunk
    by chunk of the sample's rows (siit.bound_chunks; per_chunk rows, default what memory allows)."""
    lm = ev.data.label_mask
    out = {kind: torch.zeros(len(outside), *lm.shape, dtype=torch.bool) for kind in BOUND_ABLATIONS}
    if not outside:
        return out
    single = torch.stack([ev.correspondence.low.mask([node]) for node in outside])
    mean = sample_means(model, ev, per_chunk).acts
    for chunk in sample_chunks(model, ev, per_chunk):
        clean = chunk.ev.run_groups(model, torch.zeros_like(single[:1]), acts=chunk.acts)[0]
        values = {"resample": chunk.source_acts, "mean": mean}
        for kind in BOUND_ABLATIONS:
            preds = chunk.ev.run_groups(model, single, values[kind], acts=chunk.acts)
            changed = ~agree(preds, clean[None], ev.task_kind, ev.tolerance) & chunk.ev.data.label_mask[None]
            out[kind][:, chunk.rows] = changed.cpu()
    return out


def cell_of(changed: torch.Tensor, labelled: torch.Tensor, nodes: list[str], distinct: int,
            confidence: float, key: str = "node") -> dict[str, Any]:
    """One (length, shape, ablation): changed bool [nodes, n, T] on those n sequences -> the
    node-max effect, changed sequences and upper bound."""
    n = int(labelled.shape[0])
    positions = max(int(labelled.sum()), 1)
    effect = changed.sum(dim=(1, 2)).double() / positions  # [nodes]
    seqs = changed.any(dim=2).sum(dim=1)  # [nodes]
    k = int(seqs.max()) if len(nodes) else 0
    worst = max(range(len(nodes)), key=lambda i: (float(effect[i]), int(seqs[i])), default=None)
    top = 0.0 if worst is None else float(effect[worst])
    return {"n_sequences": n, "distinct_sequences": distinct, "changed_sequences": k,
            "effect": round(top, 6), "upper_95": math.ceil(upper_bound(k, n, confidence) * 1e6) / 1e6,
            key: nodes[worst] if worst is not None and top > 0 else None}
