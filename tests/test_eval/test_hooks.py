"""eval.patching.hooks equals TransformerLens 3.x's own hooks, on whichever major is installed.

A tiny random model (causal and bidirectional, non-zero biases, padded inputs: right-padded rows
and one left-padded row) was run under transformer-lens 3.9 with 3.x's hooks (`hook_result`,
`hook_q_input`, `hook_k_input`, `hook_v_input`, `hook_mlp_in`); tests/data/tl3_hooks.safetensors
holds its weights (written by the HookedTransformer), the inputs and what those hooks gave: logits,
per-head outputs, head replacement and zero ablation, q/k/v and MLP input patching (one edge and
all of a reader's edges), gradients. On any major the adapter must reproduce them within 1e-5; on
3.x the file must still be what 3.x computes (and the adapter must match live 3.x hooks on a
model the file has never seen). Regenerate under 3.x with `python tests/test_eval/test_hooks.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from eval.patching.hooks import adapt, forward
from eval.core.tlens import build_hooked, hooked_config, state_dict_3x, tl_major

FIXTURE = Path(__file__).parents[1] / "data" / "tl3_hooks.safetensors"
ATOL = 1e-5
L, H = 2, 3
on_3x = pytest.mark.skipif(tl_major() != 3, reason="needs transformer-lens 3.x's own hooks")


def _config(causal: bool) -> dict:
    return hooked_config(n_layers=L, d_model=12, n_heads=H, d_head=4, d_mlp=20, d_vocab=7, d_vocab_out=5,
                         n_ctx=6, causal=causal, act_fn="gelu")


def _random_weights(causal: bool, seed: int) -> dict[str, torch.Tensor]:
    from siit.initialise import init_weights
    from siit.transformer import Transformer

    gen = torch.Generator().manual_seed(seed)
    model = Transformer(_config(causal))
    init_weights(model, gen)
    with torch.no_grad():  # non-zero biases, so that where they enter is tested too
        for name, p in model.named_parameters():
            if ".b_" in name or name.startswith("unembed.b"):
                p.normal_(0, 0.3, generator=gen)
    return {k: v.clone() for k, v in model.state_dict().items()}


def _inputs(seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name in ("base", "source"):
        tokens = torch.randint(0, 6, (7, 6), generator=gen)
        lengths = torch.randint(2, 7, (7,), generator=gen)
        lengths[0] = 6
        mask = (torch.arange(6)[None] < lengths[:, None]).long()
        mask[-1] = mask[-1].flip(0) if name == "base" else mask[-1]  # one left-padded row
        out[f"{name}_tokens"] = torch.where(mask.bool(), tokens, 6)  # 6 plays PAD
        out[f"{name}_mask"] = mask
    return out


# ---- what TransformerLens 3.x's own hooks give (runs only under 3.x) ----

def tl3_values(model, x: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every reference quantity, computed with 3.x's hook_result / hook_*_input / hook_mlp_in."""
    base, bmask, src, smask = x["base_tokens"], x["base_mask"], x["source_tokens"], x["source_mask"]
    run = lambda hooks: model.run_with_hooks(base, attention_mask=bmask, fwd_hooks=hooks)  # noqa: E731
    out: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        out["logits"], cache = model.run_with_cache(base, attention_mask=bmask)
        _, scache = model.run_with_cache(src, attention_mask=smask)
        for layer in range(L):
            out[f"result.{layer}"] = cache[f"blocks.{layer}.attn.hook_result"]
            out[f"mlp_out.{layer}"] = cache[f"blocks.{layer}.hook_mlp_out"]
        out["input"] = cache["blocks.0.hook_resid_pre"]

        def put_head(layer, head, value):
            def hook(act, hook):
                act = act.clone()
                act[:, :, head] = value
                return act
            return (f"blocks.{layer}.attn.hook_result", hook)

        out["replace.a1.h2"] = run([put_head(1, 2, scache["blocks.1.attn.hook_result"][:, :, 2])])
        out["zero.a0.h1"] = run([put_head(0, 1, 0.0)])
        for x_name, head in (("q", 0), ("k", 1), ("v", 2)):
            # every edge into a1.h{head}<x>: its input is the source run's residual stream
            out[f"all_edges.a1.h{head}<{x_name}>"] = run([(f"blocks.1.hook_{x_name}_input", _set_head(
                head, scache[f"blocks.1.hook_{x_name}_input"][:, :, head]))])
            # one edge m0 -> a1.h{head}<x>: the input moves by (source m0 - this run's m0)
            seen: dict[str, torch.Tensor] = {}
            out[f"edge.m0.a1.h{head}<{x_name}>"] = run([
                ("blocks.0.hook_mlp_out", lambda act, hook: seen.setdefault("m0", act)),
                (f"blocks.1.hook_{x_name}_input", lambda act, hook, h=head: _add_head(
                    act, h, scache["blocks.0.hook_mlp_out"] - seen["m0"]))])
        out["all_edges.m1"] = run([("blocks.1.hook_mlp_in", lambda act, hook: scache["blocks.1.hook_mlp_in"])])
        seen2: dict[str, torch.Tensor] = {}
        out["edge.a1.h0.m1"] = run([
            ("blocks.1.attn.hook_result", lambda act, hook: seen2.setdefault("r", act)),
            ("blocks.1.hook_mlp_in", lambda act, hook: act + scache["blocks.1.attn.hook_result"][:, :, 0]
             - seen2["r"][:, :, 0])])
        out["edge.a0.h2.logits"] = run([
            ("blocks.0.attn.hook_result", lambda act, hook: seen2.setdefault("r0", act)),
            (f"blocks.{L - 1}.hook_resid_post", lambda act, hook: act + scache["blocks.0.attn.hook_result"][:, :, 2]
             - seen2["r0"][:, :, 2])])
    # gradients of one logit sum with respect to a head's output and a head's query input
    grads: dict[str, torch.Tensor] = {}

    def keep(key):
        def hook(act, hook):
            act.retain_grad()
            grads[key] = act
            return act
        return hook

    logits = model.run_with_hooks(base, attention_mask=bmask, fwd_hooks=[
        ("blocks.0.attn.hook_result", keep("result0")), ("blocks.1.hook_q_input", keep("q1")),
        ("blocks.0.hook_mlp_in", keep("mlp_in0"))])
    logits[..., 0].sum().backward()
    out["grad.a0.h1"] = grads["result0"].grad[:, :, 1]
    out["grad.a1.h2<q>"] = grads["q1"].grad[:, :, 2]
    out["grad.m0.input"] = grads["mlp_in0"].grad
    model.zero_grad(set_to_none=True)
    return {k: v.detach().clone().contiguous() for k, v in out.items()}


