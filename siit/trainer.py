"""A high-level task (siit.high_level; a compiled case is one) + TrainConfig -> a low-level
transformer trained with (S)IIT to criterion.

`train` reads like the pipeline: architecture, correspondence, data and distractor tasks
(siit.train_setup.prepare), model and optimiser, (resume), steps (siit.train_step) with periodic
checks (siit.train_checks) and checkpoints until the criterion
or the step budget (adapted when progress stalls: siit.adaptation), then the function-preserving
head rescale and a last validation in every input shape.

Schemes: "apph" (Appendix H): one source run, one base run of 3 x batch rows (IIT patch,
strictness patch with every non-aligned node ablated w.p. 0.5, no patch), one backward of
w_iit * L_iit + w_siit * L_siit + w_beh * L_behaviour + the realism losses of the source run
(distractors of the out-of-circuit nodes, norm ceiling of the circuit nodes; siit.distractors).
"alg1" (Algorithm 1): three optimiser steps per batch (IIT, then strictness with one non-aligned
node per row, then behaviour), each on fresh activations of the current weights.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from eval.core.device import DeviceRecord, device_record
from siit import adaptation, train_checks, train_step
from siit.adaptation import AdaptState
from siit.busy_components import component_name
from siit.checkpoint import load_checkpoint, restore_training_state, save_checkpoint, training_state
from siit.config import ArchConfig, ConfigError, TrainConfig
from siit.correspondence import Correspondence
from siit.edges import EdgeLayout, edge_weights
from siit.high_level import as_task
from siit.metrics import Evaluator, meets_criterion
from siit.optim import Adam
from siit.reparametrize import rescale_heads
from siit.train_setup import Setup, Trainee, prepare
from siit.initialise import init_weights
from siit.interventions import node_activations
from siit.transformer import Transformer

__all__ = ["Progress", "TrainResult", "TrainingDiverged", "TrainingInterrupted", "prepare", "train"]

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
    logit_template: float | None = None
    """The task's logit template margin (siit.losses.template_loss instead of cross-entropy), or None."""
    circuit_ratios: dict[str, float] | None = None
    """With busy components: the circuit's held participation ratios per type that their shares
    followed at the end ({"heads": .., "mlps": ..}; siit.busy_ranks), else None."""
    device: DeviceRecord | None = None
    """Where it trained (device, its name, dtype, torch threads): float results differ by device."""
    final_evaluation: tuple[torch.Tensor, dict[str, Any]] | None = None
    """(node activations, Evaluator.evaluate's metrics) of `model` on `evaluator`, as the final
    metrics were computed from them: siit.validation.validate_model takes them instead of running
    the same passes again."""


@dataclasses.dataclass
class _Run:
    """The state of one training run as the loop advances it (what a checkpoint holds)."""

    trainee: Trainee
    optimizer: Adam
    adapt: AdaptState
    checkpoint_dir: Path | None
    step: int = 0
    history: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    """Wall time of earlier (resumed) runs."""
    resumed_from: int | None = None
    start: float = dataclasses.field(default_factory=time.perf_counter)
    metrics: dict[str, Any] | None = None
    met: bool = False
    losses: dict[str, float] = dataclasses.field(default_factory=dict)
    emphasis: torch.Tensor | None = None
    edge_emphasis: torch.Tensor | None = None
    """Strictness's draw weights over non-circuit edges (siit.edges.edge_weights), from the last check."""
    anchor: _Anchor | None = None
    """The weights a collapse rolls back to (siit.adaptation.rollback), those of AdaptState.anchor's check."""

    def elapsed(self) -> float:
        return self.seconds + time.perf_counter() - self.start


@dataclasses.dataclass(frozen=True)
class _Anchor:
    """A check's trainee weights and optimiser state (copies), and its metrics."""

    tensors: dict[str, torch.Tensor]
    """siit.checkpoint.training_state: the trainee's weights and the optimiser's moments."""
    optimizer_steps: int
    metrics: dict[str, Any]

    @classmethod
    def of(cls, run: _Run) -> _Anchor:
        return cls(training_state(run.trainee, run.optimizer), run.optimizer.steps, copy.deepcopy(run.metrics))


