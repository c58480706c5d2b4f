"""Fast passes compute what the plain ones do: a pass that starts at a block from a cached state
(eval.patching.hooks.Start) equals the full pass, and 3.x passes without the per-head result switches equal
the model's own. These optimisations behind fast edge patching, ACDC and greedy search must not
change a score.
"""

from __future__ import annotations

import pytest
import torch

from eval.patching.ablation import behaviour, behaviour_tensor, make_context, node_metrics, run_nodes_ablated
from eval.core.circuit import head_node, mlp_node
from eval.scoring.faithfulness import greedy_path, node_behaviour
from eval.core.graph import graph_of
from eval.core.tlens import run_with_hooks
from test_edge_methods import tiny_model, tiny_task

ATOL = 1e-5


@pytest.fixture(scope="module", params=[True, False], ids=["causal", "bidirectional"])
def ctx(request):
    # seed 2: the counterfactuals move many labels (seed 0's causal model never changes its label)
    model = tiny_model(layers=3, heads=2, causal=request.param, seed=2)
    task = tiny_task(model)  # one padded row: the start keeps the attention mask
    return make_context(model, task, graph_of(model))


@pytest.mark.smoke
def test_every_start_reproduces_the_clean_logits(ctx):
    a, task = ctx.adapter, ctx.task
    full = a.forward(task.tokens, task.mask)
    starts = a.starts(task.tokens, task.mask)
    assert [s.layer for s in starts] == list(range(a.n_layers))
    for start in starts:
        run = a.run(task.tokens, task.mask, start=start)
        torch.testing.assert_close(run.logits, full, atol=ATOL, rtol=0)
        assert set(start.outputs) == {w for w in ("input", *ctx.graph.components)
                                      if w == "input" or int(w[1:].split(".")[0]) < start.layer}


@pytest.mark.smoke
@pytest.mark.parametrize("layer", [0, 1, 2])
def test_edge_and_node_patches_from_a_start_equal_the_full_pass(ctx, layer):
    """Patches at or after the start block, senders before and after it, per-row weights, a batch of
    two row blocks filled from a one-block start state."""
    a, task = ctx.adapter, ctx.task
    n = task.n
    weight = torch.cat([torch.full((n,), 1.0), torch.full((n,), 0.5)])
    edges = {("input", head_node(layer, 0, "k")): weight, ("input", "logits"): 1.0,
             (head_node(layer, 1), mlp_node(layer)): weight}
    if layer:
        edges[(mlp_node(layer - 1), head_node(layer, 1, "q"))] = 1.0
        edges[(head_node(0, 0), head_node(2, 0, "v"))] = weight
    nodes = {head_node(2, 1): weight}
    tokens, mask = task.tokens.repeat(2, 1), task.mask.repeat(2, 1)
    reference = {w: v.repeat(2, 1, 1) for w, v in ctx.reference.items()}
    full = a.run(tokens, mask, reference=reference, edges=edges, nodes=nodes, read_outputs=["m2"],
                 read_inputs=["logits"])
    start = a.starts(task.tokens, task.mask)[layer]
    run = a.run(tokens, mask, reference=reference, edges=edges, nodes=nodes, read_outputs=["m2"],
                read_inputs=["logits"], start=start)
    torch.testing.assert_close(run.logits, full.logits, atol=ATOL, rtol=0)
    torch.testing.assert_close(run.outputs["m2"], full.outputs["m2"], atol=ATOL, rtol=0)
    torch.testing.assert_close(run.inputs["logits"], full.inputs["logits"], atol=ATOL, rtol=0)
    assert (run.logits - a.forward(tokens, mask)).abs().max() > 1e-3  # the patches do something


@pytest.mark.smoke
def test_a_start_from_a_patched_pass_continues_that_pass(ctx):
    """Greedy search starts later candidates from the current circuit's own pass."""
    a, task = ctx.adapter, ctx.task
    nodes = {head_node(0, 1): 1.0, mlp_node(1): 1.0}
    start = a.starts(task.tokens, task.mask, reference=ctx.reference, nodes=nodes)[2]
    full = a.run(task.tokens, task.mask, reference=ctx.reference, nodes={**nodes, head_node(2, 0): 1.0})
    run = a.run(task.tokens, task.mask, reference=ctx.reference, nodes={head_node(2, 0): 1.0}, start=start)
    torch.testing.assert_close(run.logits, full.logits, atol=ATOL, rtol=0)