def _set_head(head, value):
    def hook(act, hook):
        act = act.clone()
        act[:, :, head] = value
        return act
    return hook


def _add_head(act, head, delta):
    act = act.clone()
    act[:, :, head] += delta
    return act


# ---- the same quantities through eval.patching.hooks (any major) ----

def adapter_values(model, x: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    a = adapt(model)
    base, bmask, src, smask = x["base_tokens"], x["base_mask"], x["source_tokens"], x["source_mask"]
    writers = ["input"] + [f"a{l}.h{h}" for l in range(L) for h in range(H)] + [f"m{l}" for l in range(L)]
    own = a.outputs(base, bmask, writers)
    ref = a.outputs(src, smask, writers)
    out = {"logits": a.forward(base, bmask), "input": own["input"]}
    for layer in range(L):
        out[f"result.{layer}"] = torch.stack([own[f"a{layer}.h{h}"] for h in range(H)], dim=2)
        out[f"mlp_out.{layer}"] = own[f"m{layer}"]
    run = lambda **kw: a.run(base, bmask, reference=ref, **kw).logits  # noqa: E731
    out["replace.a1.h2"] = run(nodes={"a1.h2": 1.0})
    zero = {"a0.h1": torch.zeros_like(own["a0.h1"])}
    out["zero.a0.h1"] = a.run(base, bmask, reference=zero, nodes={"a0.h1": 1.0}).logits
    feeding_1 = ["input"] + [f"a0.h{h}" for h in range(H)] + ["m0"]
    for x_name, head in (("q", 0), ("k", 1), ("v", 2)):
        reader = f"a1.h{head}<{x_name}>"
        out[f"all_edges.{reader}"] = run(edges={(s, reader): 1.0 for s in feeding_1})
        out[f"edge.m0.{reader}"] = run(edges={("m0", reader): 1.0})
    out["all_edges.m1"] = run(edges={(s, "m1"): 1.0 for s in feeding_1 + [f"a1.h{h}" for h in range(H)]})
    out["edge.a1.h0.m1"] = run(edges={("a1.h0", "m1"): 1.0})
    out["edge.a0.h2.logits"] = run(edges={("a0.h2", "logits"): 1.0})
    grad_run = a.run(base, bmask, read_outputs=["a0.h1"], read_inputs=["a1.h2<q>", "m0"], grad=True)
    grad_run.logits[..., 0].sum().backward()
    out["grad.a0.h1"] = grad_run.outputs["a0.h1"].grad
    out["grad.a1.h2<q>"] = grad_run.inputs["a1.h2<q>"].grad
    out["grad.m0.input"] = grad_run.inputs["m0"].grad
    model.zero_grad(set_to_none=True)
    return {k: v.detach() for k, v in out.items()}


def _load_fixture(causal: bool):
    from safetensors.torch import load_file

    data = load_file(str(FIXTURE))
    tag = "causal" if causal else "bidirectional"
    take = lambda prefix: {k[len(prefix):]: v for k, v in data.items() if k.startswith(prefix)}  # noqa: E731
    return take(f"{tag}/weights/"), take("inputs/"), take(f"{tag}/tl3/")


def _assert_close(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], atol: float = ATOL) -> None:
    assert set(got) == set(want)
    for key in want:
        diff = (got[key] - want[key]).abs().max().item()
        assert diff <= atol, f"{key}: max |diff| {diff:.3g} > {atol}"


