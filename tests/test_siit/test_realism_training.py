"""Trained entries are realistic (the realism issue's tests): out-of-circuit nodes stay busy, so
ranking nodes by output norm, output variance or weight norm does not find the circuit, while
their resample and mean-ablation effects stay at zero on padded and unpadded inputs of every length,
and node-level resample patching still separates the circuit perfectly."""

from __future__ import annotations

import pytest

from eval.core.metrics import roc
from eval.core.node_heuristics import HEURISTICS
from siit.config import TrainConfig
from siit.trainer import train
from siit.validation import validate_model

BOUND, FLOOR, EFFECT = 0.75, 0.25, 0.01


@pytest.fixture(scope="module")
def case_33(compiled):
    result = train(compiled("33"), TrainConfig(seed=0))
    return result, validate_model(result.model, result.evaluator)


def test_heuristics_do_not_find_the_circuit(case_33) -> None:
    result, validation = case_33
    assert result.met_criterion
    realism = validation["realism"]
    for name in HEURISTICS:
        assert realism["heuristics"][name]["separation"] <= BOUND, (name, realism["heuristics"][name])
    assert realism["variance_floor_ratio"] >= FLOOR
    assert all(d["r2"] >= 0.9 for d in result.distractors) and len(result.distractors) == 9


def test_circuit_stays_exact_and_patching_still_finds_it(case_33) -> None:
    _, validation = case_33
    for shape, worst in validation["max_out_of_circuit_effect_by_shape"].items():
        assert worst["resample"] <= EFFECT and worst["mean"] <= EFFECT, shape
    rows = validation["node_effects"]
    patching = roc({r["node"]: r["resample"] for r in rows}, {r["node"] for r in rows if r["in_circuit"]})
    assert patching.auroc == 1.0


def test_bidirectional_circuit_holds_on_unpadded_inputs_of_every_length(compiled) -> None:
    """Every head attends to PAD keys under bidirectional attention; trained on every input shape,
    no out-of-circuit node matters on unpadded (or partly padded) inputs of any length."""
    cc = compiled("outside_case:make_bidirectional_case")
    result = train(cc, TrainConfig(seed=0))
    assert result.met_criterion
    validation = validate_model(result.model, result.evaluator)
    assert validation["input_shapes"] == ["padded", "unpadded", "partly_padded"]
    lengths = set(result.evaluator.data.lengths[result.evaluator.data.shape_ids == 1].tolist())
    assert lengths == set(range(1, cc.case.max_seq_len + 1))  # every length appears unpadded
    for shape, worst in validation["max_out_of_circuit_effect_by_shape"].items():
        assert worst["resample"] <= EFFECT and worst["mean"] <= EFFECT, shape
    by_length = validation["max_out_of_circuit_effect_by_length"]
    assert set(by_length) == {str(n) for n in range(1, cc.case.max_seq_len + 1)}
    for n, worst in by_length.items():
        assert worst["resample"] <= EFFECT and worst["mean"] <= EFFECT, n
    assert validation["metrics"]["accuracy"] == 1.0 and validation["metrics"]["siia_min"] == 1.0
