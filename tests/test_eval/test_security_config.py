"""config.json is data, never options: the allow-list of eval.core.model_config (types, bounds, memory
estimated before any allocation), and the graph rule that pull uses for circuit edges."""

from __future__ import annotations

import sys

import pytest

from eval.core.graph import ComputationGraph
from eval.core.model_config import MAX_MODEL_BYTES, ModelConfigError, check_model_config, estimated_bytes, tensor_shapes
from eval.core.tlens import build_hooked, hooked_config
from zoo.entry_check import edge_in_graph


def good_config(**changes):
    config = hooked_config(n_layers=2, d_model=16, n_heads=4, d_head=4, d_mlp=64, d_vocab=8,
                           d_vocab_out=3, n_ctx=6, causal=True, act_fn="gelu")
    config.update(changes)
    return config


def test_every_field_the_zoo_writes_is_allowed_and_the_tensors_are_the_models() -> None:
    from siit.transformer import Transformer

    config = good_config()
    assert check_model_config(config) == config
    assert check_model_config(good_config(attention_dir="bidirectional", act_fn="relu")) is not None
    shapes = {k: tuple(v.shape) for k, v in Transformer(config).state_dict().items()}
    assert shapes == tensor_shapes(config)


@pytest.mark.parametrize("changes,needle", [
    ({"tokenizer_name": "evil/tokenizer", "trust_remote_code": True}, "'tokenizer_name', 'trust_remote_code' not allowed"),
    ({"model_name": "gpt2"}, "'model_name' not allowed"),
    ({"n_layers": -3}, "n_layers must be an integer in [1, 48], got -3"),
    ({"n_layers": True}, "n_layers must be an integer"),
    ({"d_vocab": 10**13}, "d_vocab must be an integer in [1, 65536]"),
    ({"d_vocab": 8.0}, "d_vocab must be an integer"),
    ({"act_fn": "silu"}, "act_fn must be one of ['relu', 'gelu'], got 'silu'"),
    ({"normalization_type": "LN"}, "normalization_type must be one of [None]"),
    ({"use_attn_result": "yes"}, "use_attn_result must be true or false"),
    ({"seed": -1}, "seed must be an integer"),
])
def test_bad_fields_are_refused_with_one_line(changes, needle) -> None:
    with pytest.raises(ModelConfigError) as info:
        check_model_config(good_config(**changes))
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_every_planted_architecture_loads() -> None:
    """What `zoo train planted NAME` writes as config.json the loader accepts: planted large-circuit's 99
    heads were once refused (n_heads at most 64), so its trained entry could not be validated or scored."""
    from planted.registry import get_planted, planted_names
    from siit.config import ArchConfig
    from siit.high_level import as_task

    for name in planted_names():
        config = as_task(get_planted(name)).low_level_config(ArchConfig())
        assert check_model_config(config) == config, name


def test_missing_field_and_non_object_are_refused() -> None:
    config = good_config()
    del config["d_mlp"]
    with pytest.raises(ModelConfigError, match="lacks d_mlp"):
        check_model_config(config)
    with pytest.raises(ModelConfigError, match="JSON object"):
        check_model_config([1, 2])


def test_memory_is_estimated_before_anything_is_allocated() -> None:
    # every field within its own bound, together ~8 GiB of weights
    big = good_config(d_model=8192, d_vocab=65536, d_vocab_out=65536, n_heads=1, d_head=1, d_mlp=1, n_layers=1)
    assert estimated_bytes(big) > MAX_MODEL_BYTES
    with pytest.raises(ModelConfigError, match="refused before allocating it"):
        check_model_config(big)


def test_build_hooked_refuses_remote_code_before_transformer_lens_is_imported(monkeypatch) -> None:
    # with transformer_lens unimportable, reaching the import would raise ImportError instead
    monkeypatch.setitem(sys.modules, "transformer_lens", None)
    with pytest.raises(ModelConfigError, match="trust_remote_code"):
        build_hooked(good_config(tokenizer_name="zoo-test/evil", trust_remote_code=True))
    with pytest.raises(ImportError):
        build_hooked(good_config())  # the check passes, then the (blocked) import happens


def test_edge_rule_is_the_graphs_rule() -> None:
    graph = ComputationGraph(n_layers=3, n_heads=2)
    names = ["input", "logits", *graph.components, *(f"{n}<{x}>" for n in graph.components if n.startswith("a")
                                                        for x in "qkv")]
    for src in names:
        for dst in names:
            try:
                graph.check_edge(src, dst)
                expected = True
            except ValueError:
                expected = False
            assert edge_in_graph(src, dst) == expected, (src, dst)
