"""The edge-level methods (eval.methods.edge_patching, eval.methods.acdc, eval.methods.subnetwork_probing, eval.methods.ifr,
eval.methods.ensemble) against hand computations on tiny random models, and edge patching on compiled cases.
"""

from __future__ import annotations

import math

import pytest
import torch

from eval.patching.ablation import behaviour, behaviour_tensor, make_context
from eval.methods.acdc import AcdcOptions, acdc, acdc_metric, acdc_sweep
from eval.methods.registry import REGISTRY
from eval.methods.edge_patching import (IGOptions, PatchingOptions, eap, eap_ig_activations, eap_ig_inputs, edge_effects,
                                edge_patching, inert_edges, readers, writers)
from eval.methods.ensemble import EnsembleOptions, ensemble, normalised
from eval.core.circuit import promote
from eval.core.graph import graph_of, mib_edge_count, promote_scores
from eval.patching.hooks import adapt
from eval.methods.ifr import ifr
from eval.methods.interface import validate_output
from eval.methods.subnetwork_probing import SPOptions, edge_sp, node_sp
from eval.patching.task import TaskData, make_task
from eval.core.tlens import build_hooked, hooked_config, run_with_hooks

EDGE_KEYS = ("edge_patching", "eap", "eap_ig_inputs", "eap_ig_activations", "acdc", "node_sp", "edge_sp", "ifr",
             "ensemble")


def tiny_model(*, layers: int = 2, heads: int = 2, causal: bool = True, seed: int = 0, zero: tuple[str, ...] = ()):
    """A random HookedTransformer (TransformerBridge on 4.x) with non-zero biases; `zero` names
    3.x-layout weights set to 0."""
    from siit.initialise import init_weights
    from siit.transformer import Transformer

    config = hooked_config(n_layers=layers, d_model=4 * heads, n_heads=heads, d_head=4, d_mlp=16, d_vocab=7,
                           d_vocab_out=5, n_ctx=6, causal=causal, act_fn="gelu")
    gen = torch.Generator().manual_seed(seed)
    model = Transformer(config)
    init_weights(model, gen)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".b_" in name:
                p.normal_(0, 0.3, generator=gen)
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    for name in zero:
        weights[name].zero_()
    return build_hooked(config, weights)


def tiny_task(model, *, n: int = 8, seed: int = 0, padded: bool = True) -> TaskData:
    """Random clean / counterfactual inputs labelled by the model itself (one padded row each)."""
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 6, (2, n, 6), generator=gen)
    mask = torch.ones(2, n, 6, dtype=torch.long)
    if padded:
        mask[:, -1, 4:] = 0
        tokens = torch.where(mask.bool(), tokens, 6)
    with torch.no_grad():
        labels = [model(tokens[i], attention_mask=mask[i]).argmax(-1) for i in range(2)]
    positions = mask[0].bool().clone()
    positions[:, 0] = False
    return TaskData(tokens=tokens[0], mask=mask[0], cf_tokens=tokens[1], cf_mask=mask[1], labels=labels[0],
                    cf_labels=labels[1], positions=positions, task_kind="classification", seed=seed)


@pytest.fixture(scope="module")
def setup():
    model = tiny_model()
    task = tiny_task(model)
    return model, task, graph_of(model)


def test_registered_with_the_issue_keys():
    assert set(EDGE_KEYS) <= set(REGISTRY)
    assert list(REGISTRY)[-len(EDGE_KEYS):] == list(EDGE_KEYS)


def test_edge_patching_of_one_edge_equals_two_forward_passes_patched_by_hand(setup):
    model, task, graph = setup
    scores = edge_patching(model, task, graph=graph, options=PatchingOptions(max_rows=3 * task.n)).edge_scores
    assert set(scores) == set(graph.at("qkv").edges)
    adapter = adapt(model)
    clean_logits = adapter.forward(task.tokens, task.mask)
    cf = adapter.outputs(task.cf_tokens, task.cf_mask, ["input", "a0.h1", "m0"])
    clean = adapter.outputs(task.tokens, task.mask, ["input", "a0.h1", "m0"])
    for src, reader in [("a0.h1", "a1.h0<k>"), ("input", "a1.h1<q>"), ("m0", "m1"), ("a0.h1", "logits")]:
        # by hand: the reader's input gets + (cf - clean) of the sender, nothing else changes
        def fix(act, hook, src=src):
            return act + (cf[src] - clean[src])
        point = adapter.input_point(reader)
        if "<" in reader:  # a head's q/k/v: the residual difference through W_Q/W_K/W_V of that head
            layer, head, x = 1, int(reader[4]), reader[-2]
            W = adapter.attn[f"W_{x.upper()}"][layer, head]

            def fix(act, hook, src=src, head=head, W=W):  # noqa: F811
                act = act.clone()
                act[:, :, head] += (cf[src] - clean[src]) @ W
                return act
        with torch.no_grad():
            patched = run_with_hooks(model, task.tokens, task.mask, [(point, fix)])
        by_hand = behaviour(task, clean_logits) - behaviour(task, patched)
        assert math.isclose(scores[(src, reader)], by_hand, abs_tol=1e-5), (src, reader)


