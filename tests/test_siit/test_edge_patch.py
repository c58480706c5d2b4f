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
def test_a_run_started_at_the_readers_block_equals_the_whole_run(causal: bool) -> None:
    """Patch.clean: an edge into block l run from l on (the earlier senders' differences taken from
    the clean run) gives the logits of the run from the embedding, for one edge per row (the gather
    path) and for rows with several (the batched-matmul path)."""
    model, tokens, mask, clean, src, embeds = _runs(causal)
    layout = EdgeLayout(model.n_layers, model.n_heads)
    B, valid = tokens.shape[0], layout.valid()
    resid = model.residuals(tokens, mask, clean)
    none = torch.zeros(B, model.n_layers, model.n_heads + 1, dtype=torch.bool)
    for layer in range(1, model.n_layers + 1):
        readers = [r for r in range(valid.shape[1]) if r // layout.first_reader(1) == layer]
        for several in (False, True):
            edges = torch.zeros(B, *valid.shape, dtype=torch.bool)
            for row in range(B):
                r = readers[row % len(readers)]
                senders = valid[:, r].nonzero().flatten()
                edges[row, senders[row % len(senders)], r] = True
                if several:
                    edges[row, senders[-1], r] = True
            with torch.no_grad():
                whole = model(tokens, mask, Patch(mask=none, values=src, edges=edges, input_values=embeds[1]))[0]
                late = model(tokens, mask, Patch(mask=none, values=src, edges=edges, input_values=embeds[1],
                                                 clean=(clean, embeds[0])), start=(layer, resid[layer]))[0]
            torch.testing.assert_close(late, whole, atol=1e-5, rtol=1e-5)
            assert (whole - model(tokens, mask)[0]).abs().max() > 1e-3  # the patches do something


def test_a_later_start_refuses_an_edge_into_an_earlier_block() -> None:
    model, tokens, mask, clean, src, embeds = _runs(True)
    layout = EdgeLayout(model.n_layers, model.n_heads)
    B = tokens.shape[0]
    edges = torch.zeros(B, *layout.shape, dtype=torch.bool)
    edges[:, 0, 0] = True  # input -> a0.h0<q>
    none = torch.zeros(B, model.n_layers, model.n_heads + 1, dtype=torch.bool)
    resid = model.residuals(tokens, mask, clean)
    with pytest.raises(ValueError, match="earlier block"):
        model(tokens, mask, Patch(mask=none, values=src, edges=edges, input_values=embeds[1], clean=(clean, embeds[0])),
              start=(1, resid[1]))
    with pytest.raises(ValueError, match="clean run"):
        model(tokens, mask, Patch(mask=none, values=src, edges=edges, input_values=embeds[1]), start=(1, resid[1]))
