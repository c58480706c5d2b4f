"""Training state <-> a checkpoint directory: safetensors for tensors, JSON for the rest.

Never pickle: model weights and Adam's moments go into `state.safetensors`; the step, history and
config into `state.json`. Both are written under temporary names and renamed (tensors first), so
a kill mid-write leaves a consistent checkpoint.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from siit.optim import Adam

FORMAT = "zoo-checkpoint/1"


def save_checkpoint(path: Path, *, model: torch.nn.Module, optimizer: Adam, meta: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    tensors = {f"model.{k}": v.detach().contiguous() for k, v in model.state_dict().items()}
    tensors.update({f"optim.{k}": v.detach().contiguous() for k, v in optimizer.state_tensors().items()})
    tmp_st, tmp_js = path / "state.safetensors.tmp", path / "state.json.tmp"
    save_file(tensors, str(tmp_st), metadata={"format": FORMAT})
    tmp_js.write_text(json.dumps(dict(meta, format=FORMAT, optimizer_steps=optimizer.steps), indent=1))
    os.replace(tmp_st, path / "state.safetensors")
    os.replace(tmp_js, path / "state.json")


def load_checkpoint(path: Path, *, model: torch.nn.Module, optimizer: Adam) -> dict[str, Any] | None:
    """Restore model and optimiser from `path`; returns the JSON metadata, or None if absent."""
    from safetensors.torch import load_file

    if not (path / "state.json").is_file() or not (path / "state.safetensors").is_file():
        return None
    meta = json.loads((path / "state.json").read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} checkpoint")
    tensors = load_file(str(path / "state.safetensors"))
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    optimizer.load_state_tensors({k[6:]: v for k, v in tensors.items() if k.startswith("optim.")},
                                 meta["optimizer_steps"])
    return meta
