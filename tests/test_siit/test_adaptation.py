"""Adaptive training (siit.adaptation): stall detection, lagging-node emphasis, lr restarts and
budget extensions; pure rules first, then a short training run that must adapt, record what it
did, and resume to the same weights."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from siit import adaptation
from siit.adaptation import AdaptState
from siit.config import ConfigError, TrainConfig
from siit.trainer import TrainingInterrupted, train

SMALL = dict(n_train=256, n_val=128, batch_size=32, epochs=3, eval_every=4)


def _metrics(iia: dict[str, float], accuracy: float = 1.0, siia: float = 1.0, r2: float = 1.0) -> dict:
    return {"accuracy": accuracy, "iia_min": min(iia.values()), "siia_min": siia, "iia_per_node": iia,
            "distractor_r2_min": r2}


@given(step=st.integers(0, 10_000), epochs=st.integers(1, 50), factor=st.floats(0.05, 1.0))
@settings(max_examples=50, deadline=None)
def test_without_actions_the_schedule_is_the_configured_linear_decay(step: int, epochs: int, factor: float) -> None:
    config = TrainConfig(epochs=epochs, lr_final_factor=factor)
    n = config.max_steps
    expected = config.lr * (1.0 + (factor - 1.0) * min(step / max(n - 1, 1), 1.0))
    assert adaptation.learning_rate(adaptation.start(config), config, step) == pytest.approx(expected)


def test_a_stall_first_emphasises_then_restarts_the_learning_rate() -> None:
    config = TrainConfig(patience=3)
    state = adaptation.start(config)
    flat = _metrics({"a": 1.0, "b": 0.99})
    state = adaptation.after_validation(state, config, 25, flat)  # first best
    for i in range(3):
        assert not state.actions
        state = adaptation.after_validation(state, config, 50 + 25 * i, flat)
    assert [a["action"] for a in state.actions] == ["emphasis"] and state.emphasis
    assert state.cycle_lr == config.lr
    for i in range(3):
        state = adaptation.after_validation(state, config, 200 + 25 * i, flat)
    assert [a["action"] for a in state.actions] == ["emphasis", "lr_restart"]
    assert state.cycle_start == 250 and state.cycle_lr == pytest.approx(config.lr / 2)
    assert adaptation.learning_rate(state, config, 250) == pytest.approx(config.lr / 2)
    assert adaptation.learning_rate(state, config, state.budget - 1) == pytest.approx(config.lr * config.lr_final_factor)


def test_restarts_never_start_below_the_floor() -> None:
    config = TrainConfig(patience=1)
    state = adaptation.after_validation(adaptation.start(config), config, 0, _metrics({"a": 0.99}))
    for i in range(1, 40):
        state = adaptation.after_validation(state, config, 25 * i, _metrics({"a": 0.99}))
    restarts = [a["lr"] for a in state.actions if a["action"] == "lr_restart"]
    assert len(restarts) > 10 and restarts[:3] == pytest.approx([config.lr / 2, config.lr / 4, config.lr / 8])
    assert min(restarts) == pytest.approx(adaptation.LR_FLOOR * config.lr)


def test_a_check_that_measured_no_edges_keeps_the_last_edge_siia() -> None:
    config = TrainConfig(patience=2, strict_edges=True)
    with_edges = {**_metrics({"a": 1.0}), "edge_siia_min": 0.96}
    nodes_dip = _metrics({"a": 0.9994})  # nodes short: the check measured no edges
    stalled = dataclasses.replace(adaptation.start(config), cycle_lr=config.lr / 64, best=0.9999)
    state = adaptation.after_validation(stalled, config, 25, with_edges)
    # the first measurement of the edges starts their own cycle, at half the base lr
    assert state.actions[-1]["action"] == "edge_phase" and state.cycle_lr == config.lr * adaptation.EDGE_PHASE_LR
    assert state.cycle_start == 25 and state.since_best == 0
    # a cycle whose lr has decayed is not pushed back above the lr in use, nor above half the base
    fresh = adaptation.start(config)
    late = fresh.budget - 1  # lr decayed to lr_final_factor x lr (0.2 of it), below half the base
    restarted = adaptation.after_validation(fresh, config, late, with_edges)
    assert restarted.cycle_lr == config.lr * adaptation.EDGE_PHASE_LR < fresh.cycle_lr
    early = adaptation.after_validation(fresh, config, 1, with_edges)  # lr still near the base
    assert early.cycle_lr == pytest.approx(adaptation.learning_rate(fresh, config, 1))
    # a budget that runs out soon after the edges were first measured is extended; long after, not
    budget = config.max_steps
    young = adaptation.after_validation(fresh, config, budget - 25, {**with_edges, "edge_siia_min": 0.5})
    extended = adaptation.extend(young, config, budget, {**with_edges, "edge_siia_min": 0.5})
    assert extended is not None and "edges first measured" in extended.actions[-1]["reason"]
    old = adaptation.after_validation(fresh, config, budget // 2, {**with_edges, "edge_siia_min": 0.5})
    assert adaptation.extend(old, config, budget, {**with_edges, "edge_siia_min": 0.5}) is None
    assert state.best == pytest.approx(0.96 / config.edge_criterion) and state.edge_siia == 0.96
    state = adaptation.after_validation(state, config, 50, nodes_dip)
    # the dip is no new best: the edges still lag at .96 (before, .9994 became the best)
    assert state.best == pytest.approx(0.96 / config.edge_criterion) and state.since_best == 1
    state = adaptation.after_validation(state, config, 75, {**with_edges, "edge_siia_min": 0.98})
    assert state.best == pytest.approx(0.98 / config.edge_criterion) and state.since_best == 0
    assert AdaptState.from_json(state.to_json()) == state


def test_a_bundles_views_start_a_cycle_and_count_in_the_stall_test_only_with_view_phase() -> None:
    """TrainConfig.view_phase: the first check that judges a bundle's views starts an lr cycle (as edges
    do), their summed shortfall counts as a metric (carried to checks that judge none), and a view that
    improves is progress while another lags; without it the pooled metrics (1.0 while views lag) make every
    check a stall."""
    views = lambda siia, other=0.995: {**_metrics({"a": 1.0}), "views": {  # noqa: E731
        "v": {"iia_min": 1.0, "siia_min": siia, "met": False}, "w": {"iia_min": other, "siia_min": 1.0, "met": False}}}
    pooled_only = _metrics({"a": 0.9996})  # the pooled check dipped: no view judged
    config = TrainConfig(patience=2, view_phase=True)
    stalled = dataclasses.replace(adaptation.start(config), cycle_lr=config.lr / 64, best=1.0)
    state = adaptation.after_validation(stalled, config, 25, views(0.98))
    assert state.actions[-1]["action"] == "view_phase" and state.cycle_lr == config.lr * adaptation.EDGE_PHASE_LR
    assert state.best == pytest.approx(0.975 / config.criterion) and state.views_score == pytest.approx(0.975)
    state = adaptation.after_validation(state, config, 50, pooled_only)  # carried: the views still lag
    assert state.since_best == 1 and state.best == pytest.approx(0.975 / config.criterion)
    state = adaptation.after_validation(state, config, 75, views(0.99))
    assert state.since_best == 0 and state.best == pytest.approx(0.985 / config.criterion)
    state = adaptation.after_validation(state, config, 100, views(0.99, other=0.998))  # the other view's gain
    assert state.since_best == 0 and state.best == pytest.approx(0.988 / config.criterion)
    assert AdaptState.from_json(state.to_json()) == state
    off = TrainConfig(patience=2)
    state = dataclasses.replace(adaptation.start(off), best=1.0)
    for i in range(6):  # the views never count: each check is a stall of the pooled 1.0
        state = adaptation.after_validation(state, off, 25 * (i + 1), views(0.98 + 0.003 * i))
    assert [a["action"] for a in state.actions] == ["emphasis", "lr_restart", "lr_restart"] and state.views_score is None


def test_progress_resets_the_stall_count_and_adaptive_false_never_acts() -> None:
    config = TrainConfig(patience=2)
    state = adaptation.start(config)
    for i, value in enumerate([0.90, 0.91, 0.92, 0.93, 0.94]):
        state = adaptation.after_validation(state, config, i, _metrics({"a": value}))
    assert not state.actions and state.since_best == 0
    off = TrainConfig(patience=2, adaptive=False)
    state = adaptation.start(off)
    for i in range(10):
        state = adaptation.after_validation(state, off, i, _metrics({"a": 0.5}))
    assert not state.actions and not state.emphasis
    assert adaptation.extend(state, off, off.max_steps, _metrics({"a": 0.999})) is None


def test_emphasis_draws_the_lagging_node_most() -> None:
    state = AdaptState(budget=100, cycle_lr=0.01, emphasis=True)
    w = adaptation.node_weights(state, _metrics({"a": 1.0, "b": 0.99, "c": 0.97}), ["a", "b", "c"])
    assert w is not None and float(w.sum()) == pytest.approx(1.0)
    assert w[2] > w[1] > w[0] > 0  # every node keeps some IIT data
    assert w[0] == pytest.approx(0.5 / 3)
    assert adaptation.node_weights(state, _metrics({"a": 1.0, "b": 1.0}), ["a", "b"]) is None
    assert adaptation.node_weights(AdaptState(budget=100, cycle_lr=0.01), _metrics({"a": 0.5}), ["a"]) is None


def test_extension_only_within_reach_and_at_most_max_extensions() -> None:
    config = TrainConfig(max_extensions=2, reach=0.02, extension=0.5)
    state = adaptation.start(config)
    assert adaptation.extend(state, config, config.max_steps, _metrics({"a": 0.95})) is None  # out of reach
    close = _metrics({"a": 0.995})
    once = adaptation.extend(state, config, config.max_steps, close)
    assert once is not None and once.budget == config.max_steps + round(0.5 * config.max_steps)
    assert once.emphasis and once.cycle_start == config.max_steps and once.actions[-1]["action"] == "extension"
    twice = adaptation.extend(once, config, once.budget, close)
    assert twice is not None and adaptation.extend(twice, config, twice.budget, close) is None


def test_extension_counts_the_best_validation_not_only_the_last() -> None:
    config = TrainConfig(max_extensions=2, reach=0.02, extension=0.5)
    state = adaptation.start(config)
    state = adaptation.after_validation(state, config, 25, _metrics({"a": 0.99}))  # came within reach
    dipped = _metrics({"a": 1.0}, r2=0.82)  # then a distractor's R² fell: 0.82 / 0.9 = 0.91
    assert adaptation.worst_metric(dipped, config) < 1 - config.reach
    later = adaptation.extend(state, config, config.max_steps, dipped)
    assert later is not None and later.extensions == 1 and "best 0.9900" in later.actions[-1]["reason"]
    never = adaptation.after_validation(adaptation.start(config), config, 25, _metrics({"a": 0.9}))
    assert adaptation.extend(never, config, config.max_steps, dipped) is None  # never within reach


def _run(config: TrainConfig, values: list[float]) -> AdaptState:
    """The adaptation state after one validation every eval_every steps with these SIIAs."""
    state = adaptation.start(config)
    for i, v in enumerate(values, start=1):
        state = adaptation.after_validation(state, config, i * config.eval_every, _metrics({"a": 1.0}, siia=v))
    return state


def test_a_run_still_rising_is_extended_and_one_on_a_plateau_is_not() -> None:
    """Out of reach at the budget: extended when the best rose by >= `progress` over the last
    quarter of the budget (gen-0-4: .78 -> .84), not when it was flat there (case 130: flat at .85
    of the target from early on), nor when the quarter holds fewer than `patience` validations."""
    config = TrainConfig(max_extensions=2, reach=0.02, progress=0.02, extension=0.5, epochs=250)
    n = config.max_steps // config.eval_every  # validations in the budget
    rising = _run(config, [0.5 + 0.34 * i / n for i in range(1, n + 1)])  # .50 -> .84, +.085 in the last quarter
    last = _metrics({"a": 1.0}, siia=0.84)
    assert adaptation.rise(rising, config, config.max_steps) == pytest.approx(0.085, abs=2e-3)
    more = adaptation.extend(rising, config, config.max_steps, last)
    assert more is not None and more.extensions == 1 and "still rising" in more.actions[-1]["reason"]
    flat = _run(config, [0.85] + [0.85 + (i % 2) * 1e-4 for i in range(n - 1)])
    assert adaptation.rise(flat, config, config.max_steps) == pytest.approx(0.0)
    assert adaptation.extend(flat, config, config.max_steps, _metrics({"a": 1.0}, siia=0.85)) is None
    slow = TrainConfig(max_extensions=2, progress=0.02, epochs=250, eval_every=200)  # 5 validations a quarter
    assert adaptation.rise(_run(slow, [0.5 + 0.01 * i for i in range(20)]), slow, slow.max_steps) is None
    strict = TrainConfig(max_extensions=2, reach=0.02, progress=0.1, extension=0.5, epochs=250)
    assert adaptation.extend(_run(strict, [0.5 + 0.34 * i / n for i in range(1, n + 1)]), strict,
                             strict.max_steps, last) is None  # +.085 < .1


def test_state_round_trips_through_json() -> None:
    config = TrainConfig(patience=1)
    state = adaptation.start(config)
    for i in range(4):
        state = adaptation.after_validation(state, config, i, _metrics({"a": 0.9}))
    assert AdaptState.from_json(state.to_json()) == state
    fresh = adaptation.start(config)
    assert AdaptState.from_json(fresh.to_json()) == fresh


@pytest.mark.parametrize("field, value", [("patience", 0), ("max_extensions", -1), ("reach", 2.0), ("progress", -0.5),
                                          ("extension", float("nan")), ("stall_tolerance", -0.1)])
def test_bad_adaptation_options_are_refused(field: str, value) -> None:
    with pytest.raises(ConfigError):
        TrainConfig(**{field: value})


def test_far_from_the_criterion_a_stall_keeps_the_learning_rate() -> None:
    """Restarts only on a plateau within reach: case 11's distractors (R² ~.7) learned too slowly
    with them. A negative R² climbing towards 0 is progress, not a stall."""
    config = TrainConfig(patience=2, reach=0.02)
    state = adaptation.start(config)
    for i in range(12):
        state = adaptation.after_validation(state, config, i, _metrics({"a": 1.0}, r2=0.6))
    assert [a["action"] for a in state.actions] == ["emphasis"] and state.cycle_lr == config.lr
    rising = adaptation.start(config)
    for i, r2 in enumerate([-3.0, -2.0, -1.0, -0.5, -0.1]):
        rising = adaptation.after_validation(rising, config, i, _metrics({"a": 1.0}, r2=r2))
    assert not rising.actions


# distractor R² of exactly 1 is out of reach, so the run never meets the criterion and must adapt:
# stall_tolerance 1 makes every validation after the first a stall, reach 1 makes every stall and
# every budget end count as close
ADAPTING = dict(SMALL, patience=1, stall_tolerance=1.0, distractor_r2=1.0, reach=1.0, max_extensions=1)


def test_a_stalled_run_adapts_records_it_and_resumes_to_the_same_weights(compiled, tmp_path: Path) -> None:
    cc = compiled("33")
    config = TrainConfig(**ADAPTING)
    full = train(cc, config)
    actions = [a["action"] for a in full.adaptation.actions]
    assert actions[0] == "emphasis" and "lr_restart" in actions and "extension" in actions
    assert full.steps == config.max_steps + round(config.extension * config.max_steps) and not full.met_criterion
    lrs = [h["lr"] for h in full.history]
    assert any(b > a for a, b in zip(lrs, lrs[1:]))  # a restart raised the learning rate
    ckpt = tmp_path / "ckpt"
    stop = full.adaptation.actions[1]["step"] + 1  # after emphasis and a restart
    with pytest.raises(TrainingInterrupted):
        train(cc, config, checkpoint_dir=ckpt, should_stop=lambda step: step == stop)
    resumed = train(cc, config, checkpoint_dir=ckpt, resume=True)
    assert resumed.adaptation == full.adaptation
    sa, sb = full.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_a_collapse_is_undone_only_below_the_anchor_by_the_margin() -> None:
    """The anchor is the best check by its worst task metric (accuracy, IIA, SIIA) at or above
    ANCHOR_FLOOR; a check COLLAPSE below it rolls back, at half the lr in use; edges (measured late,
    low by design) and distractor R² never count."""
    config = TrainConfig()
    state = adaptation.start(config)
    assert not adaptation.is_anchor(state, config, _metrics({"a": adaptation.ANCHOR_FLOOR - 0.01}))
    high = _metrics({"a": 0.98})
    assert adaptation.is_anchor(state, config, high)
    state = dataclasses.replace(state, anchor=(100, adaptation.task_worst(high, config)))
    assert not adaptation.is_anchor(state, config, _metrics({"a": 0.97}))
    assert adaptation.is_anchor(state, config, _metrics({"a": 0.98}))  # a tie keeps the later check
    assert not adaptation.collapsed(state, config, _metrics({"a": 0.98 - adaptation.COLLAPSE + 0.01}))
    assert not adaptation.collapsed(state, config, {**high, "edge_siia_min": 0.2, "distractor_r2_min": -3.0})
    low = _metrics({"a": 0.6}, accuracy=0.7)
    assert adaptation.collapsed(state, config, low)
    assert not adaptation.collapsed(state, TrainConfig(adaptive=False), low)
    lr_in_use = adaptation.learning_rate(state, config, 500)
    after = adaptation.rollback(state, config, 500, adaptation.collapse_reason(state, config, low))
    assert "0.6000, 0.2 or more below 0.9800 at step 100" in after.actions[-1]["reason"]
    assert after.actions[-1]["action"] == "rollback" and after.actions[-1]["to_step"] == 100
    assert after.cycle_start == 500 and after.cycle_lr == pytest.approx(0.5 * lr_in_use)
    assert AdaptState.from_json(after.to_json()) == after


def _sabotage_at(step: int, nan: bool = False):
    """run_step that, after step `step`, overwrites every weight with noise (a collapse on demand),
    or with nan=True makes that step's loss NaN and its weights with it (a divergence on demand)."""
    from siit import train_step

    real = train_step.run_step

    def run_step(trainee, optimizer, s, config, task, at, *rest):
        out = real(trainee, optimizer, s, config, task, at, *rest)
        if at == step - 1:
            gen = torch.Generator().manual_seed(0)
            with torch.no_grad():
                for p in trainee.model.parameters():
                    p.copy_(torch.full_like(p, float("nan")) if nan else 3 * torch.randn(p.shape, generator=gen))
            if nan:
                out = {**out, "total": float("nan")}
        return out

    return run_step


