"""The shared compiled-case cache (zoo.paths.compile_cache_dir): a fresh zoo root reuses what
another root compiled, only for the same program, and never trusts damaged weights."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from rasp_programs.lookup import get_case
from rasp_programs.compile import compile_case
from zoo.paths import compile_cache_dir

TESTS = Path(__file__).parent.parent


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_COMPILE_CACHE", str(tmp_path / "c"))
    assert compile_cache_dir() == tmp_path / "c"
    monkeypatch.setenv("ZOO_COMPILE_CACHE", "off")
    assert compile_cache_dir() is None
    monkeypatch.delenv("ZOO_COMPILE_CACHE")
    assert compile_cache_dir() == Path.home() / ".cache" / "zoo-compiled"


def test_a_fresh_root_reuses_the_shared_cache(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(TESTS)
    case = get_case("outside_case:make_case")
    shared = tmp_path / "shared"
    first = compile_case(case, tmp_path / "root-a" / "compiled", shared_cache=shared)
    second = compile_case(case, tmp_path / "root-b" / "compiled", shared_cache=shared)
    assert not first.from_cache and second.from_cache
    assert (tmp_path / "root-b" / "compiled" / case.entry_name / "model.safetensors").is_file()
    for key, tensor in first.state_dict.items():
        assert (second.state_dict[key] == tensor).all(), key
    assert second.graph == first.graph and second.encoding == first.encoding
    # another program under the same name is not served from the shared cache
    other = dataclasses.replace(case, max_seq_len=case.max_seq_len - 1)
    assert not compile_case(other, tmp_path / "root-c" / "compiled", shared_cache=shared).from_cache


def test_damaged_shared_weights_are_compiled_again(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(TESTS)
    case = get_case("outside_case:make_case")
    shared = tmp_path / "shared"
    first = compile_case(case, None, shared_cache=shared)
    (entry,) = [p for p in shared.iterdir() if p.name.startswith(case.entry_name)]
    weights = entry / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    again = compile_case(case, None, shared_cache=shared)
    assert not again.from_cache
    for key, tensor in first.state_dict.items():
        assert (again.state_dict[key] == tensor).all(), key


@pytest.mark.parametrize("case_id", ["33"])
def test_shared_cache_output_equals_rasp_evaluate(case_id, tmp_path):
    """What a second root loads from the shared cache still computes the program."""
    case = get_case(case_id)
    compile_case(case, tmp_path / "a", shared_cache=tmp_path / "shared")
    loaded = compile_case(case, tmp_path / "b", shared_cache=tmp_path / "shared")
    assert loaded.from_cache
    from siit.transformer import Transformer

    model = Transformer.from_state_dict(loaded.config, loaded.state_dict)
    seqs = case.sample(64, seed=3)
    tokens, mask = loaded.encoding.encode(seqs)
    import torch

    with torch.no_grad():
        logits = model(tokens, mask)[0]
    got = loaded.encoding.decode(logits, [len(s) for s in seqs])
    assert got == [case.evaluate(s) for s in seqs]
