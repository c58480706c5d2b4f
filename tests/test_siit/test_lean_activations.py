"""TrainConfig.lean_activations (the wide-model step: one copy of the source activations for every
group, heads summed from z, each node's output read once) trains what the default step trains: the
same losses and gradients from the same weights, to float rounding, with node- and edge-level
strictness; and it stays off unless asked, so a seed reproduces the weights entries were trained to."""

from __future__ import annotations

import pytest
import torch

from siit import train_step
from siit.config import TrainConfig
from siit.export import config_from_training_json
from siit.trainer import _start, prepare, train

SMALL = dict(n_train=256, n_val=64, batch_size=32)


def _first_step(cc, config: TrainConfig) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    s = prepare(cc, config)
    run = _start(s, config, None, False)
    losses = train_step.run_step(run.trainee, run.optimizer, s, config, cc.case.task_kind, 0)
    return losses, {k: p.grad.clone() for k, p in run.trainee.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("case_id,edges", [("3", True), ("33", False)])
def test_lean_step_has_the_default_steps_losses_and_gradients(compiled, case_id: str, edges: bool) -> None:
    cc = compiled(case_id)
    plain_losses, plain_grads = _first_step(cc, TrainConfig(**SMALL, strict_edges=edges))
    lean_losses, lean_grads = _first_step(cc, TrainConfig(**SMALL, strict_edges=edges, lean_activations=True))
    assert plain_losses.keys() == lean_losses.keys() and {"iit", "strict", "behavior", "distractor"} <= set(plain_losses)
    for key, value in plain_losses.items():
        assert lean_losses[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    assert plain_grads.keys() == lean_grads.keys()
    for name, grad in plain_grads.items():  # sums over the batch in another order: relative to the gradient
        assert (lean_grads[name] - grad).abs().max() <= 1e-4 * max(float(grad.abs().max()), 1.0), name


def test_lean_is_off_by_default_and_recorded_only_when_on() -> None:
    assert TrainConfig().lean_activations is False
    assert "lean_activations" not in TrainConfig().to_json()  # as every run before it recorded its config
    on = TrainConfig(lean_activations=True)
    assert on.to_json()["lean_activations"] is True
    assert config_from_training_json({"config": on.to_json(), "arch": {"overrides": {}}})[0] == on
    assert config_from_training_json({"config": TrainConfig().to_json(), "arch": {"overrides": {}}})[0] == TrainConfig()


def test_case_33_reaches_criterion_lean(compiled) -> None:
    result = train(compiled("33"), TrainConfig(lean_activations=True))
    assert result.met_criterion, result.metrics
    m = result.metrics
    assert m["accuracy"] == 1.0 and m["iia_min"] == 1.0 and m["siia_min"] == 1.0 and m["siia_all"] == 1.0
    assert result.evaluator.sum_heads  # the checks and the validation took the summed heads too


@pytest.mark.parametrize("case_id", ["3", "13"])  # causal; bidirectional, every input shape
def test_a_lean_checks_runs_begin_after_the_attention_as_the_patched_forward(compiled, case_id: str) -> None:
    """siit.metrics.after_attention: a run patched from block l on, begun after block l's attention, gives
    the logits of the patched forward begun at block l, whatever the rows patch at l and later."""
    from siit.initialise import init_weights
    from siit.interventions import node_activations, repeat_rows
    from siit.metrics import after_attention
    from siit.transformer import Patch, Transformer

    s = prepare(compiled(case_id), TrainConfig(**SMALL))
    model = Transformer(s.low_config)
    init_weights(model, torch.Generator().manual_seed(0))
    d, ev = s.final_evaluator.data, s.final_evaluator
    n, L, S = len(d), model.n_layers, model.n_heads + 1
    with torch.no_grad():
        acts = node_activations(model, d.tokens, d.mask, d.present)
        src, resid = acts[:, ev.sources], model.residuals(d.tokens, d.mask, acts)
        gen, g = torch.Generator().manual_seed(1), 3
        tokens, mask = repeat_rows(d.tokens, g), repeat_rows(d.mask, g)
        present = None if d.present is None else repeat_rows(d.present, g)
        mean = acts.mean(dim=1, keepdim=True)  # one row for every base, as the mean ablation's values
        for layer, values in [(layer, v) for layer in range(L) for v in (src, mean)]:
            rows = torch.rand(g * n, L, S, generator=gen) < 0.3
            rows[:, :layer] = False
            want = model(tokens, mask, Patch(mask=rows, values=values), present=present,
                         start=(layer, resid[layer]))[0]
            later = rows.clone()
            later[:, : layer + 1] = False
            x = after_attention(model, layer, rows, values, acts, resid)
            got = model(tokens, mask, Patch(mask=later, values=values), present=present, start=(layer + 1, x))[0]
            assert torch.allclose(got, want, atol=1e-4), (layer, (got - want).abs().max())
            unpatched = model(tokens, mask, present=present, start=(layer, resid[layer]))[0]
            assert (want - unpatched).abs().max() > 1e-3  # the patches move the logits
