"""Validation history -> what training changes when progress stalls (recorded in training.json).

A fixed schedule fits the cases it was tuned on. On a case it has not seen, training can stall just
short of the criterion (case 4: every metric at 1.0 but one node's IIA creeping from .993 to .996
over the last 2000 of 4000 steps; with the rules below it meets the criterion at step 2475, after
an emphasis and four lr cycles). Before giving up, training adapts, in this order:

1. emphasis: when the worst judged metric has had no new best for `patience` validations, IIT
   draws its high-level node with probability half uniform, half proportional to each node's IIA
   deficit (1 - IIA), so the lagging node gets more of the data; recomputed at every validation.
2. lr restart: at every further stall within `reach` of the criterion (a plateau just short of it;
   further away a lower lr only slowed learning: case 11's distractors stalled at R² .74 with
   restarts, where the plain schedule met the criterion), a new learning-rate cycle starts at half the current
   cycle's starting lr and moves linearly to the base schedule's final lr (lr_final_factor x lr)
   over the steps that are left: a warm restart when the decayed lr had fallen below its start, a
   drop (as in PyTorch's ReduceLROnPlateau) when it had not. Once restarts have halved the start
   below the final lr (the third restart at the default factor 0.2), a cycle rises from its start
   towards the final lr instead of decaying. The start is floored at LR_FLOOR x lr (1e-4 at the
   default 0.01): without a floor a run that stalls for thousands of steps ended with cycles that
   start near zero (gen-0-4 at lr 0.01: starts down to 1e-11 by step 8000). Flooring at the final
   lr did not change gen-0-4's outcome (IIA min .9718 against .9733 at d_model 16); with
   edge-level strictness, cycles at 1e-12 left cases 20 and 26 short.
3. extension: when the budget runs out first, it grows by `extension` x the configured budget (at
   most `max_extensions` times), with an lr restart; only if the run has come within `reach` of
   the criterion (at its best validation, not only its last: case 11's distractor R² dipped from
   within reach to .82 in the last 300 steps and the run gave up), or is still rising: its best
   worst-metric gained at least `progress` over the last quarter of the configured budget (over
   `patience` validations or more). Generated programs stopped at 4000 steps while still learning
   (gen-0-4: SIIA .78 -> .84 over the last 1000). A run on a plateau (catalogue case 130: a
   distractor's R² flat at .85 from step 425 on) still stops at the budget it was given.

4. rollback: a check whose worst task metric (accuracy, IIA, SIIA) falls COLLAPSE below that of the
   best check so far (once that one reached ANCHOR_FLOOR) is a collapse, not noise: training goes back to
   the weights and optimiser state of that check (siit.trainer keeps them) and goes on at half the lr
   in use. Without it causal-bench-4x4 with edge-level strictness went from accuracy 1.0 and IIA .98
   at step 1425 to accuracy 0.39 by step 1925 and never recovered, and cases 3 and 4 (default
   training) climbed back from collapses for hundreds of steps (1600 and 3225 steps; 1325 and 2250
   with the rollback); 10x10 at lr 0.01 collapsed twice (docs/results.md). A loss that becomes NaN or
   infinite after such a check goes back the same way (siit.trainer raises TrainingDiverged only without
   one, or at the lr floor).

Everything is a pure function of the validation history, so a resumed run makes the same choices,
and the state is plain JSON (saved in checkpoints, written to training.json).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Literal

import torch

from siit.config import TrainConfig

Action = Literal["emphasis", "lr_restart", "extension", "edge_phase", "view_phase", "rollback"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class AdaptState:
    """Where the schedule stands after the validations so far."""

    budget: int
    """Step budget (the configured one, plus extensions)."""
    cycle_start: int = 0
    """Step at which the current learning-rate cycle began (0, or the last restart)."""
    cycle_lr: float
    """Learning rate at cycle_start; it moves linearly to lr_final_factor * lr at `budget` (down
    from above, up from below: see the module docstring)."""
    emphasis: bool = False
    """Whether IIT draws lagging high-level nodes more often."""
    best: float = -math.inf
    """Best worst-metric seen (see `worst_metric`)."""
    since_best: int = 0
    """Validations since `best` was last improved (or since the last action)."""
    extensions: int = 0
    """Budget extensions so far."""
    actions: tuple[dict[str, Any], ...] = ()
    """What was done: {"step", "action", "reason", ...}, in order."""
    trail: tuple[tuple[int, float], ...] = ()
    """(step, best) at every validation that set a new best: how far the run came over any span."""
    edge_siia: float | None = None
    """The lowest non-circuit edge SIIA at the last check that measured edges (edge-level
    strictness). A check whose nodes dip below the criterion measures no edges; without this,
    such a check's worst metric (a node at .9994) set a best that the edges (.96) never beat, and
    every later check counted as a stall: case 11 restarted the lr down to 4e-5 with its last
    edge lagging."""
    views_score: float | None = None
    """1 minus the summed shortfall of a multi-task bundle's views (each view's lower of IIA and SIIA min
    below 1) at the last check that judged them (TrainConfig.view_phase): a sum, so that one view's gain is
    progress while another lags (their minimum sat still while three views took turns); carried to checks
    that do not judge them, as edge_siia is."""
    anchor: tuple[int, float] | None = None
    """(step, worst task metric: task_worst) of the check whose weights training keeps to roll back
    to: the best such check at or above ANCHOR_FLOOR (siit.trainer holds the weights)."""

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["actions"] = [dict(a) for a in self.actions]
        data["best"] = None if math.isinf(self.best) else self.best
        data["trail"] = [list(t) for t in self.trail]
        data["anchor"] = None if self.anchor is None else list(self.anchor)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AdaptState:
        data = dict(data)
        data["best"] = -math.inf if data["best"] is None else float(data["best"])
        data["actions"] = tuple(dict(a) for a in data["actions"])
        data["trail"] = tuple((int(step), float(best)) for step, best in data.get("trail", ()))
        anchor = data.get("anchor")
        data["anchor"] = None if anchor is None else (int(anchor[0]), float(anchor[1]))
        return cls(**data)


def start(config: TrainConfig) -> AdaptState:
    return AdaptState(budget=config.max_steps, cycle_lr=config.lr)


def learning_rate(state: AdaptState, config: TrainConfig, step: int) -> float:
    """The base schedule (constant, or linear to lr_final_factor * lr) inside the current cycle."""
    if config.lr_schedule == "constant":
        return state.cycle_lr
    final = config.lr * config.lr_final_factor
    span = max(state.budget - state.cycle_start - 1, 1)
    frac = min(max(step - state.cycle_start, 0) / span, 1.0)
    return state.cycle_lr + (final - state.cycle_lr) * frac


def worst_metric(metrics: dict[str, Any], config: TrainConfig) -> float:
    """The judged metric furthest below its target, each divided by its target (1 = met). Not
    floored: a distractor's R² climbing from -3 to 0 is progress, not a stall."""
    values = {"accuracy": metrics["accuracy"], "iia": metrics["iia_min"], "siia": metrics["siia_min"],
              "distractor_r2": metrics.get("distractor_r2_min", 0.0), "edge_siia": metrics.get("edge_siia_min")}
    target = {"distractor_r2": config.distractor_r2, "edge_siia": config.edge_criterion}
    # edges are measured only once the nodes meet the criterion (siit.train_checks)
    worst = min(min(values[m] / max(target.get(m, config.criterion), 1e-12), 1.0)
                for m in config.judged_metrics if values[m] is not None)
    views = metrics.get("views_score")
    return worst if views is None else min(worst, views / config.criterion, 1.0)