def test_a_loss_that_becomes_nan_goes_back_to_the_anchor_and_without_one_stops(
        compiled, monkeypatch: pytest.MonkeyPatch) -> None:
    from siit import train_step
    from siit.trainer import TrainingDiverged

    cc = compiled("33")
    monkeypatch.setattr(train_step, "run_step", _sabotage_at(110, nan=True))
    run = train(cc, TrainConfig(seed=0))
    back = [a for a in run.adaptation.actions if a["action"] == "rollback"]
    assert len(back) == 1 and back[0]["step"] == 110 and back[0]["reason"].startswith("loss total nan")
    assert run.met_criterion and all(torch.isfinite(p).all() for p in run.model.parameters())
    monkeypatch.setattr(train_step, "run_step", _sabotage_at(5, nan=True))  # before any check: nothing to keep
    with pytest.raises(TrainingDiverged, match="diverged at step 5"):
        train(cc, TrainConfig(seed=0))


def test_a_collapsed_run_rolls_back_to_its_best_check_and_resumes_to_the_same_weights(
        compiled, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from siit import train_step

    cc = compiled("33")
    config = TrainConfig(seed=0)
    monkeypatch.setattr(train_step, "run_step", _sabotage_at(100))
    full = train(cc, config)
    rolled = [h for h in full.history if "rolled_back_to" in h]
    assert len(rolled) == 1 and rolled[0]["step"] == 100 and rolled[0]["metrics"]["accuracy"] < 0.9
    anchor = next(h for h in full.history if h["step"] == rolled[0]["rolled_back_to"])
    assert adaptation.task_worst(anchor["metrics"], config) >= adaptation.ANCHOR_FLOOR
    assert [a["action"] for a in full.adaptation.actions].count("rollback") == 1
    assert full.met_criterion  # the restored weights go on to the criterion
    ckpt = tmp_path / "ckpt"
    with pytest.raises(TrainingInterrupted):  # stopped right after the rollback: the anchor is in the checkpoint
        train(cc, config, checkpoint_dir=ckpt, should_stop=lambda step: step == 101)
    resumed = train(cc, config, checkpoint_dir=ckpt, resume=True)
    assert resumed.adaptation == full.adaptation and resumed.steps == full.steps
    sa, sb = full.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