def test_batched_edge_patching_does_not_depend_on_the_batching(setup):
    model, task, graph = setup
    ctx = make_context(model, task, graph)
    edges = list(graph.at("qkv").edges)
    one = edge_effects(ctx, edges, max_rows=task.n)  # one edge per forward pass
    many = edge_effects(ctx, edges, max_rows=100 * task.n)
    assert all(math.isclose(one[e], many[e], abs_tol=1e-5) for e in edges)
    assert sum(abs(v) > 1e-4 for v in one.values()) > len(edges) // 2  # a random model: most edges matter


def test_eap_equals_first_order_estimate_by_hand(setup):
    model, task, graph = setup
    scores = eap(model, task, graph=graph).edge_scores
    adapter = adapt(model)
    cf = adapter.outputs(task.cf_tokens, task.cf_mask, writers(graph))
    dsts = readers(graph.at("qkv"))
    run = adapter.run(task.tokens, task.mask, read_outputs=writers(graph), read_inputs=dsts, grad=True)
    behaviour_tensor(task, run.logits).backward()
    for src, dst in graph.at("qkv").edges:
        by_hand = float(((run.outputs[src] - cf[src]) * run.inputs[dst].grad).sum().detach())
        assert math.isclose(scores[(src, dst)], by_hand, rel_tol=1e-4, abs_tol=1e-6), (src, dst)
    model.zero_grad(set_to_none=True)
    # first order: close to the exact effects where these are small
    exact = edge_patching(model, task, graph=graph).edge_scores
    assert scores[("m1", "logits")] == pytest.approx(exact[("m1", "logits")], abs=1e-5)  # logits are linear


def test_ig_with_one_step_equals_eap_and_more_steps_differ(setup):
    model, task, graph = setup
    base = eap(model, task, graph=graph).edge_scores
    for method in (eap_ig_inputs, eap_ig_activations):
        one = method(model, task, graph=graph, options=IGOptions(steps=1)).edge_scores
        assert all(math.isclose(one[e], base[e], rel_tol=1e-4, abs_tol=1e-6) for e in base), method.__name__
        five = method(model, task, graph=graph).edge_scores  # MIB's default Z = 5
        assert max(abs(five[e] - base[e]) for e in base) > 1e-3, method.__name__
        # stacking the steps as row blocks does not change them
        split = method(model, task, graph=graph, options=IGOptions(max_rows=task.n)).edge_scores
        assert all(math.isclose(split[e], five[e], rel_tol=1e-4, abs_tol=1e-6) for e in base)


def test_every_attribution_is_exact_on_edges_into_the_logits(setup):
    """m (a logit difference) is linear in the logits' input, so every estimate of an edge into the
    logits is its exact effect, whatever the interpolation."""
    model, task, graph = setup
    exact = edge_patching(model, task, graph=graph).edge_scores
    for method in (eap, eap_ig_inputs, eap_ig_activations):
        scores = method(model, task, graph=graph).edge_scores
        for src in writers(graph):
            assert scores[(src, "logits")] == pytest.approx(exact[(src, "logits")], abs=1e-5), method.__name__


def test_acdc_tau_zero_keeps_every_edge_that_matters_and_tau_infinity_removes_all(setup):
    model, task, graph = setup
    out = acdc(model, task, graph=graph, options=AcdcOptions(taus=(0.0, math.inf, 0.01)))
    zero, infinite, mid = out.circuits
    effects = edge_patching(model, task, graph=graph).edge_scores
    moving = {e for e, v in effects.items() if abs(v) > 1e-6}
    assert moving <= set(zero.edges)
    assert infinite.edges == frozenset() and infinite.nodes == frozenset()
    assert len(infinite.edges) <= len(mid.edges) <= len(zero.edges)
    validate_output(out, graph, source="acdc")


