"""Where tensors live: the one place that turns `--device {auto,cpu,cuda}` into a `torch.device`.

Every package resolves the user's choice here and puts the model there; everything else (data,
counterfactuals, masks, method buffers) is made on the device of the tensors or model it works
with (`device_of`), so no module picks a device of its own. Inputs are drawn on the CPU from a CPU
generator and then moved, so the same seed gives the same inputs on every device.
"""

from __future__ import annotations

import contextlib
import platform
import sys
from dataclasses import dataclass
from typing import Any, Literal

import torch

DeviceName = Literal["auto", "cpu", "cuda"]
DEVICE_CHOICES: tuple[DeviceName, ...] = ("auto", "cpu", "cuda")


class DeviceError(ValueError):
    """A device was asked for that this machine does not have (the CLI prints it as one line, exit 2)."""


def resolve_device(name: str = "auto") -> torch.device:
    """`auto`: the first CUDA GPU when torch sees one, else the CPU; `cpu`; `cuda` (or `cuda:N`),
    refused with DeviceError when torch sees no such GPU."""
    if name == "auto":
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or name.startswith("cuda:"):
        index = 0 if name == "cuda" else _index(name)
        if not torch.cuda.is_available():
            raise DeviceError(f"--device {name}: torch sees no CUDA GPU on this machine "
                              f"(torch {torch.__version__}, built for CUDA {torch.version.cuda}); "
                              "use --device cpu or auto")
        if index >= torch.cuda.device_count():
            raise DeviceError(f"--device {name}: torch sees {torch.cuda.device_count()} CUDA GPU(s)")
        return torch.device("cuda", index)
    raise DeviceError(f"--device {name!r}: expected one of {', '.join(DEVICE_CHOICES)}")


def _index(name: str) -> int:
    text = name.partition(":")[2]
    if not text.isdigit():
        raise DeviceError(f"--device {name!r}: expected cuda or cuda:N")
    return int(text)


def device_of(obj: Any) -> torch.device:
    """The device of a tensor, or of a module's first parameter or buffer (CPU when it has none)."""
    if isinstance(obj, torch.Tensor):
        return obj.device
    for tensors in (obj.parameters(), obj.buffers()):
        for tensor in tensors:
            return tensor.device
    return torch.device("cpu")


def move_model(model: Any, device: torch.device | str) -> Any:
    """`model` on `device`: itself where it is there already. TransformerLens's `.to` prints
    "Moving model to device" on stdout, which would corrupt a `--json` answer: it goes to stderr."""
    device = torch.device(device)
    here = device_of(model)
    if here.type == device.type and (device.index is None or here.index == device.index):
        return model
    with contextlib.redirect_stdout(sys.stderr):
        return model.to(device)


@dataclass(frozen=True, kw_only=True)
class DeviceRecord:
    """What a float result depends on, recorded beside it (training.json, reports): results differ
    between devices, dtypes and thread counts."""

    device: str
    """`cpu` or `cuda:N`."""
    name: str
    """The processor's name: the GPU's (`torch.cuda.get_device_name`) or the CPU's architecture."""
    dtype: str
    """The parameters' dtype, e.g. `float32`."""
    torch_threads: int
    """torch's intra-op CPU threads (`torch.get_num_threads`)."""
    torch_version: str
    """torch's version, with its CUDA build where it has one."""

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "name": self.name, "dtype": self.dtype,
                "torch_threads": self.torch_threads, "torch_version": self.torch_version}


def device_record(device: torch.device, dtype: torch.dtype = torch.float32) -> DeviceRecord:
    """The record of a run on `device` with parameters of `dtype`."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        version = f"{torch.__version__} (CUDA {torch.version.cuda})"
    else:
        name = platform.machine() or "cpu"
        version = torch.__version__
    return DeviceRecord(device=str(device), name=name, dtype=str(dtype).removeprefix("torch."),
                        torch_threads=torch.get_num_threads(), torch_version=version)