def with_views(state: AdaptState, config: TrainConfig, metrics: dict[str, Any]) -> tuple[AdaptState, dict[str, Any]]:
    """(state remembering this check's views score, metrics with `views_score`: this check's, or the last
    judged one's; AdaptState.views_score), with TrainConfig.view_phase; unchanged without."""
    if not config.view_phase:
        return state, metrics
    views = metrics.get("views")
    if views:
        score = 1.0 - sum(1.0 - min(v["iia_min"], v["siia_min"], 1.0) for v in views.values())
        return dataclasses.replace(state, views_score=score), {**metrics, "views_score": score}
    return state, metrics if state.views_score is None else {**metrics, "views_score": state.views_score}


def node_weights(state: AdaptState, metrics: dict[str, Any] | None, high_nodes: Sequence[str]) -> torch.Tensor | None:
    """float [N]: IIT's draw probabilities over its interventions (siit.correspondence
    .Correspondence.interventions: the high-level nodes, then any joint groups); None for uniform
    (no emphasis)."""
    if not state.emphasis or metrics is None:
        return None
    per_node = metrics.get("iia_per_node", {})
    deficit = torch.tensor([max(1.0 - float(per_node.get(n, 1.0)), 0.0) for n in high_nodes], dtype=torch.float64)
    uniform = torch.full_like(deficit, 1.0 / len(high_nodes))
    if float(deficit.sum()) == 0.0:
        return None
    return (0.5 * uniform + 0.5 * deficit / deficit.sum()).float()


