"""siit.transformer's edge patching (Patch.edges, siit.edges) equals patching one reader's input
through TransformerLens-style hooks, and agrees with node patching where the two must agree."""

from __future__ import annotations

import pytest
import torch

from eval.core.circuit import parse_node
from eval.core.graph import graph_of
from siit.edges import EdgeLayout, sample_edges
from siit.transformer import Patch
from test_transformer import _padded_batch, _random_model


def test_layout_names_the_graph_edges() -> None:
    layout = EdgeLayout(3, 2)
    names = set(layout.names(layout.valid()))
    assert names == set(graph_of({"n_layers": 3, "n_heads": 2}, "qkv").edges)


def test_non_circuit_drops_every_qkv_edge_of_a_labelled_head_edge() -> None:
    layout = EdgeLayout(2, 2)
    nc = layout.non_circuit([("input", "a0.h1"), ("a0.h1", "m1"), ("m1", "logits")])
    dropped = set(layout.names(layout.valid() & ~nc))
    assert dropped == {("input", "a0.h1<q>"), ("input", "a0.h1<k>"), ("input", "a0.h1<v>"),
                       ("a0.h1", "m1"), ("m1", "logits")}


def _runs(causal: bool):
    cfg, model = _random_model(causal, "gelu")
    tokens, mask = _padded_batch(seed=1)
    src_tokens, src_mask = _padded_batch(seed=2)
    with torch.no_grad():
        clean = model(tokens, mask, return_acts=True)[1]
        src = model(src_tokens, src_mask, return_acts=True)[1]
        embeds = model._embed(tokens, mask.bool()), model._embed(src_tokens, src_mask.bool())
    return model, tokens, mask, clean, src, embeds


def _sender_value(acts: torch.Tensor, embed: torch.Tensor, sender: str, n_heads: int) -> torch.Tensor:
    node = parse_node(sender)
    if node.kind == "input":
        return embed
    return acts[node.layer, :, :, n_heads if node.kind == "mlp" else node.head]


def _hooked_reference(model, tokens, mask, clean, src, embeds, sender: str, reader: str) -> torch.Tensor:
    """Logits with `reader`'s input alone moved by (source - clean) of `sender`, through hooks."""
    H = model.n_heads
    delta = _sender_value(src, embeds[1], sender, H) - _sender_value(clean, embeds[0], sender, H)
    node = parse_node(reader)
    if node.kind == "logits":
        name, fn = f"blocks.{model.n_layers - 1}.hook_resid_post", lambda a, hook: a + delta
    elif node.kind == "mlp":
        name, fn = f"blocks.{node.layer}.hook_mlp_in", lambda a, hook: a + delta
    else:
        attn = model.blocks[node.layer].attn
        W = {"q": attn.W_Q, "k": attn.W_K, "v": attn.W_V}[node.qkv][node.head]

        def fn(a, hook):
            a = a.clone()
            a[:, :, node.head] += delta @ W
            return a
        name = f"blocks.{node.layer}.attn.hook_{node.qkv}"
    with torch.no_grad():
        return model.run_with_hooks(tokens, attention_mask=mask, fwd_hooks=[(name, fn)])


@pytest.mark.parametrize("causal", [True, False])
def test_one_edge_equals_patching_its_reader_through_hooks(causal: bool) -> None:
    model, tokens, mask, clean, src, embeds = _runs(causal)
    layout = EdgeLayout(model.n_layers, model.n_heads)
    valid = layout.valid()
    B = tokens.shape[0]
    moved = 0
    for u, r in valid.nonzero().tolist():
        edges = torch.zeros(B, *valid.shape, dtype=torch.bool)
        edges[:, u, r] = True
        patch = Patch(mask=torch.zeros(B, model.n_layers, model.n_heads + 1, dtype=torch.bool), values=src,
                      edges=edges, input_values=embeds[1])
        with torch.no_grad():
            got = model(tokens, mask, patch)[0]
        want = _hooked_reference(model, tokens, mask, clean, src, embeds, layout.senders[u], layout.readers[r])
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        moved += int((got - model(tokens, mask)[0]).abs().max() > 1e-3)
    assert moved > valid.sum() // 2  # the patches do something: the comparison is not vacuous


@pytest.mark.parametrize("causal", [True, False])
def test_every_out_edge_of_a_node_equals_patching_the_node(causal: bool) -> None:
    model, tokens, mask, clean, src, embeds = _runs(causal)
    layout = EdgeLayout(model.n_layers, model.n_heads)
    B, valid = tokens.shape[0], layout.valid()
    for layer, slot in [(0, 1), (0, model.n_heads), (1, 0)]:
        u = 1 + layer * (model.n_heads + 1) + slot
        edges = valid[u].expand(B, -1).clone()
        full = torch.zeros(B, *valid.shape, dtype=torch.bool)
        full[:, u] = edges
        node = torch.zeros(B, model.n_layers, model.n_heads + 1, dtype=torch.bool)
        node[:, layer, slot] = True
        with torch.no_grad():
            by_edges = model(tokens, mask, Patch(mask=torch.zeros_like(node), values=src, edges=full,
                                                 input_values=embeds[1]))[0]
            by_node = model(tokens, mask, Patch(mask=node, values=src))[0]
        torch.testing.assert_close(by_edges, by_node, atol=1e-5, rtol=1e-5)


