"""eval.patching.bare (the written-out passes of exact ACDC and edge patching) against the hooked
passes of eval.patching.hooks: the same logits for the same patches, on tiny random models with a
padded row, causal and bidirectional."""

from __future__ import annotations

import pytest
import torch
from test_edge_methods import tiny_model, tiny_task

from eval.core.graph import graph_of
from eval.methods.acdc import acdc_metric
from eval.methods.edge_patching import edge_effects
from eval.patching import bare
from eval.patching.ablation import make_context
from eval.patching.hooks import GroupLayout, GroupWeights, Offsets


def context(causal: bool = True, ablation: str = "resample"):
    model = tiny_model(layers=3, heads=2, causal=causal, seed=3)
    ctx = make_context(model, tiny_task(model, seed=3), graph_of(model), ablation)
    if ctx.bare is None:
        pytest.skip("this TransformerLens major builds a bridge: its passes run through hooks")
    return ctx


def random_patches(ctx, start: int, k: int, gen: torch.Generator) -> tuple[bare.Patches, dict, dict]:
    """0/1 weights on every group from `start` on, q/k/v and residual offsets; as bare.Patches and as
    Adapter.run's groups and offsets."""
    bm, n = ctx.bare, ctx.task.n
    pos, d = ctx.task.tokens.shape[1], ctx.starts[0].resid.shape[-1]
    live = bare.live_writers(bm, start)
    keys = [("logits", 0), *((kind, l) for l in range(start, bm.n_layers) for kind in ("a", "m"))]
    sources = {key: tuple(live[:bare.prefix(bm, start, key)]) for key in keys}
    sources = {key: names for key, names in sources.items() if names}
    weights = {key: (torch.rand(k, 3 * bm.n_heads if key[0] == "a" else 1, len(names), generator=gen) < 0.5).float()
               for key, names in sources.items()}
    qkv = {l: torch.randn(k, n, pos, 3, bm.n_heads, bm.d_head, generator=gen) for l in range(start, bm.n_layers)}
    resid = {("m", start): torch.randn(k, n, pos, d, generator=gen), ("logits", 0): torch.randn(k, n, pos, d, generator=gen)}
    patches = bare.Patches(start=start, resid=ctx.starts[start].resid, weights=weights, qkv_offsets=qkv,
                           resid_offsets=resid,
                           reference=torch.stack([ctx.reference[w].expand(n, pos, d) for w in live]))
    hooked = {"groups": GroupWeights(layout=GroupLayout.make(sources, bm.n_layers), weights=weights),
              "offsets": Offsets(qkv={l: o.flatten(0, 1) for l, o in qkv.items()},
                                 resid={f"m{start}": resid[("m", start)].flatten(0, 1),
                                        "logits": resid[("logits", 0)].flatten(0, 1)})}
    return patches, hooked, sources


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("start", [0, 1, 2])
def test_a_written_out_pass_equals_the_hooked_pass(causal, start):
    ctx = context(causal)
    task, k = ctx.task, 3
    patches, hooked, _ = random_patches(ctx, start, k, torch.Generator().manual_seed(start))
    allowed = bare.key_mask(ctx.bare, task.mask, task.n, task.tokens.shape[1], task.tokens.device)
    with torch.no_grad():
        want = ctx.adapter.run(task.tokens.repeat(k, 1), task.mask.repeat(k, 1), reference=ctx.reference,
                               start=ctx.starts[start], **hooked).logits
        got = bare.run(ctx.bare, patches, k, allowed)
        # the group rows compacted by the caller (as the ACDC sweep keeps them) give the same
        packed = {key: bare.pack([bare.compact(w[b]) for b in range(k)], w.shape[1])
                  for key, w in patches.weights.items() if key[0] == "a"}
        compacted = bare.run(ctx.bare, bare.Patches(**{**patches.__dict__, "packed": packed}), k, allowed)
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
    assert torch.allclose(compacted, want, atol=1e-5)


def test_compact_rows_keep_each_patched_reader_and_its_row():
    w = torch.tensor([[0., 0, 0], [1, 0, 1], [0, 0, 0], [1, 0, 1], [0, 1, 0]])
    U, at, inv = bare.compact(w)
    assert at.tolist() == [1, 3, 4] and len(U) == 2
    assert torch.equal(U[inv], w[at])
    U, at, inv = bare.compact(torch.zeros(4, 3))
    assert len(at) == 0 and len(U) == 0


def test_packed_sums_reach_each_patched_reader_once_with_its_row():
    # block 0 repeats a row over three readers, block 1 patches nothing, block 2's rows all differ
    w = torch.tensor([[[1., 0, 1], [0, 0, 0], [1, 0, 1], [0, 1, 0], [1, 0, 1]],
                      [[0., 0, 0]] * 5,
                      [[1., 0, 0], [0, 1, 0], [0, 0, 0], [0, 0, 1], [1, 1, 1]]])
    readers = w.shape[1]
    pk = bare.pack([bare.compact(wb) for wb in w], readers)
    sums = pk.rows.flatten(0, 1)  # [k·u, writers]: what each sum adds up
    got = {}
    for i, r in enumerate(pk.dst.tolist()):
        if sums[i].any():  # padding rows are zero sums, projected for their block's reader 0
            got.setdefault(r, []).append(sums[i])
    for i, r in zip(pk.src.tolist(), pk.more.tolist()):
        got.setdefault(r, []).append(sums[i])
    want = {b * readers + j: w[b, j] for b in range(len(w)) for j in range(readers) if w[b, j].any()}
    assert sorted(got) == sorted(want)
    assert all(len(rows) == 1 and torch.equal(rows[0], want[r]) for r, rows in got.items())
    assert len(pk.more) == 2  # the two readers that share block 0's row with an earlier one


