"""A trained model + its task -> validation.json's `edge_bounds`: the edge-level bound (no edge outside
the labelled circuit moves more than BOUND of the outputs) proved on siit.effect_bounds' fresh sample, at
every input length and in every input shape the model is validated in.

zoo.edge_exactness patches every q/k/v edge of the exported weights on padded inputs of mixed lengths
(eval's patching task): an edge that moves only short inputs is diluted by the long ones there, and a
shape other than padded is never fed. Here every edge outside the circuit (siit.edges.EdgeLayout.non_circuit:
outside the high-level graph mapped onto the model, including an edge between two circuit nodes that the
graph lacks; a labelled head edge labels its q, k and v parts) is patched alone, as edge-level strictness
trains it and as eval's exact edge patching does it: reader r reads sender u's output on the source, the
rest of the model its own. Under resample (the reader reads the sender's output on another sequence:
the node bound's sources, each drawn independently of the base's length) and mean ablation (the sender's
mean output over the sample, per position, as the node bound's), on the node bound's sample: BOUND_N
sequences per length in every shape. `zoo eval --ablation mean` scores methods by mean-ablated
patching, so the edge labels must hold there too.

The unit is the sequence (siit.effect_bounds): per length, shape and edge, the fraction of labelled
positions whose output changes, and per (length, shape) the one-sided Clopper-Pearson bound on the
fraction of sequences any one edge changes (`upper_95`, 0.00994 with none in 300: resolved).
"""

from __future__ import annotations

from typing import Any

import torch

from siit.bound_chunks import Chunk, SampleMeans, sample_chunks, sample_means
from siit.edges import EdgeLayout
from siit.effect_bounds import (BOUND, BOUND_ABLATIONS, BOUND_N, BOUND_SEED, CONFIDENCE, bound_sample,
                                 by_length_and_shape, cell_of)
from siit.high_level import as_task
from siit.edge_runs import edge_predictions, sender_outputs
from siit.losses import agree
from siit.metrics import Evaluator
from siit.transformer import Transformer

EDGE_LIMIT = 5000
"""More non-circuit q/k/v edges than this are not patched here (causal-bench-12x12 has ~32,000):
tests/benchmarks/bench_edge_exactness.py measures such a model."""


def edge_bounds(model: Transformer, evaluator: Evaluator, task: Any, *, n: int = BOUND_N,
                seed: int = BOUND_SEED, bound: float = BOUND, confidence: float = CONFIDENCE,
                limit: int = EDGE_LIMIT) -> dict[str, Any]:
    """validation.json's `edge_bounds` (see the module docstring) of `model`, whose circuit is
    `task`'s high-level graph mapped by `evaluator`'s correspondence, on the fresh sample
    siit.effect_bounds draws (n sequences per length, seed) in the evaluator's shapes."""
    task = as_task(task)
    layout = EdgeLayout(model.n_layers, model.n_heads)
    outside = layout.non_circuit(evaluator.correspondence.map_circuit(task.graph).edges)
    names = [f"{s}->{r}" for s, r in layout.names(outside)]
    head = {"bound": bound, "confidence": confidence, "unit": "sequence", "n_per_length": n, "seed": seed,
            "ablations": list(BOUND_ABLATIONS), "out_of_circuit_edges": len(names)}
    if len(names) > limit:
        return {**head, "skipped": f"{len(names)} non-circuit q/k/v edges > {limit}: measure with "
                                   "tests/benchmarks/bench_edge_exactness.py"}
    ev, shapes = bound_sample(model, evaluator, task, n, seed)  # causal: the padded copy stands for all
    measured = shapes["measured_shapes"]
    changed = edge_changes(model, ev, outside.nonzero(), BOUND_ABLATIONS)  # ablation -> bool [E, N, T]
    d, lm = ev.data, ev.data.label_mask
    cells = by_length_and_shape(d, measured, lambda rows, distinct: {kind: cell_of(
        changed[kind][:, rows], lm[rows], names, distinct, confidence, key="edge") for kind in BOUND_ABLATIONS})
    flat = [dict(c, length=int(length), shape=shape, ablation=kind) for length, by_shape in cells.items()
            for shape, by_kind in by_shape.items() for kind, c in by_kind.items()]
    worst = max(flat, key=lambda c: (c["effect"], c["upper_95"]), default=None)
    return {**head, **shapes, "n_sequences": len(d),
            "max_effect": max((c["effect"] for c in flat), default=0.0),
            "max_upper_95": max((c["upper_95"] for c in flat), default=0.0),
            "resolved": all(c["upper_95"] <= bound for c in flat),
            "exact": all(c["effect"] <= bound for c in flat),
            "worst": None if worst is None else {k: worst[k] for k in (
                "edge", "length", "shape", "ablation", "effect", "changed_sequences", "n_sequences", "upper_95")},
            "by_length": cells,
            "definition": f"per input length, shape and ablation, over every q/k/v edge outside the circuit patched "
                          f"alone (resample, mean) on {n} fresh sequences per length: the largest fraction of labelled "
                          f"positions whose output changes (effect) and the {confidence:.0%} Clopper-Pearson upper "
                          f"bound on the fraction of sequences one edge changes (upper_95); resolved: every "
                          f"upper_95 <= {bound}; exact: every effect <= {bound}"}