def _roll_back(run: _Run, config: TrainConfig, reason: str) -> None:
    """Back to the anchor's weights, optimiser state and metrics; the schedule records why
    (siit.adaptation.rollback)."""
    assert run.anchor is not None
    run.adapt = adaptation.rollback(run.adapt, config, run.step, reason)
    restore_training_state(run.anchor.tensors, run.trainee, run.optimizer, run.anchor.optimizer_steps)
    run.metrics = copy.deepcopy(run.anchor.metrics)


def train(
    task: Any,
    config: TrainConfig,
    arch: ArchConfig = ArchConfig(),
    *,
    checkpoint_dir: Path | None = None,
    resume: bool = False,
    progress: Progress | None = None,
    should_stop: Callable[[int], bool] | None = None,
    device: torch.device = torch.device("cpu"),
) -> TrainResult:
    """Train the low-level model for `task` (a HighLevelTask or a compiled case) until the
    criterion or the step budget, on `device` (eval.core.device.resolve_device; the model is
    initialised on the CPU from the seed, then moved, so every device starts from the same weights)."""
    task = as_task(task)
    s = prepare(task, config, arch, device=device)
    config = dataclasses.replace(config, pairing=s.pairing)  # record the resolved choice
    run = _start(s, config, checkpoint_dir, resume)
    _loop(run, s, config, task.case.task_kind, progress, should_stop)
    return _finish(run, s, config, arch)


def _start(s: Setup, config: TrainConfig, checkpoint_dir: Path | None, resume: bool) -> _Run:
    """Seeded model and probes, the optimiser, and the state of a resumed run if asked."""
    model = Transformer(s.low_config)
    gen = torch.Generator().manual_seed(config.seed)
    init_weights(model, gen, output_scale=config.init_output_scale)
    trainee = Trainee(model, len(s.targets.distractors) if s.targets else 0,
                      len(s.components.node) if s.components is not None else 0)
    with torch.no_grad():
        trainee.probes.normal_(generator=gen)
        if trainee.component_probes is not None:  # drawn after the rest: the other draws are unchanged
            trainee.component_probes.normal_(generator=gen)
    trainee.to(s.device)
    optimizer = Adam(trainee.parameters(), lr=config.lr, betas=config.betas, weight_decay=config.weight_decay)
    run = _Run(trainee, optimizer, adaptation.start(config), checkpoint_dir)
    extra: dict[str, torch.Tensor] = {}
    meta = load_checkpoint(checkpoint_dir, model=trainee, optimizer=optimizer, extra=extra) \
        if resume and checkpoint_dir is not None else None
    if meta is not None:
        if meta["config"] != config.to_json() or meta["low_config"] != s.low_config:
            raise ConfigError(f"the checkpoint in {checkpoint_dir} was made with other settings; "
                              "rerun without --resume or with the same options")
        run.step, run.history, run.seconds, run.resumed_from = meta["step"], meta["history"], meta["seconds"], meta["step"]
        run.adapt = AdaptState.from_json(meta["adaptation"])
        run.met = bool(run.history) and run.history[-1]["met_criterion"]
        run.metrics = run.history[-1]["metrics"] if run.history else None
        if meta.get("anchor") is not None:
            run.anchor = _Anchor({k: v.to(s.device) for k, v in extra.items()}, meta["anchor"]["optimizer_steps"],
                                 meta["anchor"]["metrics"])
    run.emphasis = adaptation.node_weights(run.adapt, run.metrics, s.corr.interventions)
    run.edge_emphasis = _edge_emphasis(s, run.history)
    run.start = time.perf_counter()
    return run