def test_acdc_removes_edges_that_change_nothing():
    """A model whose second layer is cut from the logits: ACDC at τ = 0 removes every edge into it."""
    model = tiny_model(seed=1, zero=("blocks.1.attn.W_O", "blocks.1.attn.b_O"))  # layer 1's heads write nothing
    task = tiny_task(model, seed=1)
    graph = graph_of(model)
    zero = acdc(model, task, graph=graph, options=AcdcOptions(taus=(0.0,))).circuits[0]
    assert not any(dst.startswith("a1.") for _, dst in zero.edges)
    assert not any(src.startswith("a1.") for src, _ in zero.edges)
    assert ("m1", "logits") in zero.edges


def naive_acdc(ctx, taus, metric):
    """ACDC as written: each τ on its own, one full forward pass per edge with every removed edge
    patched by name (no start state, no offsets, no shared row blocks)."""
    a, task, qkv = ctx.adapter, ctx.task, ctx.graph.at("qkv")
    incoming, outgoing = {}, {}
    for src, dst in qkv.edges:
        incoming.setdefault(dst, []).append(src)
        outgoing.setdefault(src, []).append((src, dst))
    out = []
    for tau in taus:
        removed, current = set(), float(metric(ctx.forward()))
        for reader in reversed(readers(qkv)):
            node = promote(reader)
            for src in reversed(incoming[reader]):
                edge = (src, reader)
                if node != "logits" and all(e in removed for e in outgoing[node]):
                    removed.add(edge)
                    continue
                run = a.run(task.tokens, task.mask, reference=ctx.reference,
                            edges={e: 1.0 for e in removed | {edge}})
                value = float(metric(run.logits))
                if value - current <= tau:
                    removed.add(edge)
                    current = value
        out.append(removed)
    return out


@pytest.mark.parametrize("causal,zero", [(True, ()), (False, ()), (True, ("blocks.1.attn.W_Q",))],
                         ids=["causal", "bidirectional", "blind-queries"])
@pytest.mark.parametrize("ablation", ["resample", "mean"])
@pytest.mark.parametrize("max_rows", [8, 2048], ids=["one-circuit-a-pass", "every-circuit-a-pass"])
def test_acdc_sweep_equals_one_pass_per_edge_and_tau(causal, zero, ablation, max_rows):
    """The sweep (start states, fixed offsets for writers before the start, dense group weights,
    τ sharing a row block, edges that move nothing removed without a pass) removes exactly what
    the plain algorithm removes, τ by τ."""
    model = tiny_model(layers=3, heads=2, causal=causal, seed=2, zero=zero)
    task = tiny_task(model, seed=2)  # one padded row
    graph = graph_of(model)
    ctx = make_context(model, task, graph, ablation)
    taus = (0.0, 1e-3, 1e-2, 3e-2, 0.1, math.inf)
    metric = acdc_metric("divergence", task, ctx.forward())
    expected = naive_acdc(ctx, taus, metric)
    assert 0 < len(expected[1]) < len(graph.at("qkv").edges)  # a grid that keeps some and removes some
    got = acdc_sweep(ctx, taus, metric, max_rows=max_rows)
    for tau, want, have in zip(taus, expected, got):
        assert have == want, f"tau={tau}: {sorted(have ^ want)}"


@pytest.mark.parametrize("method", [node_sp, edge_sp])
def test_hard_concrete_masks_at_zero_penalty_keep_the_full_model(setup, method):
    model, task, graph = setup
    out = method(model, task, graph=graph, options=SPOptions(penalties=(0.0, 30.0), steps=40))
    free, sparse = out.circuits
    assert free.nodes == frozenset(graph.components)
    if method is edge_sp:
        assert free.edges == frozenset(graph.at("qkv").edges)
        ctx = make_context(model, task, graph)
        kept = ctx.adapter.run(task.tokens, task.mask, reference=ctx.reference,
                               edges={e: 1.0 for e in graph.at("qkv").edges if e not in free.edges}).logits
        assert torch.allclose(kept, ctx.forward(), atol=1e-6)  # the full model's behaviour
    assert len(sparse.nodes) < len(free.nodes)  # a large penalty closes masks
    validate_output(out, graph, source=method.__name__)


