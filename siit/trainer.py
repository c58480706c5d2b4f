"""A compiled case + TrainConfig -> a low-level transformer trained with (S)IIT to criterion.

`train` reads like the pipeline: architecture and correspondence, data, model and optimiser,
(resume), steps with periodic validation and checkpoints until the criterion or the step budget.

Vectorisation (both schemes): every row of a batch samples its own high-level node for IIT and
its own non-aligned nodes for strictness, so a step needs no per-node Python loop. That is the
paper's per-batch sampling done per example: the same loss in expectation, lower variance.
- "apph" (Appendix H): one source run (no gradient), one base run of 3 x batch rows (IIT patch,
  strictness patch with every non-aligned node ablated w.p. 0.5, no patch), one backward of
  w_iit * L_iit + w_siit * L_siit + w_beh * L_behaviour.
- "alg1" (Algorithm 1): three optimiser steps per batch (IIT, then strictness with one
  non-aligned node per row, then behaviour), each on fresh activations of the current weights.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from siit.checkpoint import load_checkpoint, save_checkpoint
from siit.config import ArchConfig, ConfigError, TrainConfig
from siit.correspondence import Correspondence, low_level_config, make_correspondence
from siit.data import Dataset, epoch_order, make_dataset, pair_sources, resolve_pairing, step_generator
from siit.interventions import interchange, node_activations
from siit.losses import output_loss, targets_from_logits
from siit.metrics import Evaluator, meets_criterion
from siit.optim import Adam, linear_lr
from siit.transformer import Patch, Transformer, init_weights

Progress = Callable[[int, dict[str, float]], None]
"""progress(step, postfix) after every step; postfix has loss and the latest metrics."""


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped on request (Ctrl-C); a checkpoint of the last finished step was written."""


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
    train_val_overlap: float
    """Fraction of validation sequences that also occur in the training set."""


@dataclasses.dataclass
class _Setup:
    high: Transformer
    low_config: dict[str, Any]
    corr: Correspondence
    train_set: Dataset
    evaluator: Evaluator
    high_masks: torch.Tensor
    low_masks: torch.Tensor
    non_aligned: torch.Tensor
    """bool [L, S]: the non-aligned low-level nodes."""
    pairing: str
    """The resolved TrainConfig.pairing ("auto" decided)."""


def prepare(compiled: Any, config: TrainConfig, arch: ArchConfig = ArchConfig()) -> _Setup:
    """Architecture, correspondence and data: everything fixed before the first step."""
    task = compiled.case.task_kind
    high = Transformer.from_state_dict(compiled.config, compiled.state_dict)
    low_config = low_level_config(compiled.config, arch)
    corr = make_correspondence(compiled.graph, compiled.config, low_config, config.seed)
    if not corr.high_nodes:
        raise ConfigError(f"case {compiled.case.id}: the high-level graph has no nodes to align")
    train_set = make_dataset(compiled, high, config.n_train, seed=2 * config.seed + 1)
    val_set = make_dataset(compiled, high, config.n_val, seed=2 * config.seed + 2)
    pairing = resolve_pairing(config.pairing, train_set, high, corr.high_masks(), corr.high_nodes, task, config.seed)
    evaluator = Evaluator.build(val_set, high, corr, task_kind=task, tolerance=config.regression_tolerance,
                                pairing=pairing, generator=step_generator(config.seed, -1))
    return _Setup(high, low_config, corr, train_set, evaluator, corr.high_masks(), corr.low_masks(),
                  corr.low.mask(corr.non_aligned), pairing)


def train(
    compiled: Any,
    config: TrainConfig,
    arch: ArchConfig = ArchConfig(),
    *,
    checkpoint_dir: Path | None = None,
    resume: bool = False,
    progress: Progress | None = None,
    should_stop: Callable[[int], bool] | None = None,
) -> TrainResult:
    """Train the low-level model for `compiled` until the criterion or the step budget."""
    s = prepare(compiled, config, arch)
    config = dataclasses.replace(config, pairing=s.pairing)  # record the resolved choice
    model = Transformer(s.low_config)
    init_weights(model, torch.Generator().manual_seed(config.seed), output_scale=config.init_output_scale)
    optimizer = Adam(model.parameters(), lr=config.lr, betas=config.betas, weight_decay=config.weight_decay)
    step, history, seconds, resumed_from = 0, [], 0.0, None
    if resume and checkpoint_dir is not None:
        meta = load_checkpoint(checkpoint_dir, model=model, optimizer=optimizer)
        if meta is not None:
            if meta["config"] != config.to_json() or meta["low_config"] != s.low_config:
                raise ConfigError(f"the checkpoint in {checkpoint_dir} was made with other settings; "
                                  "rerun without --resume or with the same options")
            step, history, seconds, resumed_from = meta["step"], meta["history"], meta["seconds"], meta["step"]

    def checkpoint() -> None:
        if checkpoint_dir is not None:
            save_checkpoint(checkpoint_dir, model=model, optimizer=optimizer, meta={
                "config": config.to_json(), "low_config": s.low_config, "step": step,
                "history": history, "seconds": seconds + time.perf_counter() - start})

    start = time.perf_counter()
    met = bool(history) and history[-1]["met_criterion"]
    metrics = history[-1]["metrics"] if history else None
    losses: dict[str, float] = {}
    with _SigintFlag() as interrupted:
        while step < config.max_steps and not met:
            optimizer.lr = _lr(config, step)
            losses = _step(model, optimizer, s, config, compiled.case.task_kind, step)
            step += 1
            if step % config.eval_every == 0 or step == config.max_steps:
                metrics = s.evaluator.evaluate(model)
                met = meets_criterion(metrics, config.judged_metrics, config.criterion)
                history.append({"step": step, "epoch": round(step / config.steps_per_epoch, 3),
                                "lr": optimizer.lr, "losses": losses,
                                "metrics": metrics, "met_criterion": met,
                                "seconds": round(seconds + time.perf_counter() - start, 3)})
                checkpoint()
            if progress is not None:
                progress(step, _postfix(losses, metrics))
            if interrupted.is_set() or (should_stop is not None and should_stop(step)):
                checkpoint()
                raise TrainingInterrupted(f"training interrupted at step {step}")
    if metrics is None:  # a resumed run that had already finished
        metrics = s.evaluator.evaluate(model)
    val, train_seqs = s.evaluator.data.seqs, set(s.train_set.seqs)
    return TrainResult(
        model=model, low_config=s.low_config, correspondence=s.corr, config=config, arch=arch,
        metrics=metrics, history=history, met_criterion=met, steps=step,
        seconds=seconds + time.perf_counter() - start, resumed_from_step=resumed_from,
        evaluator=s.evaluator, train_val_overlap=sum(q in train_seqs for q in val) / len(val),
    )


