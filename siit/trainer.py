"""A high-level task (siit.high_level; a compiled case is one) + TrainConfig -> a low-level
transformer trained with (S)IIT to criterion.

`train` reads like the pipeline: architecture, correspondence, data and distractor tasks
(`prepare`), model and optimiser, (resume), steps with periodic validation and checkpoints until
the criterion or the step budget (adapted when progress stalls: siit.adaptation), then the
function-preserving head rescale and a last validation in every input shape.

Vectorisation (both schemes): every row of a batch samples its own high-level node for IIT and
its own non-aligned nodes for strictness, so a step needs no per-node Python loop. That is the
paper's per-batch sampling done per example: the same loss in expectation, lower variance. Every
row also takes its own input shape (padded, unpadded, partly padded) under bidirectional attention.
- "apph" (Appendix H): one source run, one base run of 3 x batch rows (IIT patch, strictness patch
  with every non-aligned node ablated w.p. 0.5, no patch), one backward of w_iit * L_iit +
  w_siit * L_siit + w_beh * L_behaviour + the realism losses of the source run (distractors of
  the out-of-circuit nodes, norm ceiling of the circuit nodes; siit.distractors).
- "alg1" (Algorithm 1): three optimiser steps per batch (IIT, then strictness with one
  non-aligned node per row, then behaviour), each on fresh activations of the current weights.
"""

from __future__ import annotations

import dataclasses
import math
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from siit import adaptation
from siit.adaptation import AdaptState
from siit.checkpoint import load_checkpoint, save_checkpoint
from siit.config import ArchConfig, ConfigError, TrainConfig
from siit.correspondence import Correspondence
from siit.data import (SHAPES, Dataset, case_seed, epoch_order, make_dataset, pair_sources, present_mask, random_shapes,
                       resolve_pairing, source_length_weights, step_generator, with_shapes)
from siit.distractors import (DistractorTargets, distractor_loss, make_distractors, norm_ceiling_loss, r_squared,
                              readout)
from siit.high_level import HighLevelModel, as_task, selection_rows
from siit.losses import last_position_weights, output_loss
from siit.loudness import Loudness, shape_groups
from siit.metrics import Evaluator, meets_criterion
from siit.optim import Adam
from siit.reparametrize import rescale_heads
from siit.transformer import Patch, Transformer, init_weights

Progress = Callable[[int, dict[str, float]], None]
"""progress(step, postfix) after every step; postfix has loss, the latest metrics and "budget",
the step budget (it grows when training extends it: siit.adaptation)."""


