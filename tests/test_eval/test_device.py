"""Device handling, tested without a GPU (issue 33).

A model on the CPU run under `torch.device("meta")` as the default device: every tensor a method
makes without naming a device lands on `meta`, and the first op that mixes it with the model's
CPU tensors raises, exactly where a GPU run would meet a CPU tensor. A method that makes every
tensor on its model's or its inputs' device (eval.core.device) runs as it does on a CPU. The
CLI's `--device` (train, validate, realism, eval, bench) resolves in eval.core.device: cuda on a
machine without one is one line and exit 2, auto is the CPU there.
"""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

from eval.core.device import DeviceError, device_of, device_record, resolve_device
from eval.core.graph import graph_of
from eval.methods.interface import call_method
from eval.methods.registry import REGISTRY
from test_edge_methods import tiny_model, tiny_task

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer on a machine without a GPU")


@pytest.fixture(scope="module")
def tiny():
    model = tiny_model()
    task = tiny_task(model, n=6)
    return model, task, graph_of(model)


class MadeOnMeta(TorchFunctionMode):
    """Records every torch call that returns a tensor on `meta` (some ops mix a meta index into a
    CPU tensor without raising, and answer wrongly instead)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.device.type == "meta":
            self.calls.append(getattr(func, "__name__", str(func)))
        return out


@pytest.mark.parametrize("key", sorted(REGISTRY))
def test_method_makes_every_tensor_on_the_models_device(tiny, key):
    model, task, graph = tiny
    expected = call_method(REGISTRY[key], model, task, graph=graph, seed=0, ablation="resample")
    with torch.device("meta"), MadeOnMeta() as made:  # a tensor made without a device would be meta
        out = call_method(REGISTRY[key], model, task, graph=graph, seed=0, ablation="resample")
    assert made.calls == []
    assert out == expected  # and the default device changes nothing else


@no_gpu
def test_resolve_device_without_a_gpu():
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    for name in ("cuda", "cuda:0"):
        with pytest.raises(DeviceError, match="no CUDA GPU"):
            resolve_device(name)
    with pytest.raises(DeviceError, match="expected one of"):
        resolve_device("tpu")


def test_device_of_and_record():
    model = tiny_model()
    assert device_of(model) == torch.device("cpu") == device_of(torch.zeros(1))
    record = device_record(torch.device("cpu")).to_json()
    assert record["device"] == "cpu" and record["dtype"] == "float32"
    assert record["torch_threads"] == torch.get_num_threads()


def test_task_data_moves_whole(tiny):
    _, task, _ = tiny
    moved = task.to(torch.device("meta"))
    assert {t.device.type for t in (moved.tokens, moved.mask, moved.cf_tokens, moved.cf_mask, moved.labels,
                                    moved.cf_labels, moved.positions)} == {"meta"}
    assert task.tokens.device.type == "cpu"  # a copy: the original stays where it was
