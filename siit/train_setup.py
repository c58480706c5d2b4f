"""A high-level task + TrainConfig -> everything fixed before the first SIIT step (`Setup`):
architecture, correspondence, training data, validation pairs and the distractor tasks; and the
module that training updates (`Trainee`: the model, the distractors' probes, the loudness)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from torch import nn

from siit.busy_components import ComponentTargets, draw_components
from siit.busy_reads import draw_reads
from siit.busy_ranks import RankReference
from siit.config import ArchConfig, ConfigError, TrainConfig
from siit.correspondence import Correspondence
from siit.data import (
    SHAPES,
    Dataset,
    case_seed,
    make_dataset,
    pool_seed,
    resolve_pairing,
    source_length_weights,
    step_generator,
    with_shapes,
)
from siit.distractors import DistractorTargets, make_distractors
from siit.edges import EdgeLayout
from siit.high_level import HighLevelModel, as_task
from siit.loudness import Loudness
from siit.metrics import Evaluator
from siit.saturation import Saturation, one_position_keys, with_busy_heads
from siit.source_attention import SourceAttention
from siit.transformer import Transformer


@dataclasses.dataclass(frozen=True, kw_only=True)
class Setup:
    high: HighLevelModel
    low_config: dict[str, Any]
    corr: Correspondence
    train_set: Dataset
    evaluator: Evaluator
    high_masks: torch.Tensor
    """bool [n_high, n_high]: row i selects high-level node i (HighLevelModel.interchange's select)."""
    low_masks: torch.Tensor
    non_aligned: torch.Tensor
    """bool [L, S]: the non-aligned low-level nodes."""
    pairing: str
    """The resolved TrainConfig.pairing ("auto" decided)."""
    final_evaluator: Evaluator
    """Validation pairs in every input shape (the entry's validation); `evaluator` has the padded
    copy of the same pairs."""
    vary_shapes: bool
    """Training rows take random input shapes (bidirectional attention with input_shapes on)."""
    targets: DistractorTargets | None
    """The distractor tasks of the out-of-circuit nodes, or None."""
    circuit_slots: torch.Tensor
    """long [C, 2]: (layer, slot) of every circuit node (for the norm ceiling and the rank reference)."""
    case_seed: int
    """Seed of the per-case choices (siit.data.case_seed): correspondence, distractors, rescale."""
    last_position_weight: float
    """The task's weight of the last input position in the IIT and SIIT losses (1: none)."""
    source_weight: torch.Tensor
    """[max length + 1] weight of a source row by its length in the loudness the busy nodes are
    matched on (siit.data.source_length_weights): sources then count as the training inputs do."""
    non_circuit_edges: torch.Tensor | None = None
    """bool [U, R] (siit.edges.EdgeLayout): the edges outside the circuit that strictness rows
    patch one by one and checks judge (TrainConfig.strict_edges), or None."""
    name: str = ""
    """The task's id (case.id)."""
    logit_template: float | None = None
    """The task's logit template margin (siit.losses.template_loss replaces cross-entropy), or None."""
    distractor_z: torch.Tensor | None = None
    """[D + E, N, T] the distractors' standardised targets of every training sequence
    (DistractorTargets.standardised), then their further components' (`components`), on the CPU
    with the training set: fixed, so steps index it."""
    components: ComponentTargets | None = None
    """The E further components of the busy nodes' targets (TrainConfig.distractor_components,
    siit.busy_components), or None: every busy node writes one scalar."""
    saturation: Saturation | None = None
    """The heads the high-level model wants saturated and their keys on the training set
    (siit.saturation: trained by the attention-margin loss), then the busy heads whose distractor
    varies at one position (siit.saturation.one_position_keys), or None."""
    source_attention: SourceAttention | None = None
    """The previous-token busy heads and their source keys, whose attention keeps a floor
    (TrainConfig.busy_attention, siit.source_attention), or None."""

    views: tuple[Setup, ...] = ()
    """A multi-task bundle's views (planted.multi_task), each task's rows with its own circuit: the
    criterion is met only when every view meets it too (siit.train_checks); a pooled check weighs a
    task's own interchanges one in n_tasks. Empty for every other task."""
    device: torch.device = torch.device("cpu")
    """Where the model, the evaluators and the distractor targets live (eval.core.device). The
    training set, the masks and the high-level model stay on the CPU, where every step draws its
    batch from CPU generators before moving it: the same seed draws the same batches anywhere."""


def _busy_targets(task: Any, config: TrainConfig, corr: Correspondence, low_config: dict[str, Any],
                  train_set: Dataset, per_case: int, device: torch.device
                  ) -> tuple[DistractorTargets, torch.Tensor, ComponentTargets | None]:
    """The busy nodes' distractor targets (on `device`), their standardised values on every training
    sequence [D + E, N, T] (on the CPU: the first components', then the further ones'), and the
    further components (siit.busy_components) or None."""
    causal = low_config["attention_dir"] == "causal"
    spec = make_distractors(corr.non_aligned, d_vocab=low_config["d_vocab"], n_ctx=low_config["n_ctx"],
                            causal=causal, seed=per_case, spread=config.distractor_spread,
                            positions=getattr(task, "distractor_positions", "every"),
                            profile=config.distractor_profile)
    spec = draw_components(spec, config.distractor_components, _token_weight(train_set, low_config["d_vocab"]),
                           per_case, low_config["d_head"])
    spec = draw_reads(spec, config.distractor_reads, per_case)
    tokens, mask = train_set.tokens, train_set.mask
    targets = DistractorTargets.fit(spec, [corr.low.slot(n) for n in corr.non_aligned], tokens, mask, mask.bool(),
                                    causal=causal)
    z = targets.standardised(tokens, mask)
    components = ComponentTargets.fit(targets, tokens, mask, mask.bool())
    if components is not None:
        z = torch.cat([z, components.standardised(tokens, mask)])
        components = components.to(device)
    return targets.to(device), z, components


def _token_weight(data: Dataset, d_vocab: int) -> np.ndarray:
    """[d_vocab] each token's frequency at the input positions of `data` (BOS and PAD excluded)."""
    inputs = data.mask.bool().clone()
    inputs[:, 0] = False
    return np.bincount(data.tokens[inputs].numpy(), minlength=d_vocab).astype(np.float64)


SHARP_MARGIN = 4.0
"""The attention margin of a high-level model's sharp heads (a case bundle's side heads), as large-circuit's
one-position heads take it (planted.causal_model.CausalModel.saturation_margin)."""


def _sharp_attention(saturation: Saturation | None, high: HighLevelModel, corr: Correspondence,
                     data: Dataset) -> Saturation | None:
    """`saturation` with the high-level model's sharp heads added (`sharp_heads`, `sharp_keys`: a case
    bundle's side heads, planted.case_bundles), trained to the attention margin on the keys their
    functions read, as busy heads are (training only). A side head that selects an earlier digit by content
    but splits its attention gives a near-tie that the other tasks' writes, patched all at once, flip."""
    heads = getattr(high, "sharp_heads", ())
    if not heads:
        return saturation
    lows = [corr.mapping[h][0] for h in heads]
    return with_busy_heads(saturation, [corr.low.slot(h) for h in lows], lows, high.sharp_keys(data.tokens, data.mask),
                           len(data), margin=SHARP_MARGIN)


def _busy_attention(saturation: Saturation | None, targets: DistractorTargets | None,
                    shape: torch.Size) -> Saturation | None:
    """The circuit's saturated heads and the one-position busy heads' attention (siit.saturation.with_busy_heads)
    on a training set of `shape` [N, T]."""
    if targets is None:
        return saturation
    busy = [(i, d) for i, d in enumerate(targets.distractors) if d.at is not None]  # heads only: an MLP never gets one
    if not busy:
        return saturation
    slots = [tuple(targets.slots[i].tolist()) for i, _ in busy]
    patterns = torch.stack([one_position_keys(d, shape[1]) for _, d in busy])
    return with_busy_heads(saturation, slots, [d.node for _, d in busy], patterns, shape[0])


class Trainee(nn.Module):
    """The model, the distractors' probe directions and the circuit's running loudness (the
    distractors' reference, siit.loudness): one module, so a checkpoint holds all of them."""

    def __init__(self, model: Transformer, n_probes: int, n_components: int = 0) -> None:
        super().__init__()
        self.model = model
        self.probes = nn.Parameter(torch.zeros(n_probes, model.d_model))
        self.loudness = Loudness(n_probes)
        # registered only when there are some, so a run without them holds what runs always held
        self.component_probes = nn.Parameter(torch.zeros(n_components, model.d_model)) if n_components else None
        self.ranks = RankReference() if n_components else None
        """The circuit's running participation ratios, which the components' shares follow (siit.busy_ranks)."""

    def component_shares(self, s: Setup) -> tuple[torch.Tensor, torch.Tensor] | tuple[None, None]:
        """The further components' shares [E] and the first components' part of their nodes'
        variance [D] at the circuit's held ratios (siit.busy_ranks), or (None, None)."""
        if s.components is None or self.ranks is None:
            return None, None
        shares = s.components.shares(self.ranks)
        return shares, s.components.first_shares(shares)


def prepare(task: Any, config: TrainConfig, arch: ArchConfig = ArchConfig(), *,
            device: torch.device = torch.device("cpu")) -> Setup:
    """Architecture, correspondence, data and distractor tasks: everything fixed before step 1.
    `task`: a siit.high_level.HighLevelTask, or a compiled case (wrapped in TracrTask); everything
    is computed on the CPU, then what the model reads each check is moved to `device`."""
    task = as_task(task)
    kind = task.case.task_kind
    high = task.high_level()
    low_config = task.low_level_config(arch)
    per_case = case_seed(config.seed, task.case.id)
    corr = task.correspondence(low_config, per_case)
    if not corr.high_nodes:
        raise ConfigError(f"case {task.case.id}: the high-level graph has no nodes to align")
    if tuple(high.nodes) != corr.high_nodes:
        raise ConfigError(f"case {task.case.id}: the correspondence names other high-level nodes than the model")
    selects = corr.selects()  # every node alone, then the joint interchanges (Correspondence.joint)
    train_set = make_dataset(task, high, config.n_train, seed=pool_seed(config.seed, "train"))
    val_set = make_dataset(task, high, config.n_val, seed=pool_seed(config.seed, "validation"))
    pairing = resolve_pairing(config.pairing, train_set, high, selects, corr.interventions, kind, config.seed)
    causal = low_config["attention_dir"] == "causal"
    build = lambda data: Evaluator.build(  # noqa: E731
        data, high, corr, task_kind=kind, tolerance=config.regression_tolerance, pairing=pairing,
        generator=step_generator(config.seed, -1))
    final = build(with_shapes(val_set, SHAPES, step_generator(config.seed, -3))).to(device)
    # periodic checks run on the padded copy; the other shapes are checked once it meets the criterion
    evaluator = build(with_shapes(val_set, ("padded",), step_generator(config.seed, -3))).to(device)
    if config.lean_activations:
        final, evaluator = (dataclasses.replace(e, sum_heads=True) for e in (final, evaluator))
    targets = distractor_z = components = None
    if config.distractors and corr.non_aligned:
        targets, distractor_z, components = _busy_targets(task, config, corr, low_config, train_set, per_case, device)
    non_circuit_edges = None
    if config.trains_edges:
        layout = EdgeLayout(low_config["n_layers"], low_config["n_heads"])
        non_circuit_edges = layout.non_circuit(corr.map_circuit(task.graph).edges)
    circuit_slots = torch.tensor([corr.low.slot(n) for n in corr.aligned], dtype=torch.long, device=device).reshape(-1, 2)
    return Setup(high=high, low_config=low_config, corr=corr, train_set=train_set, evaluator=evaluator,
                 high_masks=selects, low_masks=corr.low_masks(), non_aligned=corr.low.mask(corr.non_aligned),
                 pairing=pairing, final_evaluator=final, vary_shapes=config.input_shapes and not causal,
                 targets=targets, distractor_z=distractor_z, components=components, circuit_slots=circuit_slots, case_seed=per_case,
                 last_position_weight=float(getattr(task, "last_position_weight", 1.0)),
                 source_weight=source_length_weights(train_set.lengths, pairing),
                 non_circuit_edges=non_circuit_edges, device=device, name=str(task.case.id),
                 saturation=_sharp_attention(_busy_attention(Saturation.build(high, corr, train_set.tokens,
                                                                              train_set.mask), targets,
                                                             train_set.tokens.shape), high, corr, train_set),
                 source_attention=SourceAttention.build(targets, low_config["n_ctx"]) if config.busy_attention else None,
                 logit_template=getattr(task, "logit_template", None),
                 views=tuple(prepare(v, dataclasses.replace(config, distractors=False), arch, device=device)
                             for v in (getattr(task, "view_tasks", None) or tuple)()))