class TrainingDiverged(ArithmeticError):
    """A loss became NaN or infinite: the weights are no longer numbers, so there is nothing to keep."""


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped on request (Ctrl-C or SIGTERM); a checkpoint of the last finished step was written."""


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """A trained low-level model and everything needed to write and reproduce its entry."""

    model: Transformer
    low_config: dict[str, Any]
    correspondence: Correspondence
    config: TrainConfig
    arch: ArchConfig
    metrics: dict[str, Any]
    """Final validation metrics (accuracy, iia, siia, per node)."""
    history: list[dict[str, Any]]
    """One record per validation: step, epoch, losses, metrics, seconds."""
    met_criterion: bool
    steps: int
    seconds: float
    """Training wall time summed over resumed runs."""
    resumed_from_step: int | None
    evaluator: Evaluator
    """Validation pairs in every input shape (siit.data.SHAPES): what the entry is validated on."""
    train_val_overlap: float
    """Fraction of validation sequences that also occur in the training set."""
    distractors: list[dict[str, Any]]
    """What each out-of-circuit node was trained to compute, with its final R² (empty if off)."""
    head_scales: dict[str, list[float]]
    """Per head, the (Q/K, V/O) factors of the function-preserving rescale (empty if off)."""
    case_seed: int
    """Seed of the correspondence, the distractors and the rescale (siit.data.case_seed)."""
    adaptation: AdaptState
    """What training changed when progress stalled (siit.adaptation), and the final budget."""
    last_position_weight: float = 1.0
    """Weight of the last input position in the IIT and SIIT losses (the task's; 1: none)."""


@dataclasses.dataclass
class _Setup:
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
    """long [C, 2]: (layer, slot) of every circuit node (for the norm ceiling)."""
    case_seed: int
    """Seed of the per-case choices (siit.data.case_seed): correspondence, distractors, rescale."""
    last_position_weight: float
    """The task's weight of the last input position in the IIT and SIIT losses (1: none)."""
    source_weight: torch.Tensor
    """[max length + 1] weight of a source row by its length in the loudness the busy nodes are
    matched on (siit.data.source_length_weights): sources then count as the training inputs do."""


class _Trainee(nn.Module):
    """The model, the distractors' probe directions and the circuit's running loudness (the
    distractors' reference, siit.loudness): one module, so a checkpoint holds all of them."""

    def __init__(self, model: Transformer, n_probes: int) -> None:
        super().__init__()
        self.model = model
        self.probes = nn.Parameter(torch.zeros(n_probes, model.d_model))
        self.loudness = Loudness(n_probes)


def prepare(task: Any, config: TrainConfig, arch: ArchConfig = ArchConfig()) -> _Setup:
    """Architecture, correspondence, data and distractor tasks: everything fixed before step 1.
    `task`: a siit.high_level.HighLevelTask, or a compiled case (wrapped in TracrTask)."""
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
    selects = selection_rows(len(corr.high_nodes))
    train_set = make_dataset(task, high, config.n_train, seed=2 * config.seed + 1)
    val_set = make_dataset(task, high, config.n_val, seed=2 * config.seed + 2)
    pairing = resolve_pairing(config.pairing, train_set, high, selects, corr.high_nodes, kind, config.seed)
    causal = low_config["attention_dir"] == "causal"
    build = lambda data: Evaluator.build(  # noqa: E731
        data, high, corr, task_kind=kind, tolerance=config.regression_tolerance, pairing=pairing,
        generator=step_generator(config.seed, -1))
    final = build(with_shapes(val_set, SHAPES, step_generator(config.seed, -3)))
    # periodic checks run on the padded copy; the other shapes are checked once it meets the criterion
    evaluator = build(with_shapes(val_set, ("padded",), step_generator(config.seed, -3)))
    targets = None
    if config.distractors and corr.non_aligned:
        spec = make_distractors(corr.non_aligned, d_vocab=low_config["d_vocab"], n_ctx=low_config["n_ctx"],
                                causal=causal, seed=per_case, spread=config.distractor_spread)
        targets = DistractorTargets.fit(spec, [corr.low.slot(n) for n in corr.non_aligned],
                                        train_set.tokens, train_set.mask, train_set.mask.bool(), causal=causal)
    circuit_slots = torch.tensor([corr.low.slot(n) for n in corr.aligned], dtype=torch.long).reshape(-1, 2)
    return _Setup(high, low_config, corr, train_set, evaluator, selects, corr.low_masks(),
                  corr.low.mask(corr.non_aligned), pairing, final, config.input_shapes and not causal,
                  targets, circuit_slots, per_case, float(getattr(task, "last_position_weight", 1.0)),
                  source_length_weights(train_set.lengths, pairing))


def train(
    task: Any,
    config: TrainConfig,
    arch: ArchConfig = ArchConfig(),
    *,
    checkpoint_dir: Path | None = None,
    resume: bool = False,
    progress: Progress | None = None,
    should_stop: Callable[[int], bool] | None = None,
) -> TrainResult:
    """Train the low-level model for `task` (a HighLevelTask or a compiled case) until the
    criterion or the step budget."""
    task = as_task(task)
    s = prepare(task, config, arch)
    config = dataclasses.replace(config, pairing=s.pairing)  # record the resolved choice
    model = Transformer(s.low_config)
    gen = torch.Generator().manual_seed(config.seed)
    init_weights(model, gen, output_scale=config.init_output_scale)
    trainee = _Trainee(model, len(s.targets.distractors) if s.targets else 0)
    with torch.no_grad():
        trainee.probes.normal_(generator=gen)
    optimizer = Adam(trainee.parameters(), lr=config.lr, betas=config.betas, weight_decay=config.weight_decay)
    step, history, seconds, resumed_from = 0, [], 0.0, None
    adapt = adaptation.start(config)
    if resume and checkpoint_dir is not None:
        meta = load_checkpoint(checkpoint_dir, model=trainee, optimizer=optimizer)
        if meta is not None:
            if meta["config"] != config.to_json() or meta["low_config"] != s.low_config:
                raise ConfigError(f"the checkpoint in {checkpoint_dir} was made with other settings; "
                                  "rerun without --resume or with the same options")
            step, history, seconds, resumed_from = meta["step"], meta["history"], meta["seconds"], meta["step"]
            adapt = AdaptState.from_json(meta["adaptation"])

    def checkpoint() -> None:
        if checkpoint_dir is not None:
            save_checkpoint(checkpoint_dir, model=trainee, optimizer=optimizer, meta={
                "config": config.to_json(), "low_config": s.low_config, "step": step,
                "history": history, "seconds": seconds + time.perf_counter() - start,
                "adaptation": adapt.to_json()})

    start = time.perf_counter()
    met = bool(history) and history[-1]["met_criterion"]
    metrics = history[-1]["metrics"] if history else None
    losses: dict[str, float] = {}
    emphasis = adaptation.node_weights(adapt, metrics, s.corr.high_nodes)
    with _InterruptFlag() as interrupted:
        while not met:
            if step >= adapt.budget:
                extended = adaptation.extend(adapt, config, step, metrics)
                if extended is None:
                    break
                adapt = extended
                emphasis = adaptation.node_weights(adapt, metrics, s.corr.high_nodes)
            optimizer.lr = adaptation.learning_rate(adapt, config, step)
            losses = _step(trainee, optimizer, s, config, task.case.task_kind, step, emphasis)
            step += 1
            if not all(math.isfinite(v) for v in losses.values()):
                bad = ", ".join(f"{k} {v}" for k, v in losses.items() if not math.isfinite(v))
                raise TrainingDiverged(f"training diverged at step {step} ({bad}; lr {optimizer.lr:g})")
            if step % config.eval_every == 0 or step == adapt.budget:
                metrics = _evaluate(trainee, s, s.evaluator)
                met = meets_criterion(metrics, config.judged_metrics, config.criterion, config.distractor_r2)
                if met and s.vary_shapes:  # causal models compute the same in every shape
                    metrics = _evaluate(trainee, s, s.final_evaluator)
                    met = meets_criterion(metrics, config.judged_metrics, config.criterion, config.distractor_r2)
                if not met:
                    adapt = adaptation.after_validation(adapt, config, step, metrics)
                    emphasis = adaptation.node_weights(adapt, metrics, s.corr.high_nodes)
                history.append({"step": step, "epoch": round(step / config.steps_per_epoch, 3),
                                "lr": optimizer.lr, "losses": losses,
                                "metrics": metrics, "met_criterion": met,
                                "seconds": round(seconds + time.perf_counter() - start, 3)})
                checkpoint()
            if progress is not None:
                progress(step, _postfix(losses, metrics, adapt.budget))
            if interrupted.is_set() or (should_stop is not None and should_stop(step)):
                checkpoint()
                raise TrainingInterrupted(f"training interrupted at step {step}")
    head_scales: dict[str, list[float]] = {}
    if config.rescale_heads:
        head_scales = rescale_heads(model, s.corr.low, seed=s.case_seed, circuit=s.corr.aligned)
    # the final numbers are those of the model as written, in every input shape
    metrics = _evaluate(trainee, s, s.final_evaluator)
    met = met and meets_criterion(metrics, config.judged_metrics, config.criterion, config.distractor_r2)
    val, train_seqs = set(s.final_evaluator.data.seqs), set(s.train_set.seqs)
    r2 = metrics.get("distractor_r2_per_node", {})
    return TrainResult(
        model=model, low_config=s.low_config, correspondence=s.corr, config=config, arch=arch,
        metrics=metrics, history=history, met_criterion=met, steps=step,
        seconds=seconds + time.perf_counter() - start, resumed_from_step=resumed_from,
        evaluator=s.final_evaluator, train_val_overlap=sum(q in train_seqs for q in val) / len(val),
        distractors=[dict(d.to_json(), r2=r2.get(d.node), target_gain=[round(float(g), 6) for g in gain])
                     for d, gain in zip(s.targets.distractors if s.targets else (), trainee.loudness.gain)],
        head_scales=head_scales, case_seed=s.case_seed, adaptation=adapt,
        last_position_weight=s.last_position_weight,
    )


def _evaluate(trainee: _Trainee, s: _Setup, evaluator: Evaluator) -> dict[str, Any]:
    """The evaluator's metrics, plus each distractor's R² on the validation inputs."""
    metrics = evaluator.evaluate(trainee.model)
    targets = s.targets
    if targets is not None:
        d = evaluator.data
        with torch.no_grad():
            acts = trainee.model(d.tokens, d.mask, return_acts=True, present=d.present)[1]
            padded = None if d.shape_ids is None else _drawn_padded(s, d.shape_ids)
            target = trainee.loudness.targets(targets, d.tokens, d.mask, padded)
            pred = readout(acts, targets.slots, trainee.probes)
            r2 = r_squared(pred, target, d.label_mask)
            for shape, part in metrics.get("by_shape", {}).items():
                rows = d.shape_ids == SHAPES.index(shape)
                r2_shape = r_squared(pred[:, rows], target[:, rows], d.label_mask[rows])
                worst = int(r2_shape.argmin())
                part.update(distractor_r2_min=round(float(r2_shape[worst]), 6),
                            worst_distractor=targets.distractors[worst].node)
        per_node = {x.node: round(float(v), 6) for x, v in zip(targets.distractors, r2)}
        metrics.update(distractor_r2_min=min(per_node.values()), distractor_r2_per_node=per_node)
    return metrics


def _postfix(losses: dict[str, float], metrics: dict[str, Any] | None, budget: int) -> dict[str, float]:
    out = {"budget": budget, "loss": losses.get("total", float("nan"))}
    if metrics is not None:
        out.update(acc=metrics["accuracy"], IIA=metrics["iia"], SIIA=metrics["siia_min"])
        if "distractor_r2_min" in metrics:
            out.update(R2=metrics["distractor_r2_min"])
    return out


def _batch(s: _Setup, config: TrainConfig, step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Generator]:
    """Base and source indices of one step, and the step's random stream."""
    epoch, within = divmod(step, config.steps_per_epoch)
    order = epoch_order(config.seed, epoch, len(s.train_set))
    bases = order[within * config.batch_size : (within + 1) * config.batch_size]
    gen = step_generator(config.seed, step)
    return bases, pair_sources(s.train_set.lengths, bases, s.pairing, gen), gen


def _present(s: _Setup, lengths: torch.Tensor,
             gen: torch.Generator) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Random input shapes for a batch's rows: (present mask, bool [B] rows drawn padded), or
    (None, None) when every row is padded to n_ctx."""
    if not s.vary_shapes:
        return None, None
    n_ctx = s.train_set.tokens.shape[1]
    kept, shape = random_shapes(lengths, n_ctx, gen)
    return present_mask(lengths, n_ctx, kept), _drawn_padded(s, shape)


def _drawn_padded(s: _Setup, shape_ids: torch.Tensor) -> torch.Tensor | None:
    """bool [B]: rows that stand for inputs padded to n_ctx (siit.loudness keeps their reference
    apart); None when shapes do not vary, and one reference serves every row."""
    return shape_ids == SHAPES.index("padded") if s.vary_shapes else None


def _step(trainee: _Trainee, optimizer: Adam, s: _Setup, config: TrainConfig,
          task: str, step: int, emphasis: torch.Tensor | None = None) -> dict[str, float]:
    model = trainee.model
    bases, sources, gen = _batch(s, config, step)
    d = s.train_set
    tokens, mask, labels, lm = d.tokens[bases], d.mask[bases], d.labels[bases], d.label_mask[bases]
    (present, _), (src_present, src_padded) = _present(s, d.lengths[bases], gen), _present(s, d.lengths[sources], gen)
    B = bases.shape[0]
    # IIT: each row intervenes on one high-level node (and its low-level image), lagging ones more
    # often once training has stalled (siit.adaptation)
    if emphasis is None:
        choice = torch.randint(0, s.high_masks.shape[0], (B,), generator=gen)
    else:
        choice = torch.multinomial(emphasis, B, replacement=True, generator=gen)
    iit_target = s.high.interchange(tokens, mask, d.high_acts[:, sources], s.high_masks[choice])
    iit_mask = s.low_masks[choice]
    strict_mask = _strict_mask(s.non_aligned, B, config.strict_sampling, gen)
    weights = {"iit": config.iit_weight, "strict": config.strict_weight, "behavior": config.behavior_weight}
    targets = {"iit": iit_target, "strict": labels, "behavior": labels}
    masks = {"iit": iit_mask, "strict": strict_mask, "behavior": torch.zeros_like(iit_mask)}
    parts = [k for k, w in weights.items() if w > 0]
    position = (None if s.last_position_weight == 1.0 else
                last_position_weights(d.lengths[bases], tokens.shape[1], s.last_position_weight))
    position_weight = {"iit": position, "strict": position, "behavior": None}
    # realism losses count every real position, BOS included, as eval.core.node_heuristics does
    src = (d.tokens[sources], d.mask[sources], src_present, src_padded, d.mask[sources].bool(),
           s.source_weight[d.lengths[sources]])
    out: dict[str, float] = {}
    groups = [parts] if config.scheme == "apph" else [[p] for p in parts]  # alg1: one update per loss
    for group in groups:
        source_acts, aux = _source_run(trainee, s, config, *src, out)
        k = len(group)
        patch = Patch(mask=torch.cat([masks[p] for p in group]), values=source_acts.repeat(1, k, 1, 1, 1))
        rows_present = None if present is None else present.repeat(k, 1)
        logits, _ = model(tokens.repeat(k, 1), mask.repeat(k, 1), patch, present=rows_present)
        total = aux
        for i, part in enumerate(group):
            loss = output_loss(logits[i * B : (i + 1) * B], targets[part], lm, task,
                               position_weight[part]) * weights[part]
            out[part] = float(loss.detach())
            total = total + loss
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
    out["total"] = sum(v for key, v in out.items() if key != "total")
    return out


def _source_run(trainee: _Trainee, s: _Setup, config: TrainConfig, tokens: torch.Tensor, mask: torch.Tensor,
                present: torch.Tensor | None, padded: torch.Tensor | None, positions: torch.Tensor,
                row_weight: torch.Tensor,
                out: dict[str, float]) -> tuple[torch.Tensor, torch.Tensor]:
    """Node activations of the source run [L, B, T, S, d] (the patch values) and the realism losses
    on them (distractors of out-of-circuit nodes, norm ceiling of circuit nodes).

    With `source_gradient` the IIT/SIIT loss is differentiated through the source run too (the
    full gradient of LOSS(INTINV(M, b, s, V))): strictness can then make a non-aligned node itself
    input-independent, instead of only teaching the rest of the model to compensate for it."""
    need_grad = config.source_gradient or s.targets is not None
    with torch.set_grad_enabled(need_grad):
        acts = trainee.model(tokens, mask, return_acts=True, present=present)[1]
    aux = acts.new_zeros(())
    if s.targets is not None:
        weight = positions * row_weight[:, None]  # [B, T] sources weighted as the training inputs
        groups = shape_groups(weight, padded)
        trainee.loudness.update(acts, s.circuit_slots, s.targets, groups)
        target = trainee.loudness.targets(s.targets, tokens, mask, padded)
        d_loss = distractor_loss(readout(acts, s.targets.slots, trainee.probes), target, positions)
        for term in trainee.loudness.norm_terms(acts, s.targets, groups, weight):
            d_loss = d_loss + term
        c_loss = norm_ceiling_loss(acts, s.circuit_slots, positions, config.circuit_norm_ceiling)
        out["distractor"], out["norm_ceiling"] = float(d_loss.detach()), float(c_loss.detach())
        aux = config.distractor_weight * d_loss + c_loss
    return (acts if config.source_gradient else acts.detach()), aux


def _strict_mask(non_aligned: torch.Tensor, batch: int, sampling: str, gen: torch.Generator) -> torch.Tensor:
    """bool [B, L, S] of ablated non-aligned nodes (see TrainConfig.strict_sampling)."""
    if not non_aligned.any():
        return non_aligned.expand(batch, *non_aligned.shape).clone()
    half = (torch.rand(batch, *non_aligned.shape, generator=gen) < 0.5) & non_aligned
    one = _one_node(non_aligned, batch, gen)
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


class _InterruptFlag:
    """While active, Ctrl-C (SIGINT) or SIGTERM sets a flag the loop checks after each finished
    step, so the checkpoint never holds a half-applied update. SIGTERM too: it is what `kill`, a
    batch scheduler's time limit and a process pool stopping its workers send, and each should
    leave a checkpoint to resume from, not lose the steps since the last validation. Only
    installed in the main thread."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __enter__(self) -> threading.Event:
        self.event = threading.Event()
        self.previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            self.previous = {sig: signal.signal(sig, lambda *_: self.event.set()) for sig in self.SIGNALS}
        return self.event

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