@pytest.mark.smoke
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_adapter_equals_tl3_hooks_recorded(causal: bool) -> None:
    weights, inputs, want = _load_fixture(causal)
    model = build_hooked(_config(causal), weights)
    got = adapter_values(model, inputs)
    _assert_close(got, want)
    # the interventions did something (a test that could not fail would prove nothing)
    for key in ("replace.a1.h2", "zero.a0.h1", "edge.m0.a1.h0<q>", "edge.m0.a1.h1<k>", "edge.m0.a1.h2<v>",
                "all_edges.m1", "edge.a1.h0.m1", "edge.a0.h2.logits"):
        assert (want[key] - want["logits"]).abs().max() > 1e-3, key
    # the model itself, called the plain way, reads the mask as 3.x did (pad positions included)
    with torch.no_grad():
        plain = model(inputs["base_tokens"], attention_mask=inputs["base_mask"])
    assert (plain - want["logits"]).abs().max() <= ATOL


@on_3x
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_recording_is_what_tl3_computes(causal: bool) -> None:
    """The fixture is still what TransformerLens 3.x computes, to float32 rounding: it was recorded
    on another CPU, whose vector kernels sum in another order (values up to ~7 moved by 3 ulp,
    1.4e-6, on this project's second machine), so the bound is 8 ulp of each value's magnitude.
    A stale fixture moves values by far more than that."""
    weights, inputs, want = _load_fixture(causal)
    got = tl3_values(build_hooked(_config(causal), weights), inputs)
    assert set(got) == set(want)
    for key in want:
        ulp8 = 8 * torch.finfo(torch.float32).eps * max(1.0, want[key].abs().max().item())
        diff = (got[key] - want[key]).abs().max().item()
        assert diff <= ulp8, f"{key}: max |diff| {diff:.3g} > {ulp8:.3g}"


