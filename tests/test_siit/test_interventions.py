"""Interchange interventions, pairing, correspondence and ablation values against by-hand
references."""

from __future__ import annotations

import torch

from eval.core.circuit import Circuit
from siit.config import ArchConfig, TrainConfig
from siit.correspondence import low_level_config, make_correspondence
from siit.data import make_dataset, pair_sources
from siit.interventions import ablation_values, interchange, node_activations
from siit.metrics import Evaluator
from siit.trainer import prepare
from siit.transformer import Transformer


def test_high_level_interchange_equals_transformer_lens_patching(compiled) -> None:
    """IIT targets of the compiled model == TL's compiled model with the node replaced through
    eval.patching.hooks (itself checked against 3.x's own per-head patching in tests/test_eval/test_hooks.py)."""
    from eval.patching.hooks import adapt

    cc = compiled("3")
    high = Transformer.from_state_dict(cc.config, cc.state_dict)
    data = make_dataset(cc, high, 64, seed=5)
    sources = pair_sources(data.lengths, torch.arange(64), "independent", torch.Generator().manual_seed(1))
    adapter = adapt(cc.model)
    for node in ("m0", "a1.h0"):
        layer, s = (0, 1) if node == "m0" else (1, 0)
        mask = torch.zeros(2, 2, dtype=torch.bool)
        mask[layer, s] = True
        ours = interchange(high, data.tokens, data.mask, data.high_acts[:, sources], mask)
        with torch.no_grad():
            reference = adapter.outputs(data.tokens[sources], data.mask[sources], [node])
            ref = adapter.run(data.tokens, data.mask, reference=reference, nodes={node: 1.0}).logits
            clean = adapter.forward(data.tokens, data.mask)
        lm = data.label_mask
        assert torch.allclose(ours[lm], ref[lm], atol=1e-4)
        assert not torch.allclose(ours[lm], clean[lm], atol=1e-3)


def test_node_activations_have_no_gradient_and_patch_is_differentiable(compiled) -> None:
    cc = compiled("3")
    cfg = low_level_config(cc.config, ArchConfig())
    model = Transformer(cfg)
    torch.nn.init.normal_(model.blocks[0].mlp.W_in)
    tokens, mask = cc.encoding.encode([("a", "x"), ("x", "x", "b")])
    acts = node_activations(model, tokens, mask)
    assert not acts.requires_grad
    out = interchange(model, tokens, mask, acts.flip(1), torch.ones(2, 2, 5, dtype=torch.bool))
    assert out.requires_grad


def test_pairing_source_not_shorter_keeps_lengths_varied() -> None:
    lengths = torch.tensor([1, 2, 3, 4, 5] * 40)
    bases = torch.arange(200)
    src = pair_sources(lengths, bases, "source_not_shorter", torch.Generator().manual_seed(0))
    assert bool((lengths[src] >= lengths[bases]).all())
    assert float((lengths[src] != lengths[bases]).float().mean()) > 0.4  # lengths do differ
    src_ind = pair_sources(lengths, bases, "independent", torch.Generator().manual_seed(0))
    assert bool((lengths[src_ind] < lengths[bases]).any())


def test_mean_ablation_values_by_hand() -> None:
    acts = torch.arange(2 * 3 * 4 * 2 * 1, dtype=torch.float32).reshape(2, 3, 4, 2, 1)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]])
    mean = ablation_values(acts, mask, "mean")
    assert mean.shape == (2, 1, 4, 2, 1)
    assert torch.allclose(mean[:, 0, 0], acts[:, :, 0].mean(dim=1))
    assert torch.allclose(mean[:, 0, 2], acts[:, 1, 2])  # only sequence 1 is real at position 2
    assert bool((mean[:, 0, 3] == 0).all())  # never real
    assert bool((ablation_values(acts, mask, "zero") == 0).all())