def with_edges(state: AdaptState, metrics: dict[str, Any]) -> tuple[AdaptState, dict[str, Any]]:
    """(state remembering this check's edge SIIA, metrics with the last measured edge SIIA where
    this check measured none): the edges lag until a check shows otherwise."""
    if metrics.get("edge_siia_min") is not None:
        return dataclasses.replace(state, edge_siia=float(metrics["edge_siia_min"])), metrics
    if state.edge_siia is None:
        return state, metrics
    return state, {**metrics, "edge_siia_min": state.edge_siia}


EDGE_PHASE_LR = 0.5
"""The lr (x the base lr, if the lr in use is lower) of the cycle that starts when the edges
are first measured (edge-level strictness, once the nodes meet the criterion): a new objective.
Without it case 3's node phase, judged on counterfactuals of any length, ran to step ~5000 and its
stalls had halved the lr to the floor; its last edge (input->a0.h3<k>) then sat at SIIA .985 for
3000 steps. Taken from the cycle's start lr instead of the lr in use, it jumped case 4's lr from
0.0045 back to 0.01 at step 3175 and its IIA fell from .97 to .56."""


def after_validation(state: AdaptState, config: TrainConfig, step: int, metrics: dict[str, Any]) -> AdaptState:
    """Track the best worst-metric; on a stall, emphasise lagging nodes, then restart the lr; a new
    cycle when the edges are first measured, or a bundle's views first judged (TrainConfig.view_phase)."""
    first_edges = state.edge_siia is None and metrics.get("edge_siia_min") is not None
    first_views = state.views_score is None and bool(metrics.get("views")) and config.view_phase
    state, metrics = with_edges(state, metrics)
    state, metrics = with_views(state, config, metrics)
    worst = worst_metric(metrics, config)
    if (first_edges or first_views) and config.adaptive:  # a new objective: a new lr cycle
        lr = max(learning_rate(state, config, step), EDGE_PHASE_LR * config.lr)  # never a jump above the lr in use
        state = dataclasses.replace(state, cycle_start=step, cycle_lr=lr, best=worst, trail=state.trail + ((step, worst),))
        action, reason = (("edge_phase", f"edges first measured: worst edge SIIA {state.edge_siia:.4f}") if first_edges
                          else ("view_phase", f"views first judged: views score {state.views_score:.4f}"))
        return _act(state, step, action, reason, lr=lr)
    if worst > state.best + config.stall_tolerance:
        return dataclasses.replace(state, best=worst, since_best=0, trail=state.trail + ((step, worst),))
    state = dataclasses.replace(state, since_best=state.since_best + 1)
    if not config.adaptive or state.since_best < config.patience:
        return state
    reason = f"worst metric {worst:.4f}: no new best (> {state.best:.4f}) for {config.patience} validations"
    if not state.emphasis:
        return _act(dataclasses.replace(state, emphasis=True), step, "emphasis", reason)
    if not _within_reach(worst, config):  # still learning: a lower lr would slow it (case 11's distractors)
        return dataclasses.replace(state, since_best=0)
    return _restart(state, config, step, reason)


def extend(state: AdaptState, config: TrainConfig, step: int, metrics: dict[str, Any] | None) -> AdaptState | None:
    """A longer budget when it has run out short of the criterion, having come within reach of it
    (at the best validation so far: the last one can dip) or still rising; None: give up."""
    if not config.adaptive or state.extensions >= config.max_extensions or metrics is None:
        return None
    state, metrics = with_edges(state, metrics)
    state, metrics = with_views(state, config, metrics)
    worst = worst_metric(metrics, config)
    best = max(worst, state.best)
    gain = rise(state, config, step)
    edges_from = next((a["step"] for a in reversed(state.actions) if a["action"] == "edge_phase"), None)
    if _within_reach(best, config):
        why = f"within {config.reach} of the criterion"
    elif gain is not None and gain >= config.progress:
        why = f"still rising: +{gain:.4f} over the last {round(PROGRESS_SPAN * config.max_steps)} steps"
    elif edges_from is not None and step - edges_from < PROGRESS_SPAN * config.max_steps:
        # the edge phase reset the best: too recent for `rise` to tell (case 4: edges from step 3250)
        why = f"edges first measured at step {edges_from}, too recently to judge"
    else:
        return None
    extra = max(1, round(config.extension * config.max_steps))
    state = dataclasses.replace(state, budget=state.budget + extra, extensions=state.extensions + 1,
                                emphasis=True)
    reason = f"budget spent at worst metric {worst:.4f}, best {best:.4f} ({why}): +{extra} steps"
    return _restart(state, config, step, reason, action="extension")