def test_a_packed_group_that_misroutes_a_sum_is_refused():
    rows, i = torch.ones(2, 3, 4), torch.arange(6)
    with pytest.raises(ValueError, match="each of its k·u sums"):
        bare.Packed(rows=rows, src=None, dst=i[:5])  # one sum for no reader
    with pytest.raises(ValueError, match="each of its k·u sums"):
        bare.Packed(rows=rows, src=i[:2], dst=i)  # shared sums without their readers
    with pytest.raises(ValueError, match="one source per patched reader"):
        bare.Packed(rows=None, src=i[:2], dst=i[:3])


@pytest.mark.parametrize("ablation", ["resample", "mean"])
def test_edge_patching_written_out_equals_through_hooks(ablation):
    ctx = context(True, ablation)
    edges = ctx.graph.at("qkv").edges
    got = edge_effects(ctx, edges, max_rows=5 * ctx.task.n)
    ctx.__dict__["bare"] = None  # the cached written-out model: none, so the hooked path runs
    want = edge_effects(ctx, edges, max_rows=5 * ctx.task.n)
    assert max(abs(got[e] - want[e]) for e in edges) < 1e-5


@pytest.mark.parametrize("kind", ["divergence", "logit_diff"])
def test_acdc_metrics_score_stacked_blocks_as_each_alone(kind):
    model = tiny_model(layers=2, heads=2, seed=4)
    task = tiny_task(model, seed=4)
    ctx = make_context(model, task, graph_of(model))
    metric = acdc_metric(kind, task, ctx.forward())
    blocks = ctx.forward() + torch.randn(3, *ctx.forward().shape, generator=torch.Generator().manual_seed(0))
    stacked = metric(blocks)
    assert stacked.shape == (3,)
    assert torch.allclose(stacked, torch.stack([metric(b) for b in blocks]))


def test_no_written_out_model_where_the_blocks_differ():
    model = tiny_model()
    if bare.bare_model(model) is None:
        pytest.skip("a bridge: never written out")
    model.cfg.act_fn = "solu"  # anything but relu and gelu runs through hooks
    try:
        assert bare.bare_model(model) is None
    finally:
        model.cfg.act_fn = "gelu"


def test_sets_of_weighted_edges_written_out_equal_through_hooks():
    """Patch sets of several edges, weights other than 1, two edges into one reader."""
    from eval.methods.edge_patching import behaviour_metric, patched_metrics

    ctx = context(True)
    edges = sorted(ctx.graph.at("qkv").edges)
    gen = torch.Generator().manual_seed(5)
    sets = [{edges[int(i)]: float(w) for i, w in zip(torch.randint(0, len(edges), (3,), generator=gen),
                                                      torch.rand(3, generator=gen))} for _ in range(7)]
    sets.append({e: 0.5 for e in edges if e[1] == "logits"})  # every edge into one reader
    metric = behaviour_metric(ctx.task)
    got = patched_metrics(ctx, sets, metric, max_rows=3 * ctx.task.n)
    ctx.__dict__["bare"] = None
    want = patched_metrics(ctx, sets, metric, max_rows=3 * ctx.task.n)
    assert torch.allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_siits_own_transformer_is_written_out_as_its_hooked_passes(causal):
    """validation.json's edge sections run eval's edge patching and node ablations on siit's Transformer
    (no transformer_lens import): written out (its cfg a namespace, its unembedding W_U and b_U without a
    forward), they equal its own hooked passes, on a padded row."""
    from eval.core.tlens import build_hooked, hooked_config
    from eval.methods.edge_patching import behaviour_metric, patched_metrics
    from eval.patching.ablation import behaviour_tensor, node_metrics
    from siit.initialise import init_weights
    from siit.transformer import Transformer

    config = hooked_config(n_layers=2, d_model=8, n_heads=2, d_head=4, d_mlp=16, d_vocab=7, d_vocab_out=5,
                           n_ctx=6, causal=causal, act_fn="gelu")
    model = Transformer(config)
    init_weights(model, torch.Generator().manual_seed(1))
    task = tiny_task(build_hooked(config, model.state_dict()), seed=3)  # labels from the same weights
    ctx = make_context(model, task, graph_of(model))
    assert ctx.bare is not None
    edges = sorted(ctx.graph.at("qkv").edges)
    sets = [{e: 1.0} for e in edges] + [{e: 0.5 for e in edges if e[1] == "logits"}]
    comps = list(ctx.graph.components)
    node_sets = [[c] for c in comps] + [comps, ["a0.h1", "m1"]]
    node_metric = lambda logits: behaviour_tensor(task, logits)  # noqa: E731
    got = patched_metrics(ctx, sets, behaviour_metric(task), max_rows=4 * task.n)
    got_nodes = node_metrics(ctx, node_sets, node_metric, base=["a1.h0"], max_rows=3 * task.n)
    ctx.__dict__["bare"] = None  # the hooked passes
    want = patched_metrics(ctx, sets, behaviour_metric(task), max_rows=4 * task.n)
    want_nodes = node_metrics(ctx, node_sets, node_metric, base=["a1.h0"], max_rows=3 * task.n)
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
    assert got_nodes == pytest.approx(want_nodes, abs=1e-5)
    assert (want - want.mean()).abs().max() > 1e-3  # the patches move the metric