def _lr(config: TrainConfig, step: int) -> float:
    if config.lr_schedule == "constant":
        return config.lr
    return linear_lr(config.lr, config.lr_final_factor, step, config.max_steps)


def _postfix(losses: dict[str, float], metrics: dict[str, Any] | None) -> dict[str, float]:
    out = {"loss": losses.get("total", float("nan"))}
    if metrics is not None:
        out.update(acc=metrics["accuracy"], IIA=metrics["iia"], SIIA=metrics["siia_min"])
    return out


def _batch(s: _Setup, config: TrainConfig, step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Generator]:
    """Base and source indices of one step, and the step's random stream."""
    epoch, within = divmod(step, config.steps_per_epoch)
    order = epoch_order(config.seed, epoch, len(s.train_set))
    bases = order[within * config.batch_size : (within + 1) * config.batch_size]
    gen = step_generator(config.seed, step)
    return bases, pair_sources(s.train_set.lengths, bases, s.pairing, gen), gen


def _step(model: Transformer, optimizer: Adam, s: _Setup, config: TrainConfig,
          task: str, step: int) -> dict[str, float]:
    bases, sources, gen = _batch(s, config, step)
    d = s.train_set
    tokens, mask, labels, lm = d.tokens[bases], d.mask[bases], d.labels[bases], d.label_mask[bases]
    B = bases.shape[0]
    # IIT: each row intervenes on one high-level node (and its low-level image)
    choice = torch.randint(0, s.high_masks.shape[0], (B,), generator=gen)
    with torch.no_grad():
        hl_logits = interchange(s.high, tokens, mask, d.high_acts[:, sources], s.high_masks[choice])
    iit_target = targets_from_logits(hl_logits, task)
    iit_mask = s.low_masks[choice]
    strict_mask = _strict_mask(s.non_aligned, B, config.strict_sampling, gen)
    weights = {"iit": config.iit_weight, "strict": config.strict_weight, "behavior": config.behavior_weight}
    targets = {"iit": iit_target, "strict": labels, "behavior": labels}
    masks = {"iit": iit_mask, "strict": strict_mask, "behavior": torch.zeros_like(iit_mask)}
    parts = [k for k, w in weights.items() if w > 0]
    if config.scheme == "apph":
        return _summed_step(model, optimizer, parts, tokens, mask, lm, sources, weights, targets, masks, task, d, config)
    out: dict[str, float] = {}
    for part in parts:  # Algorithm 1: one update per loss, each on the current weights
        source_acts = _source_acts(model, d.tokens[sources], d.mask[sources], config)
        logits = interchange(model, tokens, mask, source_acts, masks[part])
        loss = output_loss(logits, targets[part], lm, task) * weights[part]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        out[part] = float(loss.detach())
    out["total"] = sum(out.values())
    return out


def _source_acts(model: Transformer, tokens: torch.Tensor, mask: torch.Tensor, config: TrainConfig) -> torch.Tensor:
    """Node activations of the source run [L, B, T, S, d]. With `source_gradient` the loss is
    differentiated through them too (the full gradient of LOSS(INTINV(M, b, s, V))): strictness
    can then make a non-aligned node itself input-independent, instead of only teaching the rest
    of the model to compensate for it."""
    if config.source_gradient:
        return model(tokens, mask, return_acts=True)[1]
    return node_activations(model, tokens, mask)


def _summed_step(model, optimizer, parts, tokens, mask, lm, sources, weights, targets, masks, task, d, config):
    """Appendix H: one forward over all parts stacked along the batch, one backward."""
    k = len(parts)
    source_acts = _source_acts(model, d.tokens[sources], d.mask[sources], config)
    patch = Patch(mask=torch.cat([masks[p] for p in parts]), values=source_acts.repeat(1, k, 1, 1, 1))
    logits, _ = model(tokens.repeat(k, 1), mask.repeat(k, 1), patch)
    B = tokens.shape[0]
    out, total = {}, 0.0
    for i, part in enumerate(parts):
        loss = output_loss(logits[i * B : (i + 1) * B], targets[part], lm, task) * weights[part]
        out[part] = float(loss.detach())
        total = total + loss
    optimizer.zero_grad()
    total.backward()
    optimizer.step()
    out["total"] = float(total.detach())
    return out


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


class _SigintFlag:
    """While active, Ctrl-C sets a flag the loop checks after each finished step, so the
    checkpoint never holds a half-applied update. Only installed in the main thread."""

    def __enter__(self) -> threading.Event:
        self.event = threading.Event()
        self.previous = None
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, lambda *_: self.event.set())
        return self.event

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
