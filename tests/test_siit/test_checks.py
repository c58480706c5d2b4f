"""Periodic checks during training (siit.train_checks): one clean run serves the metrics and the
distractors' R², with the same numbers as separate runs; what each check was measured on."""

from __future__ import annotations

from siit.config import TrainConfig
from siit.interventions import node_activations
from siit.trainer import train

CONFIG = dict(n_train=256, n_val=128, batch_size=32, epochs=2, eval_every=8)


def test_metrics_from_given_activations_equal_their_own_run(compiled) -> None:
    result = train(compiled("33"), TrainConfig(**CONFIG))
    evaluator, model = result.evaluator, result.model
    d = evaluator.data
    acts = node_activations(model, d.tokens, d.mask, d.present)
    assert evaluator.evaluate(model, acts=acts) == evaluator.evaluate(model)


def test_each_check_records_what_it_was_measured_on(compiled) -> None:
    result = train(compiled("33"), TrainConfig(**CONFIG))
    assert result.history and {r["checked_on"] for r in result.history} == {"padded"}  # causal: one shape