def _loop(run: _Run, s: Setup, config: TrainConfig, task_kind: str, progress: Progress | None,
          should_stop: Callable[[int], bool] | None) -> None:
    """Steps and periodic checks until the criterion or the (adapted) budget."""
    with _InterruptFlag() as interrupted:
        while not run.met:
            if run.step >= run.adapt.budget:
                extended = adaptation.extend(run.adapt, config, run.step, run.metrics)
                if extended is None:
                    break
                run.adapt = extended
                run.emphasis = adaptation.node_weights(run.adapt, run.metrics, s.corr.interventions)
            run.optimizer.lr = adaptation.learning_rate(run.adapt, config, run.step)
            run.losses = train_step.run_step(run.trainee, run.optimizer, s, config, task_kind, run.step, run.emphasis,
                                             run.edge_emphasis)
            run.step += 1
            if not all(math.isfinite(v) for v in run.losses.values()):
                bad = ", ".join(f"{k} {v}" for k, v in run.losses.items() if not math.isfinite(v))
                if run.anchor is None or not adaptation.can_roll_back_divergence(run.adapt, config, run.step):
                    raise TrainingDiverged(f"training diverged at step {run.step} ({bad}; lr {run.optimizer.lr:g})")
                _roll_back(run, config,
                           f"loss {bad} at lr {run.optimizer.lr:g}: back to step {run.adapt.anchor[0]}'s weights")
                run.losses = {k: v for k, v in run.losses.items() if math.isfinite(v)}  # history is strict JSON
            if run.step % config.eval_every == 0 or run.step == run.adapt.budget:
                _check(run, s, config)
            if progress is not None:
                progress(run.step, _postfix(run.losses, run.metrics, run.adapt.budget))
            if interrupted.is_set() or (should_stop is not None and should_stop(run.step)):
                _checkpoint(run, s, config)
                raise TrainingInterrupted(f"training interrupted at step {run.step}")


def _edge_emphasis(s: Setup, history: list[dict[str, Any]]) -> torch.Tensor | None:
    """Edge draw weights from the last check that measured the edges: a check whose nodes dip
    below the criterion measures none (siit.train_checks), and forgetting the lagging edges then
    left them uniform for the next 25 steps (case 20: every other check)."""
    layout = EdgeLayout(s.low_config["n_layers"], s.low_config["n_heads"])
    return edge_weights(layout, s.non_circuit_edges, train_checks.last_edge_check(history))


def _check(run: _Run, s: Setup, config: TrainConfig) -> None:
    """A periodic check, what it changes in the schedule, its history record and a checkpoint."""
    lagging = train_checks.lagging_edges(run.history, config)
    run.metrics, run.met, checked = train_checks.check(run.trainee, s, config, lagging)
    record = {"step": run.step, "epoch": round(run.step / config.steps_per_epoch, 3), "lr": run.optimizer.lr,
              "losses": run.losses, "metrics": run.metrics}
    if not run.met and run.anchor is not None and adaptation.collapsed(run.adapt, config, run.metrics):
        record["rolled_back_to"] = run.adapt.anchor[0]  # the history keeps what this check saw
        _roll_back(run, config, adaptation.collapse_reason(run.adapt, config, run.metrics))
    elif not run.met:
        run.adapt = adaptation.after_validation(run.adapt, config, run.step, run.metrics)
        if adaptation.is_anchor(run.adapt, config, run.metrics):
            run.adapt = dataclasses.replace(run.adapt, anchor=(run.step, adaptation.task_worst(run.metrics, config)))
            run.anchor = _Anchor.of(run)
    if not run.met:
        run.emphasis = adaptation.node_weights(run.adapt, run.metrics, s.corr.interventions)
    run.history.append({**record, "checked_on": checked, "met_criterion": run.met, "seconds": round(run.elapsed(), 3),
                        "device": str(s.device)})  # a resumed run may continue on another device
    run.edge_emphasis = _edge_emphasis(s, run.history)
    _checkpoint(run, s, config)