def edge_changes(model: Transformer, ev: Evaluator, edges: torch.Tensor, ablations: tuple[str, ...] = ("resample",),
                 per_chunk: int | None = None) -> dict[str, torch.Tensor]:
    """ablation -> bool [E, N, T]: labelled positions whose output changes (regression: by the
    tolerance or more) when edge (u, r) of `edges` (long [E, 2], EdgeLayout indices) alone reads
    sender u's output on the source (resample: ev.sources) or its mean over the sample, per position
    (mean), against the unpatched run. Each run starts at the edge's reader's block
    (siit.edge_runs); the ablations share each pass (their rows stacked); the sample runs chunk by
    chunk of its rows (siit.bound_chunks; per_chunk rows, default what memory allows)."""
    d = ev.data
    out = torch.zeros(len(ablations), edges.shape[0], *d.label_mask.shape, dtype=torch.bool)
    means = sample_means(model, ev, per_chunk) if "mean" in ablations else None
    for chunk in sample_chunks(model, ev, per_chunk):
        part = chunk.ev.data
        with torch.no_grad():
            no_patch = torch.zeros(1, model.n_layers, model.n_heads + 1, dtype=torch.bool)
            clean = chunk.ev.run_groups(model, no_patch, acts=chunk.acts)[0]
            embedding = model.input_embedding(part.tokens, part.mask)
            # what each sender's output moves by: the input's, then each block's nodes; [K, U, n, T, d]
            diffs = torch.stack([_sender_diffs(model, embedding, chunk, means, kind) for kind in ablations])
        for rows, preds in edge_predictions(model, part.tokens, part.mask, part.present, chunk.acts, diffs, edges,
                                            ev.task_kind, ev.sum_heads):
            changed = ~agree(preds, clean[None, None], ev.task_kind, ev.tolerance) & part.label_mask
            out[:, rows, chunk.rows] = changed.cpu()
        del diffs
    return dict(zip(ablations, out))


def _sender_diffs(model: Transformer, embedding: torch.Tensor, chunk: Chunk, means: SampleMeans | None,
                  ablation: str) -> torch.Tensor:
    """[U, n, T, d]: how far each sender's output moves when ablated (the input's, then each block's
    nodes in EdgeLayout's order), on the chunk's rows: to its value on the row's source (resample) or
    to its mean over the whole sample at that position (mean, siit.bound_chunks.sample_means)."""
    if ablation == "resample":
        emb, node = model.input_embedding(chunk.sources.tokens, chunk.sources.mask), chunk.source_acts
    elif ablation == "mean" and means is not None:
        emb, node = means.embedding, means.acts
    else:
        raise ValueError(f"no edge ablation {ablation!r}: resample or mean")
    return sender_outputs(emb - embedding, node - chunk.acts)
