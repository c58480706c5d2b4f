"""A trained low-level model + held-out data -> accuracy, IIA (per high-level node) and SIIA (per
non-aligned node, and all of them at once).

IIA(V^H): fraction of labelled positions where the low-level model intervened on Π(V^H) agrees
with the high-level model intervened on V^H. SIIA(V^L): fraction where the low-level model
intervened on the non-aligned V^L still gives the correct output for the base (the strictness
loss's target). Regression outputs agree within the tolerance (0.05). The validation pairs are
drawn once, so successive evaluations are comparable.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from eval.core.circuit import TaskKind
from siit.correspondence import Correspondence
from siit.data import SHAPES, Dataset, pair_sources
from siit.edge_runs import edge_predictions, sender_outputs
from siit.edges import EdgeLayout
from siit.interventions import chunk_rows, node_activations, repeat_rows, row_slices, rows_per_pass
from siit.high_level import HighLevelModel
from siit.losses import agree, predictions
from siit.transformer import Patch, Transformer


@dataclasses.dataclass(frozen=True)
class Evaluator:
    """Fixed validation pairs with their high-level targets for every intervention."""

    data: Dataset
    sources: torch.Tensor
    """long [N]: the source paired with each validation base."""
    iit_targets: torch.Tensor
    """[n_interventions, N, T]: high-level output with that node (or joint group,
    Correspondence.interventions) taken from the source."""
    correspondence: Correspondence
    task_kind: TaskKind
    tolerance: float
    edge_sources: torch.Tensor | None = None
    """long [N]: the counterfactual of each base for the strictness checks (SIIA of nodes and of
    edges), drawn independently of its length, as eval's resample draws them and as strictness rows
    train; None: `sources`."""
    sum_heads: bool = False
    """Patched runs sum the heads from z (Transformer.forward's sum_heads; TrainConfig.lean_activations):
    the same predictions to float rounding, at a fraction of a wide model's cost."""

    @property
    def strict_sources(self) -> torch.Tensor:
        """long [N]: the sources SIIA reads (edge_sources, else the IIT pairing's sources). IIT needs
        sources at least as long as the base (siit.data.pair_sources); strictness must hold for any
        counterfactual: with the IIT pairing, case 3's m1 (outside the circuit) moved 36% of the
        outputs of length 5 under eval's resample while SIIA read 1.0."""
        return self.sources if self.edge_sources is None else self.edge_sources

    @classmethod
    def build(cls, data: Dataset, high: HighLevelModel, correspondence: Correspondence, *,
              task_kind: TaskKind, tolerance: float, pairing: str, generator: torch.Generator) -> Evaluator:
        n = len(data)
        # a dataset repeated per input shape pairs every copy the same way: under causal attention
        # the copies then compute exactly the same, and the padded copy alone decides the criterion
        copies = 1 if data.shape_ids is None else int(data.shape_ids.unique().numel())
        n0 = n // copies
        first = pair_sources(data.lengths[:n0], torch.arange(n0), pairing, generator)
        sources = torch.cat([first + k * n0 for k in range(copies)])
        # drawn after `first`, so the node checks' pairs are what they were without it
        any_length = pair_sources(data.lengths[:n0], torch.arange(n0), "independent", generator)
        edge_sources = torch.cat([any_length + k * n0 for k in range(copies)])
        targets = []
        with torch.no_grad():  # high-level node i of correspondence.high_nodes is high.nodes[i]
            for select in correspondence.selects():
                targets.append(high.interchange(data.tokens, data.mask, data.high_acts[:, sources], select))
        return cls(data, sources, torch.stack(targets), correspondence, task_kind, tolerance, edge_sources)

    def to(self, device: torch.device) -> Evaluator:
        """The same pairs and targets with every tensor on `device` (the model's)."""
        return dataclasses.replace(self, data=self.data.to(device), sources=self.sources.to(device),
                                   iit_targets=self.iit_targets.to(device),
                                   edge_sources=None if self.edge_sources is None else self.edge_sources.to(device))

    def groups(self) -> tuple[list[str], torch.Tensor]:
        """Names and low-level masks [G, L, S] of every intervention the metrics need."""
        corr = self.correspondence
        names = ["clean"] + [f"iia:{n}" for n in corr.interventions] + [f"siia:{n}" for n in corr.non_aligned]
        masks = [torch.zeros(corr.low.n_layers, corr.low.n_heads + 1, dtype=torch.bool)]
        masks += list(corr.low_masks())
        masks += [corr.low.mask([n]) for n in corr.non_aligned]
        if corr.non_aligned:
            names.append("siia:all")
            masks.append(corr.low.mask(corr.non_aligned))
        return names, torch.stack(masks)

    def run_groups(self, model: Transformer, masks: torch.Tensor,
                   source_acts: torch.Tensor | None = None, *, acts: torch.Tensor | None = None) -> torch.Tensor:
        """Predictions [G, N, T] of the base runs under each group's intervention (masks [G, L, S]).

        A group patched from block l on computes blocks before l exactly as the clean run does, so
        it starts at l from the clean residual stream; groups are batched in order of their first
        patched block, and every group reads the one copy of the source activations."""
        d = self.data
        n = len(d)
        masks = masks.to(d.tokens.device)
        with torch.no_grad():
            if acts is None:  # a caller that already ran the clean pass (train_checks, validation) passes it
                acts = node_activations(model, d.tokens, d.mask, d.present)
            if source_acts is None:
                source_acts = acts[:, self.sources]
            resid = model.residuals(d.tokens, d.mask, acts)  # [L + 1, N, T, d_model]
        L = masks.shape[1]
        patched = masks.any(dim=-1)  # [G, L]
        first = torch.where(patched.any(dim=-1), patched.float().argmax(dim=-1), L)
        order = torch.argsort(first, stable=True)
        per_chunk = max(1, rows_per_pass(model, d.tokens.shape[1]) // n)
        out = []
        with torch.no_grad():
            for start in range(0, masks.shape[0], per_chunk):
                chunk = order[start : start + per_chunk]
                g = chunk.shape[0]
                layer = int(first[chunk].min())
                rows = masks[chunk].repeat_interleave(n, dim=0)
                present = None if d.present is None else repeat_rows(d.present, g)
                x = resid[layer]
                if self.sum_heads and layer < L:  # a wide model: begin after block `layer`'s attention
                    x, rows = after_attention(model, layer, rows, source_acts, acts, resid), rows.clone()
                    rows[:, : layer + 1] = False  # block `layer` is done: the run starts after it
                    layer += 1
                logits = model(repeat_rows(d.tokens, g), repeat_rows(d.mask, g), Patch(mask=rows, values=source_acts),
                               present=present, start=(layer, x), sum_heads=self.sum_heads)[0]
                out.append(predictions(logits, self.task_kind).reshape(g, n, -1))
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.shape[0], device=order.device)
        return torch.cat(out)[inverse]

    def edge_siia(self, model: Transformer, edges: torch.Tensor, *,
                  acts: torch.Tensor | None = None) -> torch.Tensor:
        """float [E]: SIIA of each edge (u, r) of `edges` (long [E, 2], siit.edges.EdgeLayout
        indices) patched alone: the fraction of labelled positions where reader r reading
        sender u's output on the base's counterfactual (`edge_sources`) leaves the base's
        correct output; on data in several input shapes, its lowest over the shapes
        (`_lowest_by_shape`)."""
        d = self.data
        n, E = len(d), edges.shape[0]
        layout = EdgeLayout(model.n_layers, model.n_heads).shape
        with torch.no_grad():
            if acts is None:
                acts = node_activations(model, d.tokens, d.mask, d.present)
            cf = self.strict_sources
            embedding = model.input_embedding(d.tokens, d.mask)
        if self.sum_heads:  # a wide model (lean): each run from its reader's block (siit.edge_runs)
            return self._lean_edge_siia(model, edges, acts, embedding)
        with torch.no_grad():
            source_acts, source_embed = acts[:, cf], embedding[cf]
        lm, hits, shape = d.label_mask, [], self._shape_onehot()
        per_chunk = max(1, rows_per_pass(model, d.tokens.shape[1]) // n)
        with torch.no_grad():
            for start in range(0, E, per_chunk):
                chunk = edges[start : start + per_chunk]
                g = chunk.shape[0]
                one = torch.zeros(g, *layout, dtype=torch.bool, device=d.tokens.device)
                one[torch.arange(g, device=one.device), chunk[:, 0], chunk[:, 1]] = True
                rows = torch.zeros(g * n, model.n_layers, model.n_heads + 1, dtype=torch.bool, device=d.tokens.device)
                patch = Patch(mask=rows, values=source_acts, edges=one.repeat_interleave(n, dim=0),
                              input_values=source_embed)
                present = None if d.present is None else repeat_rows(d.present, g)
                logits = model(repeat_rows(d.tokens, g), repeat_rows(d.mask, g), patch, present=present)[0]
                preds = predictions(logits, self.task_kind).reshape(g, n, -1)
                ok = agree(preds, d.labels[None], self.task_kind, self.tolerance)
                hits.append((ok & lm).sum(dim=2).float() @ shape)  # [g, K] labelled positions left right
        return self._lowest_by_shape(torch.cat(hits) if hits else torch.zeros(0, shape.shape[1], device=lm.device), shape)

    def _lean_edge_siia(self, model: Transformer, edges: torch.Tensor, acts: torch.Tensor,
                        embedding: torch.Tensor) -> torch.Tensor:
        """edge_siia of a lean evaluator: each run from its reader's block (siit.edge_runs), over chunks of
        the rows (siit.interventions.chunk_rows) so that the senders' differences [U, rows, T, d] stay
        bounded: planted large-circuit's 1,536 final rows held 8 GB whole; a set that fits is one chunk."""
        d, cf, lm = self.data, self.strict_sources, self.data.label_mask
        senders = edges[:, 0].unique()
        local = torch.stack([torch.searchsorted(senders, edges[:, 0].contiguous()), edges[:, 1]], dim=1)
        shape = self._shape_onehot()
        hits = torch.zeros(edges.shape[0], shape.shape[1], device=d.tokens.device)  # labelled positions left right
        for r in row_slices(len(d), chunk_rows(model, d.tokens.shape[1])):
            with torch.no_grad():
                diffs = (sender_outputs(embedding[cf[r]], acts[:, cf[r]], senders)
                         - sender_outputs(embedding[r], acts[:, r], senders))[None]
            present = None if d.present is None else d.present[r]
            for rows, preds in edge_predictions(model, d.tokens[r], d.mask[r], present, acts[:, r], diffs, local,
                                                self.task_kind, self.sum_heads):
                ok = agree(preds[0], d.labels[r][None], self.task_kind, self.tolerance)
                hits[rows] += (ok & lm[r]).sum(dim=2).float() @ shape[r]
        return self._lowest_by_shape(hits, shape)

    def _shape_onehot(self) -> torch.Tensor:
        """float [N, K]: each validation row's input shape, one-hot over the K shapes present (K = 1
        when the data records none)."""
        ids = self.data.shape_ids
        n = len(self.data.tokens)
        if ids is None:
            return torch.ones(n, 1, device=self.data.tokens.device)
        return (ids[:, None] == ids.unique()[None]).float()

    def _lowest_by_shape(self, hits: torch.Tensor, shape: torch.Tensor) -> torch.Tensor:
        """float [E]: from hits [E, K] (labelled positions an edge leaves right, per input shape of
        `shape`, _shape_onehot's [N, K]), the fraction left right in each shape apart, and its
        lowest. The gate (siit.edge_bounds) judges each shape apart: pooled over case 18's three
        shapes, its a0.h0->m1 met the edge criterion at 0.9994 while it moved 4% of the unpadded
        length-5 sequences. Counts, not means, so one chunk or many give the same (and one shape
        the pooled fraction, to the bit)."""
        totals = self.data.label_mask.sum(dim=1).float() @ shape  # [K]
        seen = totals > 0  # a shape with nothing labelled has no score
        if not bool(seen.any()):
            return torch.ones(hits.shape[0], device=hits.device)
        return (hits[:, seen] / totals[seen]).amin(dim=1)

    def agreement(self, model: Transformer, names: list[str], masks: torch.Tensor, *,
                  acts: torch.Tensor | None = None) -> torch.Tensor:
        """bool [G, N, T]: where each group's output agrees with its target, for groups named as
        `groups` names them (masks [G, L, S]): "iia:<node>" against that node's interchange target
        on the IIT pairing, "siia:..." against the labels with the strictness sources, "clean"
        against the labels. acts: as for run_groups."""
        d = self.data
        if acts is None:
            acts = node_activations(model, d.tokens, d.mask, d.present)
        strict = torch.tensor([n.startswith("siia:") for n in names], device=masks.device)
        plain = self.run_groups(model, masks[~strict], acts=acts)  # clean and IIT: the IIT pairing
        preds = plain.new_empty(len(names), *plain.shape[1:])
        preds[~strict] = plain
        if strict.any():
            preds[strict] = self.run_groups(model, masks[strict], acts[:, self.strict_sources], acts=acts)
        agreed = []  # bool [N, T] per group
        for i, name in enumerate(names):
            if name.startswith("iia:"):
                target = self.iit_targets[self.correspondence.interventions.index(name[4:])]
            else:
                target = self.data.labels
            agreed.append(agree(preds[i], target, self.task_kind, self.tolerance))
        return torch.stack(agreed)

    def evaluate(self, model: Transformer, *, acts: torch.Tensor | None = None) -> dict[str, Any]:
        """accuracy, iia (mean over high-level nodes), iia_min, siia (mean over single non-aligned
        nodes), siia_min (including all-at-once), siia_all, and per-node values; on data in several
        input shapes also `by_shape`: each shape's accuracy, iia_min, siia_min, labelled positions
        and the node with the lowest IIA (each pooled score is the position-weighted mean of its
        per-shape scores). acts: as for run_groups."""
        names, masks = self.groups()
        agreed = self.agreement(model, names, masks, acts=acts)
        lm = self.data.label_mask
        out = _summarise(names, [float(a[lm].float().mean()) for a in agreed])
        shape_ids = self.data.shape_ids
        if shape_ids is not None and shape_ids.unique().numel() > 1:
            # the criterion pools the shapes; which one lags is what adapting or debugging needs
            out["by_shape"] = {}
            for k in shape_ids.unique().tolist():
                rows = shape_ids == k
                if not lm[rows].any():  # nothing labelled in this shape: no score (and no NaN in the entry)
                    continue
                part = _summarise(names, [float(a[rows][lm[rows]].float().mean()) for a in agreed])
                out["by_shape"][SHAPES[k]] = {key: part[key] for key in ("accuracy", "iia_min", "siia_min")} | {
                    "labelled_positions": int(lm[rows].sum()),
                    "worst_iia_node": min(part["iia_per_node"], key=part["iia_per_node"].get, default=None)}
        return out


def _summarise(names: list[str], scores: list[float]) -> dict[str, Any]:
    """The metrics of evaluate from each group's score (group names as Evaluator.groups gives them)."""
    by_name = dict(zip(names, scores))
    iia = {k[4:]: v for k, v in by_name.items() if k.startswith("iia:")}
    siia = {k[5:]: v for k, v in by_name.items() if k.startswith("siia:")}
    single = [v for k, v in siia.items() if k != "all"]
    return {
        "accuracy": by_name["clean"],
        "iia": sum(iia.values()) / len(iia) if iia else 1.0,
        "iia_min": min(iia.values(), default=1.0),
        "siia": sum(single) / len(single) if single else 1.0,
        "siia_min": min(siia.values(), default=1.0),
        "siia_all": siia.get("all", 1.0),
        "iia_per_node": iia,
        "siia_per_node": siia,
    }


def meets_criterion(metrics: dict[str, Any], judged: tuple[str, ...], criterion: float,
                    distractor_r2: float = 0.0, edge_criterion: float = 1.0) -> bool:
    """Accuracy, every node's IIA and every SIIA (as judged) at or above the criterion, and every
    distractor's R² at or above `distractor_r2` and every non-circuit edge's SIIA at or above
    `edge_criterion` when judged."""
    value = {"accuracy": metrics["accuracy"], "iia": metrics["iia_min"], "siia": metrics["siia_min"],
             "distractor_r2": metrics.get("distractor_r2_min", float("nan")),
             "edge_siia": metrics.get("edge_siia_min", float("nan"))}  # nan (not measured) fails
    floor = {"distractor_r2": distractor_r2, "edge_siia": edge_criterion}
    return all(value[m] >= floor.get(m, criterion) - 1e-12 for m in judged)


def after_attention(model: Transformer, layer: int, rows: torch.Tensor, source_acts: torch.Tensor, acts: torch.Tensor,
                    resid: torch.Tensor) -> torch.Tensor:
    """[g·n, T, d_model]: the residual leaving block `layer` under each row's patch (rows bool [g·n, L, S], row
    j patching base j mod n from source_acts [L, n or 1, T, S, d]; acts: the clean run's, resid its residuals
    [L + 1, n, T, d]), for patches of block `layer` and later only. Nothing such a patch changes is read by
    block `layer`'s heads, so their outputs are the clean run's: the block's attention output is the clean
    one plus each patched head's value minus its clean output, and only the MLP runs per row. On planted
    large-circuit (one block of 99 heads) a check's patched runs were mostly that attention, computed again
    for every group of every check; to float rounding the same as the patched forward (tested), so only lean
    (wide-model) evaluators take it and every other entry's checks stay bit for bit."""
    H, n, b = model.n_heads, acts.shape[1], source_acts.shape[1]  # b: n, or 1 (a mean ablation's values)
    mid = (resid[layer + 1] - acts[layer, :, :, H]).repeat(rows.shape[0] // n, 1, 1)  # the clean MLP input
    r, h = rows[:, layer, :H].nonzero(as_tuple=True)
    if r.numel():
        mid = mid.index_add(0, r, source_acts[layer, r % b, :, h] - acts[layer, r % n, :, h])
    out = model.mlp_output(layer, mid)
    patched = rows[:, layer, H]
    if bool(patched.any()):
        g = rows.shape[0] // n
        out = torch.where(patched.view(g, n, 1, 1), source_acts[layer, :, :, H][None], out.view(g, n, *out.shape[1:]))
        out = out.reshape(mid.shape)
    return mid + out