@on_3x
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_adapter_equals_live_tl3_hooks_on_a_new_model(causal: bool) -> None:
    model = build_hooked(_config(causal), _random_weights(causal, seed=11))
    x = _inputs(seed=12)
    _assert_close(adapter_values(model, x), tl3_values(model, x))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_per_row_and_fractional_weights(causal: bool) -> None:
    """One batched pass with a different intervention per row equals the separate passes."""
    weights, x, _ = _load_fixture(causal)
    a = adapt(build_hooked(_config(causal), weights))
    base, bmask = x["base_tokens"], x["base_mask"]
    ref = a.outputs(x["source_tokens"], x["source_mask"], ["a0.h1", "m0", "input"])
    rows = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.5, 1.0, 0.0])
    keep = rows[:, None, None]
    for kw_rows, kw_one in (({"nodes": {"a0.h1": rows}}, lambda w: {"nodes": {"a0.h1": w}}),
                            ({"edges": {("m0", "a1.h1<k>"): rows, ("input", "logits"): rows}},
                             lambda w: {"edges": {("m0", "a1.h1<k>"): w, ("input", "logits"): w}})):
        mixed = a.run(base, bmask, reference=ref, **kw_rows).logits
        full = a.run(base, bmask, reference=ref, **kw_one(1.0)).logits
        none = a.run(base, bmask, reference=ref, **kw_one(0.0)).logits
        half = a.run(base, bmask, reference=ref, **kw_one(0.5)).logits
        expect = torch.where(keep == 1.0, full, none)
        assert torch.allclose(mixed[rows != 0.5], expect[rows != 0.5], atol=ATOL)
        assert torch.allclose(mixed[4], half[4], atol=ATOL)
        assert not torch.allclose(full, none, atol=1e-3)
    assert torch.equal(a.run(base, bmask).logits, forward(a.model, base, bmask))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_a_pass_without_gradients_sums_the_patched_heads_bit_for_bit(causal: bool) -> None:
    """Without gradients the node patches are written into the layer's head outputs, which hook_attn_out
    sums (eval.patching.hook_plan.Plan.head_results); with them every head's output is stacked anew.
    Both must give the same logits to the bit, with node patches (per-row and fractional weights), edges
    from patched and unpatched heads into later readers, and outputs read on the way."""
    weights, x, _ = _load_fixture(causal)
    a = adapt(build_hooked(_config(causal), weights))
    base, bmask = x["base_tokens"], x["base_mask"]
    ref = a.outputs(x["source_tokens"], x["source_mask"], ["a0.h0", "a0.h1", "a1.h2", "m0", "input"])
    rows = torch.tensor([1.0, 0.0, 1.0, 0.3, 0.5, 1.0, 0.0])
    kw = {"reference": ref, "nodes": {"a0.h1": rows, "a1.h2": 0.5, "m0": rows},
          "edges": {("a0.h1", "a1.h0<q>"): 1.0, ("a0.h0", "logits"): rows}, "read_outputs": ["a0.h1", "a0.h2"]}
    lean = a.run(base, bmask, **kw)
    stacked = a.run(base, bmask, grad=True, **kw)
    assert torch.equal(lean.logits, stacked.logits.detach())
    for node in ("a0.h1", "a0.h2"):
        assert torch.equal(lean.outputs[node], stacked.outputs[node].detach())
    assert not torch.allclose(lean.logits, a.run(base, bmask).logits, atol=1e-3)  # the patches do something