def test_no_edge_patched_is_the_clean_run_and_gradients_flow() -> None:
    model, tokens, mask, clean, src, embeds = _runs(False)
    layout = EdgeLayout(model.n_layers, model.n_heads)
    B = tokens.shape[0]
    none = torch.zeros(B, len(layout.senders), len(layout.readers), dtype=torch.bool)
    patch = Patch(mask=torch.zeros(B, model.n_layers, model.n_heads + 1, dtype=torch.bool), values=src,
                  edges=none, input_values=embeds[1])
    torch.testing.assert_close(model(tokens, mask, patch)[0], model(tokens, mask)[0], atol=1e-6, rtol=1e-6)
    edges = sample_edges(layout.valid(), B, "mixed", torch.Generator().manual_seed(0))
    model(tokens, mask, Patch(mask=patch.mask, values=src, edges=edges, input_values=embeds[1]))[0].sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_sampling_draws_only_non_circuit_edges() -> None:
    layout = EdgeLayout(2, 3)
    nc = layout.non_circuit([("input", "a0.h0"), ("a0.h0", "m1"), ("m1", "logits")])
    gen = torch.Generator().manual_seed(3)
    for sampling in ("one", "half", "mixed"):
        drawn = sample_edges(nc, 200, sampling, gen)
        assert not (drawn & ~nc).any()
        assert drawn.any(dim=(1, 2)).all()  # every row patches something
    one = sample_edges(nc, 50, "one", gen)
    assert (one.sum(dim=(1, 2)) == 1).all()


@pytest.mark.parametrize("causal", [True, False])
def test_reading_once_at_the_readers_block_equals_patching_the_edge(causal: bool) -> None:
    """Transformer.read_once (siit.edge_bounds): the clean residual stream entering the reader's
    block, the reader alone reading the sender's difference, the later blocks in full, gives the
    logits of a whole run that patches the edge (Patch.edges), for every edge of the model. Rows
    patching one edge each take EdgePatch's single-edge path; a row with two edges the general one."""
    model, tokens, mask, clean, src, embeds = _runs(causal)
    layout = EdgeLayout(model.n_layers, model.n_heads)
    B, valid, H = tokens.shape[0], layout.valid(), model.n_heads
    resid, none = model.residuals(tokens, mask, clean), torch.zeros(B, model.n_layers, H + 1, dtype=torch.bool)
    allowed = model.allowed_keys(mask)
    moved = 0
    for u, r in valid.nonzero().tolist():
        edges = torch.zeros(B, *valid.shape, dtype=torch.bool)
        edges[:, u, r] = True
        s = layout.senders[u]
        delta = _sender_value(src, embeds[1], s, H) - _sender_value(clean, embeds[0], s, H)
        layer, slot = divmod(r, 3 * H + 1)
        with torch.no_grad():
            whole = model(tokens, mask, Patch(mask=none, values=src, edges=edges, input_values=embeds[1]))[0]
            if layer == model.n_layers:
                once = (resid[layer] + delta) @ model.unembed.W_U + model.unembed.b_U
            else:
                head = None if slot >= 3 * H else clean[layer, :, :, slot % H]
                x = model.read_once(layer, slot, resid[layer], clean[layer, :, :, :H].sum(dim=2), head, delta, allowed)
                once = model(tokens, mask, start=(layer + 1, x))[0]
        torch.testing.assert_close(once, whole, atol=1e-5, rtol=1e-5)
        moved += int((whole - model(tokens, mask)[0]).abs().max() > 1e-3)
    assert moved > valid.sum() // 2  # the patches do something: the comparison is not vacuous
    two = torch.zeros(B, *valid.shape, dtype=torch.bool)
    two[:, 0, -1] = two[:, 1, -1] = True  # input and a0.h0 -> logits, together
    with torch.no_grad():
        both = model(tokens, mask, Patch(mask=none, values=src, edges=two, input_values=embeds[1]))[0]
    d = sum(_sender_value(src, embeds[1], layout.senders[u], H) - _sender_value(clean, embeds[0], layout.senders[u], H)
            for u in (0, 1))
    torch.testing.assert_close(both, (resid[-1] + d) @ model.unembed.W_U + model.unembed.b_U, atol=1e-5, rtol=1e-5)
