"""The battery of no-intervention looks (eval.core.looks) on hand-built models whose answer is known:
for each look, a model where only the circuit has the property the look reads must be separated
completely (separation 1.0, AUROC in the stated direction), and the chance band and summary follow
their definitions."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eval.core.looks import LOOKS, LookInputs, battery
from eval.core.looks.battery import chance_separations, mid_ranks, score_look, summary
from eval.core.metrics import roc

L, H, D, DH, DM, B, T = 2, 2, 8, 4, 8, 64, 5
NODES = ("a0.h0", "a0.h1", "m0", "a1.h0", "a1.h1", "m1")
CONFIG = {"n_layers": L, "n_heads": H, "d_model": D, "d_head": DH, "d_mlp": DM}


def _state_dict(g: torch.Generator) -> dict[str, torch.Tensor]:
    sd = {"unembed.W_U": torch.randn(D, 3, generator=g)}
    for l in range(L):
        a, m = f"blocks.{l}.attn.", f"blocks.{l}.mlp."
        for name, shape in (("W_Q", (H, D, DH)), ("W_K", (H, D, DH)), ("W_V", (H, D, DH)), ("W_O", (H, DH, D)),
                            ("b_Q", (H, DH)), ("b_K", (H, DH)), ("b_V", (H, DH))):
            sd[a + name] = torch.randn(*shape, generator=g)
        for name, shape in (("W_in", (D, DM)), ("b_in", (DM,)), ("W_out", (DM, D)), ("b_out", (D,))):
            sd[m + name] = torch.randn(*shape, generator=g)
    return sd


def _slot(node: str) -> tuple[int, int]:
    i = NODES.index(node)
    return i // (H + 1), i % (H + 1)


def base(circuit: set[str], seed: int = 0, **over) -> LookInputs:
    """Random outputs, gradients, patterns and weights: no look has anything to find."""
    g = torch.Generator().manual_seed(seed)
    patterns = torch.softmax(torch.randn(L, B, H, T, T, generator=g), -1)
    label_positions = torch.ones(B, T, dtype=torch.bool)
    label_positions[:, 0] = False
    fields = dict(config=CONFIG, state_dict=_state_dict(g), acts=torch.randn(L, B, T, H + 1, D, generator=g),
                  grads=torch.randn(L, B, T, H + 1, D, generator=g), patterns=patterns,
                  positions=torch.ones(B, T, dtype=torch.bool), label_positions=label_positions,
                  labels=torch.randint(0, 3, (B, T), generator=g), task_kind="classification",
                  circuit=frozenset(circuit))
    fields.update(over)
    return LookInputs(**fields)


def look(key: str, x: LookInputs) -> dict:
    (record,) = [l for l in LOOKS if l.key == key]
    values = record.function(x)
    return {"auroc": roc(values, x.circuit).auroc, "values": values}


def set_nodes(tensor: torch.Tensor, nodes, fn) -> torch.Tensor:
    out = tensor.clone()
    for n in nodes:
        l, s = _slot(n)
        out[l, :, :, s] = fn(out[l, :, :, s])
    return out


CIRCUIT = {"a0.h1", "m0"}
OUTSIDE = set(NODES) - CIRCUIT


def test_output_norm_and_variance_find_a_loud_varying_circuit() -> None:
    x = base(CIRCUIT)
    loud = dataclasses.replace(x, acts=set_nodes(x.acts, CIRCUIT, lambda a: 10 * a))
    assert look("output_norm", loud)["auroc"] == 1.0
    assert look("output_variance", loud)["auroc"] == 1.0


def test_last_position_looks_read_only_the_last_position() -> None:
    x = base(CIRCUIT)

    def loud_at_end(a: torch.Tensor) -> torch.Tensor:
        a = a.clone()
        a[:, -1] *= 20
        return a

    acts = set_nodes(x.acts, CIRCUIT, loud_at_end)
    acts = set_nodes(acts, OUTSIDE, lambda a: torch.cat([3 * a[:, :-1], a[:, -1:]], dim=1))
    x = dataclasses.replace(x, acts=acts)
    assert look("last_norm", x)["auroc"] == 1.0
    assert look("last_variance", x)["auroc"] == 1.0


def _rank(a: torch.Tensor, r: int, g: torch.Generator) -> torch.Tensor:
    """Outputs [B, T, D] that vary along r fixed directions only."""
    coef = torch.randn(a.shape[0], a.shape[1], r, generator=g)
    return coef @ torch.linalg.qr(torch.randn(D, r, generator=g))[0].T


def test_rank_looks_find_the_only_multi_dimensional_nodes() -> None:
    g = torch.Generator().manual_seed(1)
    x = base(CIRCUIT)
    acts = set_nodes(x.acts, CIRCUIT, lambda a: _rank(a, 4, g))
    acts = set_nodes(acts, OUTSIDE, lambda a: _rank(a, 1, g))
    x = dataclasses.replace(x, acts=acts)
    assert look("output_rank", x)["auroc"] == 1.0
    assert look("raw_output_rank", x)["auroc"] == 1.0
    assert look("first_pc_share", x)["auroc"] == 0.0  # one scalar: all variance on one direction
    assert look("output_rank", x)["values"]["a0.h0"] == pytest.approx(1.0)


def test_position_spread_finds_nodes_that_vary_at_one_position() -> None:
    """Circuit nodes vary at one position each (as planted large-circuit's heads fire), every other
    node a tenth as much at every position: same order of output variance, one position against T."""
    x = base(CIRCUIT)

    def at_one(a: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(a)
        out[:, 2] = a[:, 2]
        return out

    acts = set_nodes(set_nodes(x.acts, CIRCUIT, at_one), OUTSIDE, lambda a: a / T**0.5)
    x = dataclasses.replace(x, acts=acts)
    spread = look("position_spread", x)
    assert spread["auroc"] == 0.0
    assert spread["values"]["m0"] == pytest.approx(1.0)
    assert all(T - 1.5 < spread["values"][n] <= T for n in OUTSIDE)
    # padding: a position no input reaches does not count
    short = dataclasses.replace(x, positions=torch.cat([torch.ones(B, T - 1, dtype=torch.bool),
                                                        torch.zeros(B, 1, dtype=torch.bool)], 1))
    assert all(v <= T - 1 for v in look("position_spread", short)["values"].values())


def test_attention_entropy_ranks_heads_only() -> None:
    x = base({"a1.h0"})
    p = x.patterns.clone()
    p[1, :, 0] = 1.0 / T  # the circuit head spreads its attention
    for l, h in ((0, 0), (0, 1), (1, 1)):
        p[l, :, h] = torch.nn.functional.one_hot(torch.zeros(B, T, dtype=torch.long), T).float()
    r = look("attention_entropy", dataclasses.replace(x, patterns=p))
    assert set(r["values"]) == {"a0.h0", "a0.h1", "a1.h0", "a1.h1"}
    assert r["auroc"] == 1.0


def _scaled(sd: dict, node: str, names: tuple[str, ...], factor: float) -> dict:
    sd = dict(sd)
    l, s = _slot(node)
    for name in names:
        key = f"blocks.{l}.mlp.{name}" if node.startswith("m") else f"blocks.{l}.attn.{name}"
        t = sd[key].clone()
        if node.startswith("m"):
            t = t * factor
        else:
            t[s] = t[s] * factor
        sd[key] = t
    return sd


def test_weight_norms_find_large_weights() -> None:
    x = base(CIRCUIT)
    sd = _scaled(_scaled(x.state_dict, "a0.h1", ("W_Q", "W_K", "W_V", "W_O"), 10.0), "m0", ("W_in", "W_out"), 10.0)
    x = dataclasses.replace(x, state_dict=sd)
    assert look("weight_norm", x)["auroc"] == 1.0
    assert look("weight_norm_sum", x)["auroc"] == 1.0


def test_qk_and_ov_norms_are_blind_to_the_head_rescale_but_not_to_the_product() -> None:
    x = base({"a1.h0"})
    rescaled = _scaled(_scaled(x.state_dict, "a0.h0", ("W_Q", "W_V"), 50.0), "a0.h0", ("W_K", "W_O"), 1 / 50)
    assert look("qk_norm", dataclasses.replace(x, state_dict=rescaled))["values"]["a0.h0"] == pytest.approx(
        look("qk_norm", x)["values"]["a0.h0"], rel=1e-5)
    big = _scaled(x.state_dict, "a1.h0", ("W_Q", "W_V"), 30.0)
    assert look("qk_norm", dataclasses.replace(x, state_dict=big))["auroc"] == 1.0
    assert look("ov_norm", dataclasses.replace(x, state_dict=big))["auroc"] == 1.0


def _confined(sd: dict, read_dims: slice, writers_in: set[str]) -> dict:
    """Every reader (q, k, v, MLP input) and the unembedding read dims `read_dims` only; nodes in
    `writers_in` write there, the others write the remaining dims."""
    sd = {k: v.clone() for k, v in sd.items()}
    keep = torch.zeros(D, dtype=torch.bool)
    keep[read_dims] = True
    for l in range(L):
        for name in ("W_Q", "W_K", "W_V"):
            sd[f"blocks.{l}.attn.{name}"][:, ~keep] = 0
        sd[f"blocks.{l}.mlp.W_in"][~keep] = 0
        for h in range(H):
            node = NODES[l * (H + 1) + h]
            sd[f"blocks.{l}.attn.W_O"][h][:, ~keep if node in writers_in else keep] = 0
        sd[f"blocks.{l}.mlp.W_out"][:, ~keep if NODES[l * (H + 1) + H] in writers_in else keep] = 0
    sd["unembed.W_U"][~keep] = 0
    return sd


def test_reader_and_unembed_alignment_find_the_nodes_whose_writes_are_read() -> None:
    x = base(CIRCUIT | {"m1"})
    x = dataclasses.replace(x, state_dict=_confined(x.state_dict, slice(0, 4), CIRCUIT | {"m1"}))
    r = look("reader_alignment", x)
    assert "m1" not in r["values"]  # nothing reads the last MLP but the unembedding
    assert r["auroc"] == 1.0
    assert look("unembed_alignment", x)["auroc"] == 1.0


def test_gradient_looks() -> None:
    x = base(CIRCUIT)
    steep = dataclasses.replace(x, grads=set_nodes(x.grads, CIRCUIT, lambda g: 10 * g))
    assert look("gradient_norm", steep)["auroc"] == 1.0
    # same gradient sizes; only the circuit's output points along its gradient
    aligned = dataclasses.replace(x, grads=set_nodes(x.acts, CIRCUIT, lambda a: a))
    aligned = dataclasses.replace(aligned, grads=set_nodes(aligned.grads, OUTSIDE, lambda g: torch.roll(g, 1, dims=0)))
    assert look("gradient_x_activation", aligned)["auroc"] == 1.0


def test_probe_decodes_the_answer_from_the_nodes_that_carry_it() -> None:
    x = base(CIRCUIT)
    code = torch.nn.functional.one_hot(x.labels, 3).float() * 4  # [B, T, 3]

    def carry(a: torch.Tensor) -> torch.Tensor:
        a = 0.1 * a
        a[..., :3] += code
        return a

    x = dataclasses.replace(x, acts=set_nodes(x.acts, CIRCUIT, carry))
    r = look("probe", x)
    assert min(r["values"][n] for n in CIRCUIT) == 1.0
    assert r["auroc"] == 1.0


def test_probe_regression_scores_r_squared() -> None:
    x = base(CIRCUIT)
    values = torch.randn(B, T, generator=torch.Generator().manual_seed(3))
    x = dataclasses.replace(x, task_kind="regression", labels=values,
                            acts=set_nodes(x.acts, {"m0"}, lambda a: torch.cat([values[..., None], a[..., 1:]], -1)))
    assert look("probe", x)["values"]["m0"] == pytest.approx(1.0, abs=1e-3)
    assert look("probe", x)["values"]["a0.h0"] < 0.5


def test_direct_logit_looks_find_writes_towards_the_answer() -> None:
    x = base(CIRCUIT)
    w_u = x.state_dict["unembed.W_U"]
    toward = (w_u - w_u.mean(-1, keepdim=True)).T[x.labels]  # [B, T, D]: the answer's centred logit direction
    x = dataclasses.replace(x, acts=set_nodes(set_nodes(x.acts, CIRCUIT, lambda a: 0 * a + 5 * toward),
                                              OUTSIDE, lambda a: 0.01 * a))
    assert look("direct_logit_attribution", x)["auroc"] == 1.0
    assert look("logit_variance", x)["auroc"] == 1.0


def test_structure_looks() -> None:
    assert look("layer", base({"a0.h0", "a0.h1", "m0"}))["auroc"] == 1.0
    assert look("is_mlp", base({"m0", "m1"}))["auroc"] == 1.0


def test_every_look_is_tested_and_bounded_or_apart() -> None:
    tested = {"output_norm", "output_variance", "last_norm", "last_variance", "output_rank", "raw_output_rank",
              "first_pc_share", "position_spread", "attention_entropy", "weight_norm", "weight_norm_sum", "qk_norm", "ov_norm",
              "reader_alignment", "unembed_alignment", "gradient_norm", "gradient_x_activation", "probe", "layer",
              "is_mlp", "direct_logit_attribution", "logit_variance"}
    assert {l.key for l in LOOKS} == tested
    assert {l.key for l in LOOKS if l.apart} == {"direct_logit_attribution", "logit_variance"}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=3, max_size=12), st.data())
def test_mid_rank_auroc_equals_the_roc_auroc_with_ties(values: list[int], data: st.DataObject) -> None:
    n = len(values)
    k = data.draw(st.integers(1, n - 1))
    truth = {f"n{i}" for i in range(k)}
    ranks = mid_ranks(torch.tensor(values, dtype=torch.float64))
    auroc = (float(ranks[:k].sum()) - k * (k + 1) / 2) / (k * (n - k))
    assert auroc == pytest.approx(roc({f"n{i}": float(v) for i, v in enumerate(values)}, truth).auroc)


def test_chance_band_of_a_small_graph_is_wide_and_of_a_large_one_narrow() -> None:
    small = chance_separations(torch.arange(10.0), 1, 4000, 0)
    large = chance_separations(torch.arange(200.0), 40, 4000, 0)
    assert float(torch.quantile(small, 0.95)) >= 0.9  # one circuit node of ten: 0.9 is chance
    # Mann-Whitney: AUROC under the null has sd sqrt((n + 1) / (12 k (n - k))); the separation's 95th
    # percentile is the two-sided 95% point
    sd = ((200 + 1) / (12 * 40 * 160)) ** 0.5
    assert float(torch.quantile(large, 0.95)) == pytest.approx(0.5 + 1.96 * sd, abs=0.01)
    assert float(small.min()) >= 0.5


def test_score_look_reports_p_and_leaves_out_degenerate_circuits() -> None:
    values = {f"n{i}": float(i) for i in range(40)}
    row = score_look(values, frozenset({"n39", "n38", "n37", "n36"}), 999, 0)
    assert row["separation"] == 1.0 and row["p"] == pytest.approx(1 / 1000)
    assert row["chance_95"] < 0.8
    assert score_look(values, frozenset(), 99, 0)["separation"] is None
    assert score_look({"a": 1.0, "b": float("nan")}, frozenset({"a"}), 99, 0)["separation"] is None


def test_summary_applies_the_bounds() -> None:
    row = lambda sep, apart=False: {"separation": sep, "apart": apart}  # noqa: E731
    ok = summary({"a": row(0.7), "b": row(0.6), "c": row(0.55), "d": row(0.84, True)})
    assert ok["met"] and ok["over_bound"] == [] and ok["median_separation"] == 0.6
    bad = summary({"a": row(0.76), "b": row(0.6), "c": row(None), "d": row(0.9, True)})
    assert not bad["met"] and bad["over_bound"] == ["a", "d"]
    assert not summary({"a": row(0.7), "b": row(0.7), "c": row(0.5)})["met"]  # median 0.7 > 0.65


def test_battery_on_random_values_is_near_chance_and_json_native() -> None:
    import json

    report = battery(base(CIRCUIT), permutations=200)
    json.dumps(report, allow_nan=False)
    assert set(report["looks"]) == {l.key for l in LOOKS}
    for key in ("output_norm", "output_variance", "gradient_norm", "probe"):
        assert report["looks"][key]["separation"] <= report["looks"][key]["chance_95"] + 1e-9


def test_look_inputs_reject_mismatched_shapes() -> None:
    x = base(CIRCUIT)
    with pytest.raises(ValueError, match="acts must be"):
        dataclasses.replace(x, acts=x.acts[:, :, :, :2])
    with pytest.raises(ValueError, match="not in the model"):
        dataclasses.replace(x, circuit=frozenset({"a5.h0"}))
    with pytest.raises(ValueError, match="no position carries a label"):
        dataclasses.replace(x, label_positions=torch.zeros(B, T, dtype=torch.bool))