def test_a_wide_layer_sums_its_heads_from_z_as_the_stacked_pass_does() -> None:
    """A layer of at least SUMMED_HEADS heads, in a pass without gradients, sums its heads from z and makes
    only the outputs the pass patches or reads: the same logits and read outputs as the pass with gradients
    (every head's output stacked), to float rounding."""
    from eval.patching.hook_plan import SUMMED_HEADS
    from siit.initialise import init_weights
    from siit.transformer import Transformer

    H = SUMMED_HEADS + 3
    config = hooked_config(n_layers=2, d_model=2 * H, n_heads=H, d_head=2, d_mlp=32, d_vocab=7, d_vocab_out=5,
                           n_ctx=6, causal=True, act_fn="gelu")
    model = Transformer(config)
    init_weights(model, torch.Generator().manual_seed(3))
    a = adapt(build_hooked(config, {k: v.detach() for k, v in model.state_dict().items()}))
    x = _inputs(seed=4)
    base, bmask = x["base_tokens"], x["base_mask"]
    ref = a.outputs(x["source_tokens"], x["source_mask"], ["a0.h1", "a0.h2", "a0.h7", f"a1.h{H - 1}", "input"])
    rows = torch.tensor([1.0, 0.0, 1.0, 0.3, 0.5, 1.0, 0.0])
    kw = {"reference": ref, "nodes": {"a0.h1": rows, "a0.h7": 1.0, f"a1.h{H - 1}": 0.5},
          "edges": {("a0.h7", "a1.h0<q>"): 1.0, ("a0.h2", "logits"): rows}, "read_outputs": ["a0.h1", "a0.h3"]}
    lean, stacked = a.run(base, bmask, **kw), a.run(base, bmask, grad=True, **kw)
    torch.testing.assert_close(lean.logits, stacked.logits.detach(), rtol=0, atol=1e-5)
    for node in ("a0.h1", "a0.h3"):
        torch.testing.assert_close(lean.outputs[node], stacked.outputs[node].detach(), rtol=0, atol=1e-6)
    assert not torch.allclose(lean.logits, a.run(base, bmask).logits, atol=1e-3)


def test_bad_requests_fail_with_one_clear_error() -> None:
    weights, x, _ = _load_fixture(True)
    a = adapt(build_hooked(_config(True), weights))
    base, bmask = x["base_tokens"], x["base_mask"]
    with pytest.raises(ValueError, match="not in the model"):
        a.run(base, bmask, read_outputs=["a5.h0"])
    with pytest.raises(ValueError, match="does not feed"):
        a.run(base, bmask, reference={"m1": torch.zeros(1)}, edges={("m1", "a1.h0<q>"): 1.0})
    with pytest.raises(ValueError, match="no reference value for m0"):
        a.run(base, bmask, edges={("m0", "logits"): 1.0})
    with pytest.raises(ValueError, match="writes nothing"):
        a.output_point("logits")
    with pytest.raises(ValueError, match="per-row weight"):
        a.run(base, bmask, reference={"m0": torch.zeros(1, 6, 12)}, nodes={"m0": torch.ones(3)})
    assert a.output_point("a1.h2") == "blocks.1.attn.hook_z" and a.input_point("a1.h0<k>") == "blocks.1.attn.hook_k"


def write_fixture() -> None:
    """Run under transformer-lens 3.x: record what 3.x's hooks give into FIXTURE."""
    from safetensors.torch import save_file

    assert tl_major() == 3, "the recording must come from transformer-lens 3.x"
    import importlib.metadata

    x = _inputs(seed=2)
    tensors = {f"inputs/{k}": v for k, v in x.items()}
    for causal in (True, False):
        tag = "causal" if causal else "bidirectional"
        model = build_hooked(_config(causal), _random_weights(causal, seed=1))
        tensors.update({f"{tag}/weights/{k}": v for k, v in state_dict_3x(model).items()})
        tensors.update({f"{tag}/tl3/{k}": v for k, v in tl3_values(model, x).items()})
    FIXTURE.parent.mkdir(exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(FIXTURE), metadata={
        "format": "zoo-test/1", "written_by": json.dumps({"transformer-lens": importlib.metadata.version("transformer-lens"),
                                                          "torch": torch.__version__})})


if __name__ == "__main__":
    write_fixture()