def test_ifr_scores_are_shares_of_each_readers_input(setup):
    model, task, graph = setup
    scores = ifr(model, task, graph=graph).edge_scores
    assert set(scores) == set(graph.at("qkv").edges) and min(scores.values()) >= 0
    by_reader: dict[str, float] = {}
    for (_, dst), v in scores.items():
        by_reader[dst] = by_reader.get(dst, 0.0) + v
    # shares: at most 1 per reader (0 at a position where no sender is near the input); a reader with
    # one sender always gets all of it
    assert all(v <= 1 + 1e-5 for v in by_reader.values())
    assert by_reader["a0.h0<q>"] == pytest.approx(1.0)
    # q, k and v of a head read the same residual stream
    assert scores[("input", "a1.h0<q>")] == pytest.approx(scores[("input", "a1.h0<k>")])
    # by hand, MIB Eq. 5 for the logits: per input and real position, then averaged
    run = adapt(model).run(task.tokens, task.mask, read_outputs=writers(graph), read_inputs=["m1", "logits"])
    for reader in ("m1", "logits"):
        senders = [u for u, d in graph.at("qkv").edges if d == reader]
        per_input = []
        for b in range(task.n):
            real = [p for p in range(task.tokens.shape[1]) if task.mask[b, p]]
            total = {u: 0.0 for u in senders}
            for p in real:
                a_v = run.inputs[reader][b, p]
                prox = {u: max(float(a_v.abs().sum() - (run.outputs[u][b, p] - a_v).abs().sum()), 0.0)
                        for u in senders}
                norm = sum(prox.values())
                for u in senders:
                    total[u] += (prox[u] / norm if norm else 0.0) / len(real)
            per_input.append(total)
        for u in senders:
            assert scores[(u, reader)] == pytest.approx(sum(t[u] for t in per_input) / task.n, abs=1e-5)


def test_ensemble_is_the_mean_of_normalised_scores(setup):
    model, task, graph = setup
    out = ensemble(model, task, graph=graph).edge_scores
    parts = [normalised(m(model, task, graph=graph).edge_scores) for m in (eap, eap_ig_inputs, eap_ig_activations)]
    for e, v in out.items():
        assert v == pytest.approx(sum(p[e] for p in parts) / 3, abs=1e-6)
    assert max(abs(v) for v in out.values()) <= 1.0
    only = ensemble(model, task, graph=graph, options=EnsembleOptions(methods=("ifr",))).edge_scores
    assert only == pytest.approx(normalised(ifr(model, task, graph=graph).edge_scores))
    with pytest.raises(ValueError, match="ensemble methods"):
        ensemble(model, task, graph=graph, options=EnsembleOptions(methods=("nope",)))


def test_bad_options_fail_clearly(setup):
    model, task, graph = setup
    with pytest.raises(ValueError, match="steps"):
        eap_ig_inputs(model, task, graph=graph, options=IGOptions(steps=0))
    with pytest.raises(ValueError, match="thresholds"):
        acdc(model, task, graph=graph, options=AcdcOptions(taus=(-1.0,)))
    with pytest.raises(ValueError, match="metric"):
        acdc(model, task, graph=graph, options=AcdcOptions(metric="nope"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="penalties"):
        node_sp(model, task, graph=graph, options=SPOptions(penalties=()))


def test_six_by_four_graph_has_mibs_edge_count():
    graph = graph_of({"n_layers": 6, "n_heads": 4})
    assert len(graph.at("qkv").edges) == mib_edge_count(6, 4) == 1108
    assert len(readers(graph.at("qkv"))) == 6 * 4 * 3 + 6 + 1


@pytest.mark.parametrize("case_id", ["3", "4", "19"])
def test_edge_patching_ranks_ground_truth_edges_first_on_compiled_cases(compiled, case_id):
    cc = compiled(case_id)
    graph = graph_of(cc.model)
    task = make_task(case=cc.case, encoding=cc.encoding, reference=cc.model, n=64, seed=0)
    scores = edge_patching(cc.model, task, graph=graph).edge_scores
    ctx = make_context(cc.model, task, graph)
    for level in ("head", "qkv"):
        truth = {tuple(e) for e in cc.graph.edges}
        if level == "qkv":
            truth = {part for e in truth for part in graph.expand_to_qkv(e)}
            level_scores = {e: abs(v) for e, v in scores.items()}
        else:
            level_scores = {e: abs(v) for e, v in promote_scores(scores).items()}
        inert = set(inert_edges(ctx, sorted(truth)))
        assert all(level_scores[e] == 0.0 for e in inert)  # listed, never a silent miss
        movable = truth - inert
        assert movable, "the task moves some ground-truth edge"
        negatives = [v for e, v in level_scores.items() if e not in truth]
        assert min(level_scores[e] for e in movable) > max(negatives), level
