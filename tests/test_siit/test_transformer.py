"""siit.transformer.Transformer equals the installed TransformerLens model (logits, per-head and MLP
outputs as eval.patching.hooks reads them) on random weights and padded inputs, and its Patch equals patching
through eval.patching.hooks. (eval.patching.hooks equals TL 3.x's own hooks: tests/test_eval/test_hooks.py.)"""

from __future__ import annotations

import pytest
import torch

from eval.patching.hooks import adapt
from eval.core.tlens import build_hooked, hooked_config, state_dict_3x
from siit.initialise import init_weights
from siit.transformer import Patch, Transformer


def _random_model(causal: bool, act_fn: str, seed: int = 0):
    cfg = hooked_config(n_layers=2, d_model=12, n_heads=3, d_head=4, d_mlp=20, d_vocab=7,
                        d_vocab_out=5, n_ctx=6, causal=causal, act_fn=act_fn)
    gen = torch.Generator().manual_seed(seed)
    model = Transformer(cfg)
    init_weights(model, gen)
    with torch.no_grad():  # non-zero biases so that their placement is tested too
        for name, p in model.named_parameters():
            if ".b_" in name or name.startswith("unembed.b"):
                p.normal_(0, 0.3, generator=gen)
    return cfg, model


def _padded_batch(seed: int = 1, batch: int = 9, n_ctx: int = 6):
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 7, (batch, n_ctx), generator=gen)
    lengths = torch.randint(1, n_ctx + 1, (batch,), generator=gen)
    lengths[0] = n_ctx
    mask = (torch.arange(n_ctx)[None] < lengths[:, None]).long()
    tokens = torch.where(mask.bool(), tokens, 6)  # token 6 plays PAD
    return tokens, mask


WRITERS = [f"a{l}.h{h}" for l in range(2) for h in range(3)] + ["m0", "m1"]


@pytest.mark.smoke
@pytest.mark.parametrize("causal,act_fn", [(True, "gelu"), (False, "gelu"), (True, "relu"), (False, "relu")])
def test_equals_transformer_lens(causal: bool, act_fn: str) -> None:
    cfg, model = _random_model(causal, act_fn)
    tl = build_hooked(cfg, model.state_dict())
    tokens, mask = _padded_batch()
    with torch.no_grad():
        logits, acts = model(tokens, mask, return_acts=True)
        tl_logits = tl(tokens, attention_mask=mask)
    outs = adapt(tl).outputs(tokens, mask, WRITERS)
    assert torch.allclose(logits, tl_logits, atol=1e-5), (logits - tl_logits).abs().max()
    for layer in range(cfg["n_layers"]):
        for head in range(3):
            assert torch.allclose(acts[layer, :, :, head], outs[f"a{layer}.h{head}"], atol=1e-5)
        assert torch.allclose(acts[layer, :, :, 3], outs[f"m{layer}"], atol=1e-5)