def _checkpoint(run: _Run, s: Setup, config: TrainConfig) -> None:
    if run.checkpoint_dir is not None:
        anchor = None if run.anchor is None else {"optimizer_steps": run.anchor.optimizer_steps,
                                                  "metrics": run.anchor.metrics}
        save_checkpoint(run.checkpoint_dir, model=run.trainee, optimizer=run.optimizer, meta={
            "config": config.to_json(), "low_config": s.low_config, "step": run.step, "history": run.history,
            "seconds": run.elapsed(), "adaptation": run.adapt.to_json(), "anchor": anchor},
            extra=None if run.anchor is None else run.anchor.tensors)


def _finish(run: _Run, s: Setup, config: TrainConfig, arch: ArchConfig) -> TrainResult:
    """The head rescale, the final numbers of the model as written (every input shape) and the result."""
    model = run.trainee.model
    head_scales: dict[str, list[float]] = {}
    if config.rescale_heads:
        head_scales = rescale_heads(model, s.corr.low, seed=s.case_seed, circuit=s.corr.aligned)
    d = s.final_evaluator.data
    acts = node_activations(model, d.tokens, d.mask, d.present)
    evaluation = (acts, s.final_evaluator.evaluate(model, acts=acts))
    metrics = train_checks.evaluate_trainee(run.trainee, s, s.final_evaluator,
                                            evaluation=(acts, copy.deepcopy(evaluation[1])))
    met = run.met and meets_criterion(metrics, config.judged_metrics, config.criterion, config.distractor_r2,
                                      config.edge_criterion)
    val, train_seqs = set(s.final_evaluator.data.seqs), set(s.train_set.seqs)
    r2 = metrics.get("distractor_r2_per_node", {})
    distractors = [dict(d.to_json(), r2=r2.get(d.node), target_gain=[round(float(g), 6) for g in gain],
                        **_components_record(d, r2, shares))
                   for d, gain, shares in zip(s.targets.distractors if s.targets else (), run.trainee.loudness.gain,
                                              _final_shares(run.trainee, s))]
    return TrainResult(
        model=model, low_config=s.low_config, correspondence=s.corr, config=config, arch=arch,
        metrics=metrics, history=run.history, met_criterion=met, steps=run.step, seconds=run.elapsed(),
        resumed_from_step=run.resumed_from, evaluator=s.final_evaluator,
        train_val_overlap=sum(q in train_seqs for q in val) / len(val), distractors=distractors,
        head_scales=head_scales, case_seed=s.case_seed, adaptation=run.adapt,
        last_position_weight=s.last_position_weight, logit_template=s.logit_template,
        circuit_ratios=None if run.trainee.ranks is None else dict(zip(("heads", "mlps"), (
            round(float(v), 6) for v in run.trainee.ranks.held))),
        device=device_record(s.device), final_evaluation=evaluation,
    )


def _postfix(losses: dict[str, float], metrics: dict[str, Any] | None, budget: int) -> dict[str, float]:
    out = {"budget": budget, "loss": losses.get("total", float("nan"))}
    if metrics is not None:
        out.update(acc=metrics["accuracy"], IIA=metrics["iia"], SIIA=metrics["siia_min"])
        if "distractor_r2_min" in metrics:
            out.update(R2=metrics["distractor_r2_min"])
        if "saturated_min" in metrics:
            out.update(saturated=metrics["saturated_min"])
    return out


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


def _final_shares(trainee: Trainee, s: Setup) -> list[list[float]]:
    """Per busy node, its further components' variance shares at the end of training (siit.busy_ranks)."""
    n = len(s.targets.distractors) if s.targets else 0
    shares = trainee.component_shares(s)[0]
    out: list[list[float]] = [[] for _ in range(n)]
    if shares is not None:
        for i, v in zip(s.components.node.tolist(), shares.tolist()):
            out[i].append(round(v, 6))
    return out


def _components_record(d: Any, r2: dict[str, float], shares: list[float]) -> dict[str, Any]:
    """A distractor's further components in training.json: their final shares and R² (None: a share
    under MIN_SHARE, not judged); nothing for a one-scalar node."""
    if not d.components:
        return {}
    return {"component_shares": shares, "component_r2": [r2.get(component_name(d.node, j)) for j in range(len(shares))]}