PROGRESS_SPAN = 0.25
"""The span, as a fraction of the configured budget, over which `rise` measures progress."""


def rise(state: AdaptState, config: TrainConfig, step: int) -> float | None:
    """How much the best worst-metric rose over the last PROGRESS_SPAN of the configured budget;
    None when that span holds fewer than `patience` validations (too few to tell a trend from
    noise) or no validation precedes it."""
    since = step - round(PROGRESS_SPAN * config.max_steps)
    if since < 0 or (step - since) // config.eval_every < config.patience:
        return None
    before = [best for at, best in state.trail if at <= since]
    if not before:
        return None
    return state.trail[-1][1] - before[-1]


def _within_reach(worst: float, config: TrainConfig) -> bool:
    return max(worst, 0.0) >= 1.0 - config.reach  # reach 1: always


LR_FLOOR = 0.01
"""A restart's starting lr never falls below LR_FLOOR x lr: halving at every stall took case 26's
and case 20's cycles (edge-level strictness) to 1e-12 and 2e-8, where nothing moves; their last
lagging edges and IIA (.9989) then stayed short until the budget ran out."""


def _restart(state: AdaptState, config: TrainConfig, step: int, reason: str,
             action: Action = "lr_restart") -> AdaptState:
    lr = max(0.5 * state.cycle_lr, LR_FLOOR * config.lr)
    return _act(dataclasses.replace(state, cycle_start=step, cycle_lr=lr), step, action, reason, lr=lr)


def _act(state: AdaptState, step: int, action: Action, reason: str, **extra: Any) -> AdaptState:
    record = {"step": step, "action": action, "reason": reason, **extra}
    return dataclasses.replace(state, since_best=0, actions=state.actions + (record,))


COLLAPSE = 0.2
"""A check whose worst task metric is this far below the anchor's is a collapse (rollback)."""
ANCHOR_FLOOR = 0.9
"""Checks below this worst task metric are never kept: early training moves by more than COLLAPSE
from check to check on its own."""


def task_worst(metrics: dict[str, Any], config: TrainConfig) -> float:
    """The worst of accuracy, IIA and SIIA, each divided by the criterion: what a collapse destroys.
    Not the edges' SIIA (it drops when the edges are first measured, by design) nor the distractors'
    R² (negative early on, and slow: case 33's reaches its floor at the last check)."""
    return min(min(metrics[m] / config.criterion, 1.0) for m in ("accuracy", "iia_min", "siia_min"))


def is_anchor(state: AdaptState, config: TrainConfig, metrics: dict[str, Any]) -> bool:
    """Whether this check's weights are the ones to keep (the best task_worst so far, at or above
    ANCHOR_FLOOR; a tie keeps the later one)."""
    worst = task_worst(metrics, config)
    return config.adaptive and worst >= ANCHOR_FLOOR and (state.anchor is None or worst >= state.anchor[1])


def collapsed(state: AdaptState, config: TrainConfig, metrics: dict[str, Any]) -> bool:
    """Whether this check fell COLLAPSE or more below the kept weights' task_worst."""
    return config.adaptive and state.anchor is not None and task_worst(metrics, config) <= state.anchor[1] - COLLAPSE


def collapse_reason(state: AdaptState, config: TrainConfig, metrics: dict[str, Any]) -> str:
    assert state.anchor is not None
    return (f"worst task metric {task_worst(metrics, config):.4f}, {COLLAPSE} or more below "
            f"{state.anchor[1]:.4f} at step {state.anchor[0]}: back to that step's weights")


def can_roll_back_divergence(state: AdaptState, config: TrainConfig, step: int) -> bool:
    """Whether a loss that became NaN or infinite can go back to the anchor: there is one, and the lr
    in use is above the floor (a run that diverges again at the floor has nowhere lower to go)."""
    return (config.adaptive and state.anchor is not None
            and learning_rate(state, config, step) > LR_FLOOR * config.lr * (1 + 1e-9))


def rollback(state: AdaptState, config: TrainConfig, step: int, reason: str) -> AdaptState:
    """The schedule once the anchor's weights are restored (after a collapse, collapse_reason, or a loss
    that became NaN): a new lr cycle at half the lr in use (floored as restarts are), recorded with why."""
    assert state.anchor is not None
    lr = max(0.5 * learning_rate(state, config, step), LR_FLOOR * config.lr)
    return _act(dataclasses.replace(state, cycle_start=step, cycle_lr=lr), step, "rollback", reason, lr=lr,
                to_step=state.anchor[0])