def test_the_bridges_way_of_starting_equals_skipping_blocks(ctx):
    """4.x bridges run every block and replace the start block's resid_pre; checked here on 3.x."""
    a, task = ctx.adapter, ctx.task
    start = a.starts(task.tokens, task.mask)[1]
    resid = start.resid + 0.1  # a state no prefix of this input reaches: the start must be used
    skipped = run_with_hooks(a.model, task.tokens, task.mask, start=(1, resid))
    replaced = run_with_hooks(a.model, task.tokens, task.mask, start=(1, resid), skip_blocks=False)
    torch.testing.assert_close(skipped, replaced, atol=ATOL, rtol=0)
    assert (skipped - a.forward(task.tokens, task.mask)).abs().max() > 1e-3


def test_patches_before_the_start_are_refused(ctx):
    a, task = ctx.adapter, ctx.task
    start = a.starts(task.tokens, task.mask)[1]
    with pytest.raises(ValueError, match="cannot patch or read"):
        a.run(task.tokens, task.mask, reference=ctx.reference, edges={("input", "a0.h0<q>"): 1.0}, start=start)
    with pytest.raises(ValueError, match="cannot patch or read"):
        a.run(task.tokens, task.mask, reference=ctx.reference, nodes={"m0": 1.0}, start=start)


@pytest.mark.smoke
def test_passes_without_the_heavy_3x_switches_equal_the_model_and_restore_them(ctx):
    """eval.patching.hooks turns 3.x's use_attn_result / use_split_qkv_input off for its passes (they cost
    most of a pass); the model computes the same and keeps its switches."""
    model, task = ctx.model, ctx.task
    before = {n: getattr(model.cfg, n, None) for n in ("use_attn_result", "use_split_qkv_input")}
    with torch.no_grad():
        direct = model(task.tokens, attention_mask=task.mask)  # the config's own (heavy) path on 3.x
    run = ctx.adapter.run(task.tokens, task.mask, reference=ctx.reference, nodes={"a1.h0": 1.0})
    torch.testing.assert_close(ctx.adapter.forward(task.tokens, task.mask), direct, atol=ATOL, rtol=0)
    assert (run.logits - direct).abs().max() > 1e-3
    assert {n: getattr(model.cfg, n, None) for n in before} == before


@pytest.mark.smoke
def test_batched_node_ablations_equal_one_pass_each(ctx):
    """eval.patching.ablation.node_metrics (activation patching, ablation scan, greedy) against
    run_nodes_ablated, one full pass per set, with and without a base set ablated throughout."""
    task = ctx.task
    comps = list(ctx.graph.components)
    sets = [[c] for c in comps] + [[], comps, ["m2", "a0.h1"], ["a1.h0", "a2.h1"]]
    for base in ([], ["a0.h0", "m1"]):
        got = node_metrics(ctx, sets, lambda logits: behaviour_tensor(task, logits), base=base, max_rows=3 * task.n)
        want = [behaviour(task, run_nodes_ablated(ctx, {*s, *base})) for s in sets]
        assert got == pytest.approx(want, abs=1e-5)
    assert len(set(round(v, 4) for v in want)) > 3  # the sets differ in effect


@pytest.mark.parametrize("kind", ["mean", "zero"])
def test_batched_node_ablations_equal_one_pass_each_under_mean_and_zero(ctx, kind):
    """node_metrics' passes begin after their first block's attention (eval.patching.after_attention);
    under mean and zero ablation too (a reference of every row alike) they equal a full pass per set."""
    c = make_context(ctx.model, ctx.task, ctx.graph, kind)
    assert c.bare is not None  # the written-out path is the one under test
    task, comps = c.task, list(c.graph.components)
    sets = [[x] for x in comps] + [[], comps, ["a2.h0", "m2"], ["a0.h1", "m0", "a1.h1"]]
    for base in ([], ["a1.h0", "m2"]):
        got = node_metrics(c, sets, lambda logits: behaviour_tensor(task, logits), base=base, max_rows=2 * task.n)
        want = [behaviour(task, run_nodes_ablated(c, {*s, *base})) for s in sets]
        assert got == pytest.approx(want, abs=1e-5)


def test_batched_greedy_path_equals_the_one_pass_per_candidate_walk(ctx):
    nb = node_behaviour(ctx)
    comps = list(ctx.graph.components)
    path = greedy_path(nb, comps)
    keep, full, removed, after = list(comps), nb.beta(comps), [], []
    while keep:  # the walk as it was written before batching: one β per candidate
        f, node = max(((nb.beta([k for k in keep if k != c]) / full, c) for c in keep), key=lambda t: (t[0], t[1]))
        removed.append(node)
        after.append(f)
        keep.remove(node)
    assert path.removed == tuple(removed)
    assert path.after == pytest.approx(after, abs=1e-5)