@pytest.mark.smoke
def test_state_dict_names_load_into_transformer_lens() -> None:
    cfg, model = _random_model(True, "gelu")
    tl = build_hooked(cfg, model.state_dict())  # raises if a name or shape does not fit
    back = state_dict_3x(tl)
    assert set(model.state_dict()) == set(back)
    assert all(torch.equal(back[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("causal", [True, False])
def test_patch_equals_patching_through_eval_hooks(causal: bool) -> None:
    """Per-row patches of heads and MLPs == the TL model run with that node replaced."""
    cfg, model = _random_model(causal, "gelu", seed=3)
    tl = adapt(build_hooked(cfg, model.state_dict()))
    base, base_mask = _padded_batch(seed=4)
    source, source_mask = _padded_batch(seed=5)
    with torch.no_grad():
        _, source_acts = model(source, source_mask, return_acts=True)
    choices = [(0, 1), (1, 3), (0, 3), (1, 0), (0, 0), (1, 2), (0, 2), (1, 1), (0, 1)]  # (layer, slot)
    mask = torch.zeros(len(choices), 2, 4, dtype=torch.bool)
    for row, (layer, slot) in enumerate(choices):
        mask[row, layer, slot] = True
    with torch.no_grad():
        patched, _ = model(base, base_mask, Patch(mask=mask, values=source_acts))
    reference = tl.outputs(source, source_mask, WRITERS)
    clean = tl.forward(base, base_mask)
    # one batched pass through eval.patching.hooks: row r patches its own node (a per-row weight)
    weights = {node: torch.tensor([float(WRITERS.index(node) == _writer_index(l, s)) for l, s in choices])
               for node in WRITERS}
    ref = tl.run(base, base_mask, reference=reference, nodes=weights).logits
    for row, (layer, slot) in enumerate(choices):
        node = f"a{layer}.h{slot}" if slot < 3 else f"m{layer}"
        one = tl.run(base[row:row + 1], base_mask[row:row + 1], nodes={node: 1.0},
                     reference={node: reference[node][row:row + 1]}).logits
        assert torch.allclose(patched[row], one[0], atol=1e-5)
        assert torch.allclose(patched[row], ref[row], atol=1e-5)
        assert not torch.allclose(one[0], clean[row], atol=1e-4)  # the patch did something


def _writer_index(layer: int, slot: int) -> int:
    return WRITERS.index(f"a{layer}.h{slot}" if slot < 3 else f"m{layer}")


@pytest.mark.parametrize("causal", [True, False])
def test_hook_protocol_runs_eval_hooks_as_the_tl_model_does(causal: bool) -> None:
    """eval.patching.hooks on the pure-torch model (run_with_hooks) == eval.patching.hooks on the TL model: writer
    outputs, node and edge patches (q/k/v, MLP and logits readers), read inputs, start-at-layer."""
    cfg, model = _random_model(causal, "gelu", seed=6)
    ours, theirs = adapt(model), adapt(build_hooked(cfg, model.state_dict()))
    tokens, mask = _padded_batch(seed=7)
    source, source_mask = _padded_batch(seed=8)
    writers = ["input", *WRITERS]
    ref_ours, ref_theirs = ours.outputs(source, source_mask, writers), theirs.outputs(source, source_mask, writers)
    for w in writers:
        assert torch.allclose(ref_ours[w], ref_theirs[w], atol=1e-5), w
    edges = {("a0.h1", "a1.h2<q>"): 1.0, ("a0.h0", "a1.h0<v>"): 1.0, ("input", "a1.h1<k>"): 0.5,
             ("input", "m1"): 0.5, ("m0", "logits"): 1.0}
    reads = ["a1.h2<k>", "a1.h0<v>", "m1", "logits"]
    a = ours.run(tokens, mask, reference=ref_ours, edges=edges, nodes={"a1.h1": 1.0}, read_inputs=reads)
    b = theirs.run(tokens, mask, reference=ref_theirs, edges=edges, nodes={"a1.h1": 1.0}, read_inputs=reads)
    assert torch.allclose(a.logits, b.logits, atol=1e-5)
    assert not torch.allclose(a.logits, ours.forward(tokens, mask), atol=1e-3)  # the patches did something
    for r in reads:
        assert torch.allclose(a.inputs[r], b.inputs[r], atol=1e-5), r
    late = {("a0.h1", "a1.h2<q>"): 1.0}
    started = ours.run(tokens, mask, reference=ref_ours, edges=late, start=ours.starts(tokens, mask)[1]).logits
    assert torch.allclose(started, ours.run(tokens, mask, reference=ref_ours, edges=late).logits, atol=1e-6)
    with torch.no_grad():
        assert torch.allclose(ours.forward(tokens, mask), model(tokens, mask)[0], atol=1e-5)
    with pytest.raises(ValueError, match="no hook point"):
        model.run_with_hooks(tokens, attention_mask=mask, fwd_hooks=[("blocks.0.hook_nothing", lambda a, hook: a)])


@pytest.mark.parametrize("causal", [True, False])
def test_start_at_a_block_and_shared_patch_values_equal_the_full_patched_run(causal: bool) -> None:
    """A run started at block l from `residuals` (clean blocks before l skipped), with patch values
    shared by stacked groups (b rows for a batch of g·b), == the full run with the values copied
    per group."""
    cfg, model = _random_model(causal, "gelu", seed=7)
    base, base_mask = _padded_batch(seed=8)
    source, source_mask = _padded_batch(seed=9)
    n = base.shape[0]
    with torch.no_grad():
        _, base_acts = model(base, base_mask, return_acts=True)
        _, source_acts = model(source, source_mask, return_acts=True)
        resid = model.residuals(base, base_mask, base_acts)
        assert torch.allclose(resid[-1] @ model.unembed.W_U + model.unembed.b_U, model(base, base_mask)[0],
                              atol=1e-5)
        g = 3
        mask = torch.zeros(g * n, 2, 4, dtype=torch.bool)
        mask[:n, 1, 0] = True  # group 0: a1.h0; group 1: m1; group 2: a1.h2 on odd rows only
        mask[n:2 * n, 1, 3] = True
        mask[2 * n + 1::2, 1, 2] = True
        tokens, tmask = base.repeat(g, 1), base_mask.repeat(g, 1)
        full, _ = model(tokens, tmask, Patch(mask=mask, values=source_acts.repeat(1, g, 1, 1, 1)))
        shared, _ = model(tokens, tmask, Patch(mask=mask, values=source_acts), start=(1, resid[1]))
        assert torch.allclose(shared, full, atol=1e-5)
        assert not torch.allclose(full[:n], model(base, base_mask)[0], atol=1e-4)  # the patch did something
        only_unembed, _ = model(base, base_mask, start=(2, resid[2]))
        assert torch.allclose(only_unembed, model(base, base_mask)[0], atol=1e-5)
        with pytest.raises(ValueError):
            model(tokens[:-1], tmask[:-1], Patch(mask=mask[:-1], values=source_acts))
        with pytest.raises(ValueError):
            model(base, base_mask, return_acts=True, start=(1, resid[1]))
        with pytest.raises(ValueError):  # a patch before the start block would be silently lost
            model(tokens, tmask, Patch(mask=mask, values=source_acts), start=(2, resid[2]))
        with pytest.raises(ValueError):
            model(tokens[:-1], tmask[:-1], start=(1, resid[1]))


def _stacked(causal: bool, seed: int):
    """A random model, a padded base batch stacked as 3 groups and a source run's activations: the
    shape of training's stacked run (model, base, base_mask, source, source_mask, source_acts, gen)."""
    _, model = _random_model(causal, "gelu", seed=seed)
    base, base_mask = _padded_batch(seed=seed + 1)
    source, source_mask = _padded_batch(seed=seed + 2)
    _, source_acts = model(source, source_mask, return_acts=True)
    return model, base, base_mask, source, source_mask, source_acts, torch.Generator().manual_seed(seed + 3)


def _per_head_and_summed(model, tokens, tmask, patch: Patch, **kwargs):
    """((logits, grads) of the per-head pass, the same of sum_heads) for one patched stacked run."""
    runs = []
    for summed in (False, True):
        model.zero_grad()
        logits, _ = model(tokens, tmask, patch, sum_heads=summed, **kwargs)
        (logits * torch.linspace(-1, 1, logits.numel()).reshape(logits.shape)).sum().backward(retain_graph=True)
        runs.append((logits.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}))
    return runs


@pytest.mark.parametrize("causal", [True, False])
def test_summed_heads_equal_the_patched_per_head_outputs(causal: bool) -> None:
    """sum_heads (the heads' sum from z, only the patched (row, head)s replaced: what training's
    stacked run and the checks take) gives the default pass's logits and gradients to float
    rounding, for values shared by stacked groups, partial input shapes and a later start block."""
    model, base, base_mask, _, _, source_acts, gen = _stacked(causal, seed=11)
    n, g = base.shape[0], 3
    mask = torch.rand(g * n, 2, 4, generator=gen) < 0.4
    mask[:n] = False  # a group that patches nothing
    present = torch.ones(g * n, base.shape[1], dtype=torch.bool)
    present[1::3, 4:] = False  # rows cut short (the unpadded shapes)
    tokens, tmask = base.repeat(g, 1), base_mask.repeat(g, 1)
    (plain, plain_grad), (summed_logits, summed_grad) = _per_head_and_summed(
        model, tokens, tmask, Patch(mask=mask, values=source_acts), present=present)
    assert torch.allclose(summed_logits, plain, atol=1e-5)
    for name, grad in plain_grad.items():
        # float rounding of sums over every row, relative to the gradient (b_K: zero, up to rounding)
        assert (summed_grad[name] - grad).abs().max() <= 1e-5 * max(float(grad.abs().max()), 1.0), name
    with torch.no_grad():
        _, base_acts = model(base, base_mask, return_acts=True)
        resid = model.residuals(base, base_mask, base_acts)
        late = mask.clone()
        late[:, 0] = False
        start = model(tokens, tmask, Patch(mask=late, values=source_acts), start=(1, resid[1]), sum_heads=True)[0]
        assert torch.allclose(start, model(tokens, tmask, Patch(mask=late, values=source_acts))[0], atol=1e-5)
        # without a patch, and when asked for activations (which need every head's output), the same
        assert torch.allclose(model(base, base_mask, sum_heads=True)[0], model(base, base_mask)[0], atol=1e-5)
        assert torch.equal(model(base, base_mask, return_acts=True, sum_heads=True)[1], base_acts)


@pytest.mark.parametrize("causal", [True, False])
def test_summed_heads_with_edge_patches_equal_the_per_head_pass(causal: bool) -> None:
    """sum_heads with edge-level strictness rows (several edges a row, as training samples them):
    the senders' differences kept as the heads' z and replacements (siit.edge_patch._HeadDiffs) give
    the per-head pass's logits and gradients to float rounding, also where a node-patched head is a
    patched edge's sender (it wrote its replacement: no difference), and for the next block's q/k/v
    readers (many readers) as for the MLPs' and the logits' (few)."""
    from siit.edges import EdgeLayout

    model, base, base_mask, source, source_mask, source_acts, gen = _stacked(causal, seed=21)
    n, g = base.shape[0], 3
    layout = EdgeLayout(2, 3)
    edges = (torch.rand(n, *layout.shape, generator=gen) < 0.3) & layout.valid()
    mask = torch.rand(g * n, 2, 4, generator=gen) < 0.3
    mask[n : 2 * n, 0, :3] = True  # edge rows whose block-0 heads are node-patched too
    tokens, tmask = base.repeat(g, 1), base_mask.repeat(g, 1)
    embed = model.input_embedding(source, source_mask)
    patch = Patch(mask=mask, values=source_acts, edges=edges, edge_rows=(n, 2 * n), input_values=embed)
    (plain, plain_grad), (summed_logits, summed_grad) = _per_head_and_summed(model, tokens, tmask, patch)
    assert not torch.allclose(plain[n : 2 * n], model(base, base_mask)[0].detach(), atol=1e-3)  # the edges move it
    assert torch.allclose(summed_logits, plain, atol=1e-5)
    for name, grad in plain_grad.items():
        assert (summed_grad[name] - grad).abs().max() <= 1e-5 * max(float(grad.abs().max()), 1.0), name
