"""Training: determinism, resume, strictness reducing out-of-circuit effects, and reaching the
criterion on a small case."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest
import torch

from siit.config import ConfigError, TrainConfig
from siit.trainer import TrainingInterrupted, train
from siit.validation import validate_model

SMALL = dict(n_train=256, n_val=128, batch_size=32, epochs=3, eval_every=8)


def _weights_equal(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_same_seed_same_weights_other_seed_other_weights(compiled) -> None:
    cc = compiled("33")
    a = train(cc, TrainConfig(**SMALL, seed=1))
    b = train(cc, TrainConfig(**SMALL, seed=1))
    c = train(cc, TrainConfig(**SMALL, seed=2))
    assert _weights_equal(a.model, b.model)
    assert not _weights_equal(a.model, c.model)
    strip = lambda h: [{k: v for k, v in r.items() if k != "seconds"} for r in h]  # noqa: E731
    assert strip(a.history) == strip(b.history)


@pytest.mark.parametrize("scheme", ["apph", "alg1"])
def test_resume_reaches_the_same_weights(compiled, tmp_path: Path, scheme: str) -> None:
    cc = compiled("33")
    config = TrainConfig(**SMALL, scheme=scheme, criterion=1.0)
    full = train(cc, config)
    ckpt = tmp_path / "ckpt"
    with pytest.raises(TrainingInterrupted):
        train(cc, config, checkpoint_dir=ckpt, should_stop=lambda step: step == 13)
    assert (ckpt / "state.safetensors").is_file() and not list(ckpt.glob("*.pkl"))
    resumed = train(cc, config, checkpoint_dir=ckpt, resume=True)
    assert resumed.resumed_from_step == 13
    assert resumed.steps == full.steps
    assert _weights_equal(full.model, resumed.model)
    with pytest.raises(ConfigError):  # a checkpoint made with other options is refused
        train(cc, TrainConfig(**dict(SMALL, seed=9)), checkpoint_dir=ckpt, resume=True)


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="signal handlers can only be set in the main thread")
def test_sigterm_stops_training_after_its_step_with_a_checkpoint(compiled, tmp_path: Path) -> None:
    """SIGTERM (kill, a scheduler's time limit) stops training as Ctrl-C does: after the step that
    is running, with a checkpoint to resume from; the previous handler is restored."""
    cc = compiled("33")
    config = TrainConfig(**SMALL, criterion=1.0)
    ckpt = tmp_path / "ckpt"
    before = signal.getsignal(signal.SIGTERM)

    def terminate_at_13(step: int) -> bool:
        if step == 13:
            os.kill(os.getpid(), signal.SIGTERM)
        return False

    with pytest.raises(TrainingInterrupted):
        train(cc, config, checkpoint_dir=ckpt, should_stop=terminate_at_13)
    assert signal.getsignal(signal.SIGTERM) is before
    resumed = train(cc, config, checkpoint_dir=ckpt, resume=True)
    assert resumed.resumed_from_step == 14  # the flag is read after the next finished step


def test_strictness_reduces_out_of_circuit_effects(compiled) -> None:
    """Same seed, Weight_SIIT 0 (plain IIT) vs 0.5: strictness lowers out-of-circuit effects.
    Both runs give the out-of-circuit nodes distractor tasks (the default follows strict_weight),
    so strictness is the only difference."""
    cc = compiled("3")
    base = dict(n_train=1024, n_val=256, batch_size=64, epochs=8, eval_every=64, seed=0, distractors=True)
    iit = train(cc, TrainConfig(**base, strict_weight=0.0))
    siit = train(cc, TrainConfig(**base, strict_weight=0.5))
    v_iit = validate_model(iit.model, iit.evaluator)
    v_siit = validate_model(siit.model, siit.evaluator)
    out = lambda v: [r["resample"] for r in v["node_effects"] if not r["in_circuit"]]  # noqa: E731
    assert sum(out(v_siit)) < sum(out(v_iit))
    assert v_siit["max_out_of_circuit_effect"]["resample"] < v_iit["max_out_of_circuit_effect"]["resample"]
    # a pooled fraction is a weighted mean of the per-length ones: some length is at least as bad
    by_length = v_iit["max_out_of_circuit_effect_by_length"]
    assert set(by_length) == {str(n) for n in iit.evaluator.data.lengths.tolist()}
    for kind in ("resample", "mean", "zero"):
        assert max(v[kind] for v in by_length.values()) >= v_iit["max_out_of_circuit_effect"][kind] - 1e-6 > 0


def test_validation_marks_circuit_nodes(compiled) -> None:
    cc = compiled("33")
    result = train(cc, TrainConfig(**SMALL))
    v = validate_model(result.model, result.evaluator)
    rows = {r["node"]: r for r in v["node_effects"]}
    assert set(rows) == set(result.correspondence.low.nodes)
    assert [n for n, r in rows.items() if r["in_circuit"]] == list(result.correspondence.aligned)
    for r in rows.values():
        assert 0.0 <= min(r["resample"], r["mean"], r["zero"]) <= max(r["resample"], r["mean"], r["zero"]) <= 1.0
    assert set(v["accuracy_non_circuit_ablated"]) == {"resample", "mean", "zero"}


def test_case_33_reaches_criterion(compiled) -> None:
    """The default configuration trains case 33 to 100% accuracy, IIA and SIIA on held-out data,
    SIIA with every non-aligned node ablated at once included."""
    result = train(compiled("33"), TrainConfig())
    assert result.met_criterion, result.metrics
    m = result.metrics
    assert m["accuracy"] == 1.0 and m["iia_min"] == 1.0
    assert m["siia_min"] == 1.0 and m["siia_all"] == 1.0