@pytest.mark.smoke
def test_an_edge_matrix_equals_per_row_edge_weights(ctx):
    """ACDC and edge SP pass many edges as one [blocks, edges] matrix; it patches what the per-edge
    mapping with per-row weights patches, values and gradients."""
    a, task = ctx.adapter, ctx.task
    n, k = task.n, 3
    keys = (("input", "a1.h0<q>"), ("a0.h1", "a2.h1<v>"), ("m0", "m1"), ("a1.h1", "logits"), ("m1", "a2.h0<k>"))
    W = torch.rand(k, len(keys), generator=torch.Generator().manual_seed(0), requires_grad=True)
    tokens, mask = task.tokens.repeat(k, 1), task.mask.repeat(k, 1)
    reference = {w: v.repeat(k, 1, 1) for w, v in ctx.reference.items()}
    extra = {("input", "m2"): torch.linspace(0, 1, k * n)}  # a per-row weight beside the block matrix
    by_matrix = a.run(tokens, mask, reference=reference, edges=extra, edge_matrix=(keys, W), grad=True).logits
    (g_matrix,) = torch.autograd.grad(by_matrix.square().sum(), [W])
    rows = W.repeat_interleave(n, dim=0)  # [k·n, edges]
    by_edge = a.run(tokens, mask, reference=reference, grad=True,
                    edges={**extra, **{e: rows[:, j] for j, e in enumerate(keys)}}).logits
    (g_edge,) = torch.autograd.grad(by_edge.square().sum(), [W])
    torch.testing.assert_close(by_matrix, by_edge, atol=ATOL, rtol=0)
    torch.testing.assert_close(g_matrix, g_edge, atol=1e-4, rtol=1e-4)
    assert g_matrix.abs().min() > 0


def test_one_senders_readers_projected_without_their_difference(ctx):
    """Layer 0's q/k/v readers read the input alone: a pass that reads none of their inputs projects the
    input's difference through every reader's weights and skips Δ (edge_groups.Group.projected); the
    same logits and gradients as a pass that reads one of them, and so makes Δ."""
    a, task = ctx.adapter, ctx.task
    n, k = task.n, 3
    keys = (("input", "a0.h0<q>"), ("input", "a0.h1<k>"), ("input", "a0.h1<v>"), ("input", "a0.h0<v>"),
            ("input", "a1.h0<q>"), ("a0.h1", "logits"))
    W = torch.rand(k, len(keys), generator=torch.Generator().manual_seed(2), requires_grad=True)
    tokens, mask = task.tokens.repeat(k, 1), task.mask.repeat(k, 1)
    reference = {w: v.repeat(k, 1, 1) for w, v in ctx.reference.items()}
    runs = [a.run(tokens, mask, reference=reference, edge_matrix=(keys, W), grad=True, read_inputs=reads)
            for reads in ((), ("a0.h1<q>",))]
    grads = [torch.autograd.grad(r.logits.square().sum(), [W])[0] for r in runs]
    torch.testing.assert_close(runs[0].logits, runs[1].logits, atol=ATOL, rtol=0)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-4, rtol=1e-4)
    assert grads[0][:, :4].abs().min() > 0  # each layer-0 edge moves the output


@pytest.mark.smoke
def test_groups_reading_different_senders_of_one_layer(ctx):
    """Edge patches are summed per chunk of senders (one layer's heads, an MLP, the input), each
    chunk's differences made once per pass. Two readers that see different heads of layer 0 each
    take only their own: the same values and gradients as when both list every head, the others at 0."""
    a, task = ctx.adapter, ctx.task
    n, k = task.n, 2
    keys = (("a0.h0", "a1.h0<q>"), ("a0.h1", "m1"), ("a0.h1", "logits"))
    pad = (("a0.h1", "a1.h0<q>"), ("a0.h0", "m1"), ("a0.h0", "logits"))
    W = torch.rand(k, len(keys), generator=torch.Generator().manual_seed(1), requires_grad=True)
    tokens, mask = task.tokens.repeat(k, 1), task.mask.repeat(k, 1)
    reference = {w: v.repeat(k, 1, 1) for w, v in ctx.reference.items()}
    own = a.run(tokens, mask, reference=reference, edge_matrix=(keys, W), grad=True).logits
    (g_own,) = torch.autograd.grad(own.square().sum(), [W])
    padded = a.run(tokens, mask, reference=reference, grad=True,
                   edge_matrix=(keys + pad, torch.cat([W, torch.zeros(k, len(pad))], dim=1))).logits
    (g_padded,) = torch.autograd.grad(padded.square().sum(), [W])
    torch.testing.assert_close(own, padded, atol=ATOL, rtol=0)
    torch.testing.assert_close(g_own, g_padded, atol=1e-5, rtol=1e-5)
    assert (own - a.forward(tokens, mask)).abs().max() > 1e-3
    single = {("a0.h0", "a1.h0<q>"): 1.0, ("a0.h1", "m1"): 1.0}
    torch.testing.assert_close(a.run(task.tokens, task.mask, reference=ctx.reference, edges=single).logits,
                               a.run(task.tokens, task.mask, reference=ctx.reference,
                                     edges={**single, ("a0.h1", "a1.h0<q>"): 0.0}).logits, atol=ATOL, rtol=0)


