"""One SIIT training step: a batch of base/source pairs -> the losses of Appendix H (or Algorithm 1)
on as few forward passes as the maths allows -> one optimiser update (three for alg1).

Every row of a batch samples its own high-level node for IIT and its own non-aligned nodes for
strictness, so a step needs no per-node Python loop: the source run is one forward pass (its node
activations are the patch values and carry the realism losses), and the IIT, strictness and
behaviour rows are one stacked base run of 3 x batch rows that reads the one copy of the source
activations (siit.transformer.Patch). Every row also takes its own input shape (padded,
unpadded, partly padded) under bidirectional attention.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from siit.config import TrainConfig
from siit.data import (
    SHAPES,
    epoch_order,
    pair_sources,
    present_mask,
    random_shapes,
    step_generator,
)
from siit.distractors import distractor_loss, node_outputs, norm_ceiling_loss, readout
from siit.edges import sample_edges
from siit.losses import last_position_weights, output_loss, template_loss
from siit.loudness import shape_groups
from siit.optim import Adam
from siit.saturation import head_scores, training_margin_loss
from siit.source_attention import floor_loss
from siit.train_setup import Setup, Trainee
from siit.transformer import Patch


def _batch(s: Setup, config: TrainConfig, step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Generator]:
    """Base and source indices of one step, and the step's random stream."""
    epoch, within = divmod(step, config.steps_per_epoch)
    order = epoch_order(config.seed, epoch, len(s.train_set))
    bases = order[within * config.batch_size : (within + 1) * config.batch_size]
    gen = step_generator(config.seed, step)
    return bases, pair_sources(s.train_set.lengths, bases, s.pairing, gen), gen


def _present(s: Setup, lengths: torch.Tensor,
             gen: torch.Generator) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Random input shapes for a batch's rows: (present mask, bool [B] rows drawn padded), or
    (None, None) when every row is padded to n_ctx."""
    if not s.vary_shapes:
        return None, None
    n_ctx = s.train_set.tokens.shape[1]
    kept, shape = random_shapes(lengths, n_ctx, gen)
    return present_mask(lengths, n_ctx, kept), drawn_padded(s, shape)


def drawn_padded(s: Setup, shape_ids: torch.Tensor) -> torch.Tensor | None:
    """bool [B]: rows that stand for inputs padded to n_ctx (siit.loudness keeps their reference
    apart); None when shapes do not vary, and one reference serves every row."""
    return shape_ids == SHAPES.index("padded") if s.vary_shapes else None


def run_step(trainee: Trainee, optimizer: Adam, s: Setup, config: TrainConfig,
          task: str, step: int, emphasis: torch.Tensor | None = None,
          edge_emphasis: torch.Tensor | None = None) -> dict[str, float]:
    """One update; emphasis: IIT's draw weights over high-level nodes (siit.adaptation),
    edge_emphasis: strictness's over non-circuit edges (siit.edges.edge_weights); None: uniform."""
    model = trainee.model
    bases, sources, gen = _batch(s, config, step)
    d = s.train_set
    tokens, mask, labels, lm = d.tokens[bases], d.mask[bases], d.labels[bases], d.label_mask[bases]
    (present, _), (src_present, src_padded) = _present(s, d.lengths[bases], gen), _present(s, d.lengths[sources], gen)
    B = bases.shape[0]
    view, iit_target, iit_mask = _iit_draws(s, tokens, mask, sources, gen, emphasis)
    non_aligned = s.non_aligned if view is None else torch.stack([v.non_aligned for v in s.views])[view]
    strict_mask = _strict_mask(non_aligned, B, config.strict_sampling, gen, config.strict_all)
    strict_edges, shuffle = _strictness_draws(s, B, gen, edge_emphasis, view)
    # strictness row i pairs base i with source shuffle[i]. Lean (TrainConfig.lean_activations): the
    # stacked run holds those pairs in the sources' order (row k: source k, base order[k]), so every
    # group reads the one copy of the source activations (a copy per group cost a third of a wide
    # model's step); otherwise the strictness group gets its own shuffled copy
    order = torch.argsort(shuffle) if config.lean_activations else None
    # drawn on the CPU (the same draws on every device), then moved where the model is
    dev = s.device
    tokens, mask, labels, lm, present, iit_target, iit_mask, strict_mask, strict_edges, order = (
        _to(x, dev) for x in (tokens, mask, labels, lm, present, iit_target, iit_mask, strict_mask, strict_edges,
                              order))
    strict_mask = _pick(strict_mask, order)
    rows = {"iit": None, "strict": order, "behavior": None}  # each part's base rows (None: as drawn)
    weights = {"iit": config.iit_weight, "strict": config.strict_weight, "behavior": config.behavior_weight}
    targets = {"iit": iit_target, "strict": labels, "behavior": labels}
    masks = {"iit": iit_mask, "strict": strict_mask, "behavior": torch.zeros_like(iit_mask)}
    parts = [k for k, w in weights.items() if w > 0]
    position = (None if s.last_position_weight == 1.0 else
                _to(last_position_weights(d.lengths[bases], tokens.shape[1], s.last_position_weight), dev))
    position_weight = {"iit": position, "strict": position, "behavior": None}
    # realism losses count every real position, BOS included, as eval.realism does
    keys = None if s.saturation is None else s.saturation.keys[:, sources]  # [n_heads, B, T, T]
    z = None if s.distractor_z is None else s.distractor_z[:, sources]  # [D, B, T]
    src = tuple(_to(x, dev) for x in (d.tokens[sources], d.mask[sources], src_present, src_padded,
                                      d.mask[sources].bool(), s.source_weight[d.lengths[sources]], keys, z))
    out: dict[str, float] = {}
    groups = [parts] if config.scheme == "apph" else [[p] for p in parts]  # alg1: one update per loss
    for group in groups:
        source_acts, aux = _source_run(trainee, s, config, *src, out)
        patch = _patch(trainee, config, group, masks, source_acts, strict_edges, shuffle, order, src[0], src[1])
        stacked = [torch.cat([_pick(x, rows[p]) for p in group]) if x is not None else None
                   for x in (tokens, mask, present)]
        logits, _ = model(stacked[0], stacked[1], patch, present=stacked[2], sum_heads=config.lean_activations)
        total = aux
        for i, part in enumerate(group):
            loss = _loss(s, config, logits[i * B : (i + 1) * B], _pick(targets[part], rows[part]),
                         _pick(lm, rows[part]), task, _pick(position_weight[part], rows[part])) * weights[part]
            out[part] = float(loss.detach())
            total = total + loss
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
    out["total"] = sum(v for key, v in out.items() if key != "total")
    return out