def test_correspondence_rule_and_circuit_json(compiled) -> None:
    cc = compiled("4")  # two high-level heads in layer 1
    # InterpBench's rule (d_head = hl d_head // 2 = 3) ...
    paper = low_level_config(cc.config, ArchConfig(min_d_head=1))
    assert (paper["n_heads"], paper["d_head"], paper["n_layers"]) == (4, 3, 2)
    assert paper["d_model"] == 12 and paper["d_mlp"] == 48 and paper["act_fn"] == "gelu"
    # ... and the default, with heads at least 4 wide so distractor tasks fit
    cfg = low_level_config(cc.config, ArchConfig())
    assert (cfg["n_heads"], cfg["d_head"], cfg["n_layers"]) == (4, 4, 2)
    assert cfg["d_model"] == 16 and cfg["d_mlp"] == 64 and cfg["act_fn"] == "gelu"
    corr = make_correspondence(cc.graph, cc.config, cfg, seed=3)
    assert corr == make_correspondence(cc.graph, cc.config, cfg, seed=3)
    heads = [corr.mapping[n][0] for n in cc.graph.nodes if n.startswith("a")]
    assert len(set(heads)) == len(heads) and all(h.startswith("a1.") for h in heads)
    assert corr.mapping["m0"] == ("m0",)
    assert set(corr.aligned) | set(corr.non_aligned) == set(corr.low.nodes)
    circuit = Circuit.from_json(corr.map_circuit(cc.graph).to_json())
    assert set(circuit.nodes) == set(corr.aligned)
    assert len(circuit.edges) == len(cc.graph.edges)
    others = {make_correspondence(cc.graph, cc.config, cfg, seed=s).mapping["a1.h0"] for s in range(12)}
    assert len(others) > 1  # the draw depends on the seed


def _case_3_random_model(compiled, seed: int):
    """Case 3's training setup (small data) and a random low-level model for it."""
    s = prepare(compiled("3"), TrainConfig(n_train=64, n_val=48, batch_size=16))
    model = Transformer(s.low_config)
    torch.manual_seed(seed)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    return s, model


def test_evaluator_iia_matches_direct_computation(compiled) -> None:
    """Evaluator's batched IIA for a node == the same intervention run on its own."""
    s, model = _case_3_random_model(compiled, seed=0)
    ev: Evaluator = s.evaluator
    metrics = ev.evaluate(model)
    d = ev.data
    acts = node_activations(model, d.tokens, d.mask)[:, ev.sources]
    for i, node in enumerate(s.corr.high_nodes):
        logits = interchange(model, d.tokens, d.mask, acts, s.low_masks[i])
        ok = ((logits[..., 0] - ev.iit_targets[i]).abs() < 0.05)[d.label_mask]
        assert abs(float(ok.float().mean()) - metrics["iia_per_node"][node]) < 1e-6
    na = s.corr.non_aligned[0]
    logits = interchange(model, d.tokens, d.mask, acts, s.corr.low.mask([na]))
    ok = ((logits[..., 0] - d.labels).abs() < 0.05)[d.label_mask]
    assert abs(float(ok.float().mean()) - metrics["siia_per_node"][na]) < 1e-6


def test_run_groups_equals_each_group_run_on_its_own(compiled) -> None:
    """Evaluator.run_groups (groups batched by first patched block, started there, one shared copy
    of the source activations) == each group's interchange run from the embedding, for groups
    patched in any blocks, with resample and with fixed (mean) replacement values, on the padded
    validation inputs and on the final evaluator's every input shape (rows cut short by `present`;
    case 3 is bidirectional, so the shapes compute differently)."""
    from siit.losses import predictions

    s, model = _case_3_random_model(compiled, seed=1)
    assert s.final_evaluator.data.present is not None
    for ev in (s.evaluator, s.final_evaluator):
        d = ev.data
        names, masks = ev.groups()
        low = s.corr.low
        masks = torch.cat([masks, torch.ones_like(masks[:1]), low.mask(list(low.nodes[-2:]))[None]])
        acts = node_activations(model, d.tokens, d.mask, d.present)
        for values in (acts[:, ev.sources], ablation_values(acts, d.mask, "mean")):
            batched = ev.run_groups(model, masks, None if values.shape[1] > 1 else values)
            for i, m in enumerate(masks):
                alone = predictions(interchange(model, d.tokens, d.mask, values, m, d.present), ev.task_kind)
                assert torch.equal(batched[i], alone.reshape(batched[i].shape)), (i, names[i] if i < len(names) else i)


def test_run_groups_reuses_the_clean_run_it_is_given(compiled) -> None:
    """run_groups(acts=the clean run) gives the same predictions as computing the clean run itself,
    and runs no clean pass of its own (train_checks and validate_model pass the one they made)."""
    s, model = _case_3_random_model(compiled, seed=2)
    ev = s.final_evaluator
    d = ev.data
    _, masks = ev.groups()
    own = ev.run_groups(model, masks)
    acts = node_activations(model, d.tokens, d.mask, d.present)
    calls = []
    model.register_forward_hook(lambda _m, a, k, _o: calls.append(k.get("return_acts", False)), with_kwargs=True)
    given = ev.run_groups(model, masks, acts=acts)
    assert torch.equal(own, given)
    assert not any(calls), "a clean pass (return_acts=True) was run although the caller gave one"