@pytest.mark.parametrize("block", [1, 2])
def test_block_chunks_change_no_value(ctx, monkeypatch, block):
    """Senders' differences are stacked by blocks of layers as well as by layer (eval.patching.edge_groups'
    BLOCK_LAYERS, 4 by default, more than this 3-layer model has): every edge patched with its own
    weight per row block gives the same logits and gradients whatever the blocking."""
    import eval.patching.edge_groups as edge_groups

    a, task = ctx.adapter, ctx.task
    n, k = task.n, 2
    keys = tuple(ctx.graph.at("qkv").edges)
    W = torch.rand(k, len(keys), generator=torch.Generator().manual_seed(2), requires_grad=True)
    tokens, mask = task.tokens.repeat(k, 1), task.mask.repeat(k, 1)
    reference = {w: v.repeat(k, 1, 1) for w, v in ctx.reference.items()}

    def run():
        logits = a.run(tokens, mask, reference=reference, edge_matrix=(keys, W), grad=True).logits
        return logits.detach(), torch.autograd.grad(logits.square().sum(), [W])[0]

    logits, grad = run()
    monkeypatch.setattr(edge_groups, "BLOCK_LAYERS", block)
    assert edge_groups.chunk_cover(3, False)[0] == (0, block, True)  # a block chunk is in use
    blocked, blocked_grad = run()
    torch.testing.assert_close(blocked, logits, atol=ATOL, rtol=0)
    torch.testing.assert_close(blocked_grad, grad, atol=1e-4, rtol=1e-4)
    assert (logits - a.forward(tokens, mask)).abs().max() > 1e-3


@pytest.mark.parametrize("layers", [1, 5])
def test_every_edge_into_the_logits_gives_the_counterfactual_logits(layers):
    """The logits read the sum of every writer; patching all of their edges replaces it with the
    reference run's sum, whatever the chunks it is summed by (5 layers: a block of 4 and one more)."""
    model = tiny_model(layers=layers, heads=2, seed=3)
    task = tiny_task(model)
    ctx = make_context(model, task, graph_of(model))
    edges = {e: 1.0 for e in ctx.graph.at("qkv").edges if e[1] == "logits"}
    assert len(edges) == 1 + 3 * layers
    patched = ctx.adapter.run(task.tokens, task.mask, reference=ctx.reference, edges=edges).logits
    cf = ctx.adapter.forward(task.cf_tokens, task.cf_mask)
    torch.testing.assert_close(patched, cf, atol=ATOL, rtol=0)
    assert (cf - ctx.adapter.forward(task.tokens, task.mask)).abs().max() > 1e-3


