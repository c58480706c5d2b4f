"""The same entry files under either TransformerLens major: the model type, the weights file both
ways (3.x layout on disk), attention masks read as 3.x does, and a user's own TransformerBridge.

tests/data/tl3_hooks.safetensors was written by transformer-lens 3.9 (HookedTransformer weights and
logits); tests/data/tl4_written.safetensors by 4.3 (a TransformerBridge with TL 4's own random
init, saved through eval.core.tlens.state_dict_3x, and its logits). Each major must load the other's
file and compute the recorded logits. Regenerate the 4.x file under 4.x with
`python tests/test_eval/test_tlens_versions.py`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from eval.patching.hooks import forward
from eval.core.tlens import build_hooked, hooked_config, is_bridge, state_dict_3x, tl_major

DATA = Path(__file__).parents[1] / "data"
TL4_FILE = DATA / "tl4_written.safetensors"
on_4x = pytest.mark.skipif(tl_major() < 4, reason="needs transformer-lens 4.x")


def _config(causal: bool) -> dict:
    return hooked_config(n_layers=2, d_model=12, n_heads=3, d_head=4, d_mlp=20, d_vocab=7, d_vocab_out=5,
                         n_ctx=6, causal=causal, act_fn="gelu")


def _load(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path))


def _split(data: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix):]: v for k, v in data.items() if k.startswith(prefix)}


@pytest.mark.smoke
def test_build_hooked_gives_the_installed_majors_model() -> None:
    model = build_hooked(_config(True))
    if tl_major() == 3:
        import transformer_lens

        assert isinstance(model, transformer_lens.HookedTransformer) and not is_bridge(model)
    else:
        from transformer_lens.model_bridge import TransformerBridge

        assert isinstance(model, TransformerBridge) and is_bridge(model)
    assert not model.training


@pytest.mark.smoke
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_weights_round_trip_in_the_installed_major(causal: bool) -> None:
    weights = _split(_load(DATA / "tl3_hooks.safetensors"), f"{'causal' if causal else 'bidirectional'}/weights/")
    back = state_dict_3x(build_hooked(_config(causal), weights))
    assert set(back) == set(weights)
    assert all(torch.equal(back[k], weights[k]) for k in weights)


@pytest.mark.smoke
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_file_written_by_3x_computes_the_same_here(causal: bool) -> None:
    data = _load(DATA / "tl3_hooks.safetensors")
    tag = "causal" if causal else "bidirectional"
    model = build_hooked(_config(causal), _split(data, f"{tag}/weights/"))
    x = _split(data, "inputs/")
    got = forward(model, x["base_tokens"], x["base_mask"])
    assert (got - data[f"{tag}/tl3/logits"]).abs().max() <= 1e-5


@pytest.mark.smoke
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_file_written_by_4x_computes_the_same_here(causal: bool) -> None:
    data = _load(TL4_FILE)
    tag = "causal" if causal else "bidirectional"
    model = build_hooked(_config(causal), _split(data, f"{tag}/weights/"))
    got = forward(model, data["inputs/tokens"], data["inputs/mask"])
    assert (got - data[f"{tag}/logits"]).abs().max() <= 1e-5
    assert data[f"{tag}/logits"].abs().max() > 0.1  # the recording is not trivially zero


def test_bad_state_dict_is_one_value_error() -> None:
    weights = _split(_load(DATA / "tl3_hooks.safetensors"), "causal/weights/")
    weights.pop("blocks.1.mlp.W_in")
    with pytest.raises(ValueError, match="state dict does not fit the config"):
        build_hooked(_config(True), weights)


def _plain_bridge(config: dict, weights: dict[str, torch.Tensor]):
    """A TransformerBridge as a user would build it from the entry files, without eval.core.tlens."""
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge
    from transformer_lens.utilities.tl_checkpoint_conversion import convert_tl_checkpoint

    cfg = {k: v for k, v in config.items() if k not in ("use_attn_result", "use_split_qkv_input")}
    bridge = TransformerBridge.boot_native(TransformerBridgeConfig.from_dict(cfg))
    bridge.load_state_dict(convert_tl_checkpoint(dict(weights), bridge.cfg), strict=True)
    return bridge.eval()


@on_4x
@pytest.mark.smoke
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_a_plain_bridge_is_read_as_3x_through_the_adapter(causal: bool) -> None:
    """4.x's own reading of a mask differs from 3.x's (pad positions; PAD keys under bidirectional
    attention); eval.patching.hooks reads any bridge as 3.x did."""
    data = _load(DATA / "tl3_hooks.safetensors")
    tag = "causal" if causal else "bidirectional"
    bridge = _plain_bridge(_config(causal), _split(data, f"{tag}/weights/"))
    x, want = _split(data, "inputs/"), data[f"{tag}/tl3/logits"]
    with torch.no_grad():
        native = bridge(x["base_tokens"], attention_mask=x["base_mask"])
    assert (native - want).abs().max() > 1e-2  # why the adapter exists
    assert (forward(bridge, x["base_tokens"], x["base_mask"]) - want).abs().max() <= 1e-5
    # and the bridge is left as it was: no hook of the adapter's stays behind
    with torch.no_grad():
        assert torch.equal(bridge(x["base_tokens"], attention_mask=x["base_mask"]), native)


@on_4x
@pytest.mark.smoke
def test_users_own_bridge_gets_the_same_report(compiled) -> None:
    """Case 11 is bidirectional with inputs of every length. Its compiled weights are perturbed (as
    training would) so that PAD keys matter: a bridge read the 4.x way would compute otherwise."""
    from eval.patching.task import make_task
    from zoo.targets import evaluate, resolve_target

    cc = compiled("11")
    gen = torch.Generator().manual_seed(0)
    weights = {k: v + 0.05 * torch.randn(v.shape, generator=gen) for k, v in cc.state_dict.items()}
    target = dataclasses.replace(resolve_target(cc), model=build_hooked(cc.config, weights))
    theirs = _plain_bridge(cc.config, weights)
    task = make_task(case=cc.case, encoding=cc.encoding, reference=cc.model, n=32, seed=0)
    with torch.no_grad():
        native = theirs(task.tokens, attention_mask=task.mask)
    real = task.positions  # label positions: real tokens, which PAD keys reach under bidirectional attention
    assert not torch.allclose(native[real], forward(target.model, task.tokens, task.mask)[real], atol=1e-3)
    settings = dict(n=32, stability_seeds=1, permutations=20)
    methods = ["random", "activation_patching", "gradient_attribution", "ablation_scan", "greedy"]
    ours = evaluate(target, methods, **settings)
    user = evaluate(dataclasses.replace(target, model=theirs), methods, **settings)
    for a, b in zip(ours.methods, user.methods, strict=True):
        # repr: nan == nan where a circuit holds every component (node AUROC undefined)
        assert repr((a.node.auroc, a.edge.auroc)) == repr((b.node.auroc, b.edge.auroc)), a.key
        assert a.causal_bench.faithfulness == pytest.approx(b.causal_bench.faithfulness, abs=1e-6), a.key
        if a.mib is not None:
            assert a.mib.cpr == pytest.approx(b.mib.cpr, abs=1e-6), a.key


def write_fixture() -> None:
    """Run under transformer-lens 4.x: a bridge with TL 4's own init, saved in the 3.x layout."""
    import importlib.metadata

    from safetensors.torch import save_file

    assert tl_major() >= 4, "this file must come from transformer-lens 4.x"
    gen = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, 6, (6, 6), generator=gen)
    mask = (torch.arange(6)[None] < torch.tensor([6, 5, 3, 2, 6, 4])[:, None]).long()
    mask[-1] = mask[-1].flip(0)
    tokens = torch.where(mask.bool(), tokens, 6)
    tensors = {"inputs/tokens": tokens, "inputs/mask": mask}
    for causal in (True, False):
        tag = "causal" if causal else "bidirectional"
        config = {**_config(causal), "seed": 3}
        model = build_hooked(config)  # TL 4's own random init
        with torch.no_grad():  # and non-zero biases, which its init leaves at zero
            for name, p in model.named_parameters():
                if name.endswith("bias"):
                    p.normal_(0, 0.3, generator=gen)
        tensors.update({f"{tag}/weights/{k}": v for k, v in state_dict_3x(model).items()})
        tensors[f"{tag}/logits"] = forward(model, tokens, mask)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(TL4_FILE), metadata={
        "format": "zoo-test/1", "written_by": json.dumps({"transformer-lens": importlib.metadata.version("transformer-lens"),
                                                          "torch": torch.__version__})})


if __name__ == "__main__":
    write_fixture()
