"""Training state <-> a checkpoint directory: safetensors for tensors, JSON for the rest.

Never pickle: model weights and Adam's moments go into `state.safetensors`; the step, history and
config into `state.json`. Both are written into a fresh sibling directory which then replaces the
checkpoint directory in one atomic swap (eval.core.directory_swap), so a kill between any two writes
leaves the previous checkpoint or the new one, never tensors of one step with the metadata of
another. Both files also carry the same random `write_id`; a pair that disagrees (a checkpoint
written some other way) is refused rather than resumed from.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import torch

from eval.core.directory_swap import fsync_tree, replace_directory, sibling_tmp
from siit.optim import Adam

FORMAT = "zoo-checkpoint/2"  # 2: the trainee has a second (unpadded) loudness reference


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from (one line)."""


def save_checkpoint(path: Path, *, model: torch.nn.Module, optimizer: Adam, meta: dict[str, Any],
                    extra: dict[str, torch.Tensor] | None = None) -> None:
    """extra: more tensors to keep (the weights training may roll back to, siit.trainer), read back
    by load_checkpoint(..., extra=)."""
    from safetensors.torch import save_file

    # on the CPU: a checkpoint made on a GPU resumes anywhere (load_state_dict copies onto the device)
    tensors = {k: v.cpu().contiguous() for k, v in training_state(model, optimizer).items()}
    tensors.update({f"extra.{k}": v.detach().cpu().contiguous() for k, v in (extra or {}).items()})
    write_id = uuid.uuid4().hex
    for stale in [*path.parent.glob(f".{path.name}.tmp.*"), *path.parent.glob(f".{path.name}.old.*")]:
        _remove(stale)  # left by a run killed mid-swap: a checkpoint has one writer, its run
    tmp = sibling_tmp(path)
    try:
        save_file(tensors, str(tmp / "state.safetensors"), metadata={"format": FORMAT, "write_id": write_id})
        (tmp / "state.json").write_text(json.dumps(
            dict(meta, format=FORMAT, write_id=write_id, optimizer_steps=optimizer.steps), indent=1, allow_nan=False))
        fsync_tree(tmp)
        replace_directory(tmp, path)
    except BaseException:
        _remove(tmp)
        raise


def load_checkpoint(path: Path, *, model: torch.nn.Module, optimizer: Adam,
                    extra: dict[str, torch.Tensor] | None = None) -> dict[str, Any] | None:
    """Restore model and optimiser from `path` (and fill `extra` with the extra tensors saved);
    returns the JSON metadata, or None if there is no checkpoint. A checkpoint whose two files do
    not belong together raises CheckpointError."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    state_json, state_st = path / "state.json", path / "state.safetensors"
    if not state_json.is_file() and not state_st.is_file():
        return None
    if not (state_json.is_file() and state_st.is_file()):
        raise CheckpointError(f"{path}: incomplete checkpoint (one of state.json / state.safetensors is "
                              "missing); rerun without --resume")
    try:
        meta = json.loads(state_json.read_text())
        with safe_open(str(state_st), framework="pt") as fh:
            header = fh.metadata() or {}
    except (ValueError, OSError, RecursionError) as exc:
        raise CheckpointError(f"{path}: unreadable checkpoint ({exc}); rerun without --resume") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a {FORMAT} checkpoint")
    if not meta.get("write_id") or header.get("write_id") != meta.get("write_id"):
        raise CheckpointError(f"{path}: state.json and state.safetensors come from different writes; "
                              "refusing to resume from a mixture (rerun without --resume)")
    tensors = load_file(str(state_st))
    try:
        restore_training_state(tensors, model, optimizer, meta["optimizer_steps"])
    except (RuntimeError, KeyError) as exc:  # other tensors than this run holds (a version that trained otherwise)
        raise CheckpointError(f"{path}: the checkpoint holds other tensors than this run trains "
                              f"({str(exc).splitlines()[0][:120]}); rerun without --resume") from None
    if extra is not None:
        extra.update({k[6:]: v for k, v in tensors.items() if k.startswith("extra.")})
    return meta


def training_state(model: torch.nn.Module, optimizer: Adam) -> dict[str, torch.Tensor]:
    """Detached copies of the weights ("model.") and Adam's moments ("optim."): what a checkpoint keeps,
    and what training keeps of the check it may roll back to (siit.trainer)."""
    tensors = {f"model.{k}": v.detach().clone() for k, v in model.state_dict().items()}
    tensors.update({f"optim.{k}": v.detach().clone() for k, v in optimizer.state_tensors().items()})
    return tensors


def restore_training_state(tensors: dict[str, torch.Tensor], model: torch.nn.Module, optimizer: Adam,
                           steps: int) -> None:
    """Put training_state's tensors back into `model` and `optimizer` (its step count `steps`)."""
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    optimizer.load_state_tensors({k[6:]: v for k, v in tensors.items() if k.startswith("optim.")}, steps)


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