def test_group_weights_and_offsets_equal_the_edges_they_stand_for(ctx):
    """ACDC's pass: edges from writers the pass recomputes as dense weights on a GroupLayout, edges
    from writers before the start as fixed offsets (reference - clean, through W_Q/K/V for a head's
    input), a reference of one block's rows for two row blocks: the logits of the same edges
    patched by name from the embedding."""
    from eval.patching.hooks import GroupLayout, GroupWeights, Offsets, order

    a, task = ctx.adapter, ctx.task
    n, k, start = task.n, 2, 1
    gen = torch.Generator().manual_seed(4)
    edges = [e for e in ctx.graph.at("qkv").edges if not e[1].startswith(("a0.", "m0"))]  # readers from the start
    weights = torch.randint(0, 2, (k, len(edges)), generator=gen).float()
    clean = a.outputs(task.tokens, task.mask, ctx.reference)
    live = {e for e in edges if order(e[0])[0] >= start}  # writers the pass recomputes
    sources = {}
    for src, dst in live:
        sources.setdefault(_group_slot(dst, a.n_heads)[0], set()).add(src)
    layout = GroupLayout.make({key: tuple(sorted(names, key=order)) for key, names in sources.items()}, a.n_layers)
    group_w = {key: torch.zeros(k, 3 * a.n_heads if key[0] == "a" else 1, len(names))
               for key, names in layout.sources.items()}
    qkv = {l: torch.zeros(k, n, *clean["input"].shape[1:2], 3, a.n_heads, a.attn["W_Q"].shape[-1])
           for l in range(start, a.n_layers)}
    resid = {r: torch.zeros(k, *clean["input"].shape) for r in ("logits", *(f"m{l}" for l in range(start, a.n_layers)))}
    for j, (src, dst) in enumerate(edges):
        key, row = _group_slot(dst, a.n_heads)
        for b in range(k):
            if not weights[b, j]:
                continue
            if (src, dst) in live:
                group_w[key][b, row, layout.sources[key].index(src)] = 1.0
                continue
            move = ctx.reference[src].expand_as(clean[src]) - clean[src]
            if key[0] == "a":
                W = a.attn[f"W_{'QKV'[row // a.n_heads]}"][key[1], row % a.n_heads]
                qkv[key[1]][b, :, :, row // a.n_heads, row % a.n_heads] += move @ W
            else:
                resid["logits" if key[0] == "logits" else f"m{key[1]}"][b] += move
    tokens, mask = task.tokens.repeat(k, 1), task.mask.repeat(k, 1)
    got = a.run(tokens, mask, reference=ctx.reference, start=ctx.starts[start],
                groups=GroupWeights(layout=layout, weights=group_w),
                offsets=Offsets(qkv={l: o.flatten(0, 1) for l, o in qkv.items()},
                                resid={r: o.flatten(0, 1) for r, o in resid.items()})).logits
    reference = {w: v.expand_as(clean[w]).repeat(k, 1, 1) for w, v in ctx.reference.items()}
    rows_w = weights.repeat_interleave(n, dim=0)
    want = a.run(tokens, mask, reference=reference, edges={e: rows_w[:, j] for j, e in enumerate(edges)}).logits
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    assert (want - a.forward(tokens, mask)).abs().max() > 1e-3
    assert live and len(live) < len(edges)  # both kinds are in use


def _group_slot(reader: str, n_heads: int) -> tuple[tuple[str, int], int]:
    if reader == "logits":
        return ("logits", 0), 0
    if reader.startswith("m"):
        return ("m", int(reader[1:])), 0
    layer, rest = reader[1:].split(".h")
    head, x = rest[:-3], rest[-2]
    return ("a", int(layer)), "qkv".index(x) * n_heads + int(head)


def test_group_layouts_and_offsets_refuse_what_they_cannot_do(ctx):
    from eval.patching.hooks import GroupLayout, GroupWeights, Offsets

    a, task = ctx.adapter, ctx.task
    with pytest.raises(ValueError, match="does not feed"):
        GroupLayout.make({("a", 1): ("a1.h0",)}, a.n_layers)
    with pytest.raises(ValueError, match="forward order"):
        GroupLayout.make({("m", 1): ("a1.h0", "a0.h0")}, a.n_layers)
    layout = GroupLayout.make({("m", 1): ("a0.h0", "a1.h0")}, a.n_layers)
    with pytest.raises(ValueError, match="weights must be"):
        a.run(task.tokens, task.mask, reference=ctx.reference,
              groups=GroupWeights(layout=layout, weights={("m", 1): torch.ones(1, 1, 3)}))
    with pytest.raises(ValueError, match="not both"):
        a.run(task.tokens, task.mask, reference=ctx.reference, edges={("input", "m1"): 1.0},
              groups=GroupWeights(layout=layout, weights={("m", 1): torch.ones(1, 1, 2)}))
    with pytest.raises(ValueError, match="comes before"):
        a.run(task.tokens, task.mask, reference=ctx.reference, start=ctx.starts[2],
              groups=GroupWeights(layout=layout, weights={("m", 1): torch.ones(1, 1, 2)}))
    off = torch.zeros(task.n, task.tokens.shape[1], 3, a.n_heads, a.attn["W_Q"].shape[-1])
    with pytest.raises(ValueError, match="read inputs"):
        a.run(task.tokens, task.mask, offsets=Offsets(qkv={1: off}), read_inputs=["a1.h0<q>"])
    with pytest.raises(ValueError, match="offset of m0"):
        a.run(task.tokens, task.mask, start=ctx.starts[1], offsets=Offsets(resid={"m0": torch.zeros(task.n, 6, 8)}))