def _iit_draws(s: Setup, tokens: torch.Tensor, mask: torch.Tensor, sources: torch.Tensor, gen: torch.Generator,
               emphasis: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """(each row's view of a multi-task bundle or None, the IIT targets [B, T], the low-level masks
    [B, L, S]): each row intervenes on one high-level node (and its low-level image), lagging ones
    more often once training has stalled (siit.adaptation)."""
    B = tokens.shape[0]
    view = s.high.row_task_index(tokens) if s.views else None  # a multi-task bundle: each row's view
    if view is not None:
        w = _own_task_weights(s)[view] * (1.0 if emphasis is None else emphasis[None])  # [B, n_high]
        choice = torch.multinomial(w, 1, generator=gen)[:, 0]
    elif emphasis is None:
        choice = torch.randint(0, s.high_masks.shape[0], (B,), generator=gen)
    else:
        choice = torch.multinomial(emphasis, B, replacement=True, generator=gen)
    target = s.high.interchange(tokens, mask, s.train_set.high_acts[:, sources], s.high_masks[choice])
    return view, target, s.low_masks[choice]


def _loss(s: Setup, config: TrainConfig, logits: torch.Tensor, targets: torch.Tensor, label_mask: torch.Tensor,
          task: str, weight: torch.Tensor | None) -> torch.Tensor:
    """One part's loss: cross-entropy (or the hinged squared error of regression), or the task's logit
    template (siit.losses.template_loss)."""
    if s.logit_template is None:
        hinge = (config.regression_hinge, config.regression_tolerance / 2)
        return output_loss(logits, targets, label_mask, task, weight, hinge)
    return template_loss(logits, targets, label_mask, s.logit_template, weight)


def _strictness_draws(s: Setup, batch: int, gen: torch.Generator, emphasis: torch.Tensor | None,
                      view: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor]:
    """(bool [B, U, R] the non-circuit edges of each strictness row, or None without edge-level
    strictness; long [B] the row whose source each strictness row takes). view: long [B] each row's
    view of a multi-task bundle (Setup.views), or None."""
    # strictness rows take another row's source: any counterfactual, of any length, must leave
    # the output alone (as eval's resample ablation draws them), not only the IIT pairing's (at
    # least as long as the base: trained so, case 3's m1 moved 36% of eval's length-5 outputs)
    shuffle = torch.randperm(batch, generator=gen)
    if s.non_circuit_edges is None:
        return None, shuffle
    # half the rows one edge (lagging ones more often), half each edge w.p. 0.5: one edge at a
    # time left case 3's edges at SIIA 0.55 when its nodes met the criterion, and 5000 steps to go
    if view is not None:
        # a multi-task bundle: each row patches edges outside its own task's circuit (its view's)
        per_view = torch.stack([sample_edges(v.non_circuit_edges, batch, "mixed", gen) for v in s.views])
        return per_view[view, torch.arange(batch)], shuffle
    return sample_edges(s.non_circuit_edges, batch, "mixed", gen, emphasis), shuffle


def _pick(x: torch.Tensor | None, rows: torch.Tensor | None) -> torch.Tensor | None:
    return x if x is None or rows is None else x[rows]


def _patch(trainee: Trainee, config: TrainConfig, group: list[str], masks: dict[str, torch.Tensor],
           source_acts: torch.Tensor, strict_edges: torch.Tensor | None, shuffle: torch.Tensor,
           order: torch.Tensor | None, src_tokens: torch.Tensor, src_mask: torch.Tensor) -> Patch:
    """The stacked base run's patch: each group's node masks and, with edge-level strictness, the
    strictness rows' edges (Patch.edges, edge_rows, input_values). With `order` (lean: the
    strictness rows held in their sources' order, `order` their base rows) every group reads the
    one copy of the source activations (Patch.values' row r mod b rule); without, each group has
    its copy, the strictness rows' shuffled."""
    mask = torch.cat([masks[p] for p in group])
    if order is not None:
        values, pick = source_acts, None
    elif "strict" in group:
        values, pick = torch.cat([source_acts[:, shuffle] if p == "strict" else source_acts for p in group], dim=1), shuffle
    else:
        return Patch(mask=mask, values=source_acts.repeat(1, len(group), 1, 1, 1))
    if "strict" not in group or strict_edges is None:
        return Patch(mask=mask, values=values)
    batch = source_acts.shape[1]
    first = group.index("strict") * batch
    with torch.set_grad_enabled(config.source_gradient):
        embed = trainee.model.input_embedding(_pick(src_tokens, pick), _pick(src_mask, pick))
    return Patch(mask=mask, values=values, edges=_pick(strict_edges, order), edge_rows=(first, first + batch),
                 input_values=embed)


def _to(x: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    return None if x is None else x.to(device, non_blocking=True)


def _source_run(trainee: Trainee, s: Setup, config: TrainConfig, tokens: torch.Tensor, mask: torch.Tensor,
                present: torch.Tensor | None, padded: torch.Tensor | None, positions: torch.Tensor,
                row_weight: torch.Tensor, keys: torch.Tensor | None, z: torch.Tensor | None,
                out: dict[str, float]) -> tuple[torch.Tensor, torch.Tensor]:
    """Node activations of the source run [L, B, T, S, d] (the patch values) and the losses on
    them: realism (distractors of out-of-circuit nodes, norm ceiling of circuit nodes), the
    attention margin of the high-level model's saturated heads (siit.saturation; `keys` bool
    [n_heads, B, T, T] their keys on these rows) and the source floor of previous-token busy heads
    (siit.source_attention); `z` [D, B, T] the distractors' standardised targets of these rows
    (Setup.distractor_z).

    With `source_gradient` the IIT/SIIT loss is differentiated through the source run too (the
    full gradient of LOSS(INTINV(M, b, s, V))): strictness can then make a non-aligned node itself
    input-independent, instead of only teaching the rest of the model to compensate for it."""
    need_grad = config.source_gradient or s.targets is not None or keys is not None
    with torch.set_grad_enabled(need_grad):
        acts = trainee.model(tokens, mask, return_acts=True, present=present)[1]
    aux = acts.new_zeros(())
    if s.targets is not None:
        weight = positions * row_weight[:, None]  # [B, T] sources weighted as the training inputs
        groups = shape_groups(weight, padded)
        busy, circuit = (_reads(acts, slots, config.lean_activations) for slots in (s.targets.slots, s.circuit_slots))
        trainee.loudness.update(busy(), circuit(), s.targets, groups)
        if trainee.ranks is not None:  # the components' shares follow the circuit's ratios (siit.busy_ranks)
            trainee.ranks.track(circuit(), weight, s.circuit_slots[:, 1] == s.low_config["n_heads"])
        shares, first = trainee.component_shares(s)
        D = len(s.targets.distractors)  # z holds the further components' rows after these (Setup.distractor_z)
        target = trainee.loudness.targets(s.targets, z[:D], padded, first)
        # the further components' outputs are read before the first ones' readout: the order their entries
        # were trained in (the backward sums in it)
        parts = None if s.components is None else _reads(acts, s.components.slots, config.lean_activations)()
        pred = readout(busy(), trainee.probes)
        if parts is not None:  # each further component counts as one distractor (siit.busy_components)
            target, pred = s.components.extend(target, pred, z[D:], trainee.loudness.scales(s.targets, padded, z.shape[1], first),
                                               shares, parts, trainee.component_probes)
        d_loss = distractor_loss(pred, target, positions)
        for term in trainee.loudness.norm_terms(busy, s.targets, groups, weight):
            d_loss = d_loss + term
        c_loss = norm_ceiling_loss(circuit(), positions, config.circuit_norm_ceiling)
        out["distractor"], out["norm_ceiling"] = float(d_loss.detach()), float(c_loss.detach())
        aux = config.distractor_weight * d_loss + c_loss
    queries = positions if present is None else positions & present  # [B, T] the queries that count
    if keys is not None:
        scores = head_scores(trainee.model, tokens, mask, acts, s.saturation.slots, present)
        sat = training_margin_loss(s.saturation, scores, keys, queries)
        out["saturation"] = float(sat.detach())
        aux = aux + sat
    if s.source_attention is not None:
        scores = head_scores(trainee.model, tokens, mask, acts, s.source_attention.slots, present)
        floor = floor_loss(scores, s.source_attention.keys, queries)
        out["source_attention"] = float(floor.detach())
        aux = aux + floor
    return (acts if config.source_gradient else acts.detach()), aux


def _reads(acts: torch.Tensor, slots: torch.Tensor, once: bool) -> Callable[[], torch.Tensor]:
    """The nodes' outputs node_outputs(acts, slots) for each loss that reads them: one shared read
    (lean: every read of acts builds a zero gradient of acts' whole size in the backward) or a
    read per loss (how every entry so far was trained: its gradients sum in that order)."""
    if once:
        shared = node_outputs(acts, slots)
        return lambda: shared
    return lambda: node_outputs(acts, slots)


def _own_task_weights(s: Setup) -> torch.Tensor:
    """[n_views, n_high] IIT's draw weights for a row of each view of a multi-task bundle: half on the
    view's own nodes, half on every node. Uniform draws put a task's node on a row of its own task one
    time in n_tasks, and only that draw trains its value (strictness is the rest): with seven tasks its
    interchanges from other tasks' rows plateaued at IIA 0.2-0.5."""
    own = torch.tensor([[n in v.corr.mapping for n in s.corr.interventions] for v in s.views], dtype=torch.float32)
    return 0.5 * own / own.sum(1, keepdim=True).clamp(min=1.0) + 0.5 / len(s.corr.interventions)


def _strict_mask(non_aligned: torch.Tensor, batch: int, sampling: str, gen: torch.Generator,
                 every: float = 0.0) -> torch.Tensor:
    """bool [B, L, S] of ablated non-aligned nodes (see TrainConfig.strict_sampling); non_aligned
    bool [L, S], or [B, L, S] per row; a share `every` of the rows ablates all of them
    (TrainConfig.strict_all; drawn after the rest, so 0 draws what runs before it drew)."""
    mask = _sampled_mask(non_aligned, batch, sampling, gen)
    if every > 0:
        rows = (torch.rand(batch, generator=gen) < every)[:, None, None]
        mask = torch.where(rows, non_aligned.expand(batch, *non_aligned.shape[-2:]), mask)
    return mask


def _sampled_mask(non_aligned: torch.Tensor, batch: int, sampling: str, gen: torch.Generator) -> torch.Tensor:
    if not non_aligned.any():
        return non_aligned.expand(batch, *non_aligned.shape[-2:]).clone()
    half = (torch.rand(batch, *non_aligned.shape[-2:], generator=gen) < 0.5) & non_aligned
    one = _one_node(non_aligned, batch, gen) if non_aligned.dim() == 2 else _one_node_per_row(non_aligned, gen)
    if sampling == "half":
        return half
    if sampling == "one":
        return one
    rows = (torch.rand(batch, generator=gen) < 0.5)[:, None, None]  # "mixed": half the rows each
    return torch.where(rows, half, one)


def _one_node(non_aligned: torch.Tensor, batch: int, gen: torch.Generator) -> torch.Tensor:
    flat = non_aligned.flatten().nonzero().flatten()
    pick = flat[torch.randint(0, flat.numel(), (batch,), generator=gen)]
    out = torch.zeros(batch, non_aligned.numel(), dtype=torch.bool)
    out[torch.arange(batch), pick] = True
    return out.reshape(batch, *non_aligned.shape)


def _one_node_per_row(non_aligned: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """bool [B, L, S]: one of each row's own non-aligned nodes (none where a row has none)."""
    flat = non_aligned.flatten(1).float()  # [B, L * S]
    has = flat.sum(1) > 0
    pick = torch.multinomial(torch.where(has[:, None], flat, torch.ones_like(flat)), 1, generator=gen)[:, 0]
    out = torch.zeros_like(flat, dtype=torch.bool)
    out[torch.arange(flat.shape[0]), pick] = has
    return out.reshape(non_aligned.shape)
