"""An entry name -> a loaded, verified `Entry`: from the local zoo root, else from the Hub.

The Hub repository is the `repo_id` argument, else `$ZOO_REPO_ID` (no built-in default);
downloads go to the standard Hugging Face cache, and `HF_HUB_OFFLINE=1` loads from that cache.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

from zoo.artifact import check_entry_name
from zoo.paths import entries_dir, zoo_root

if TYPE_CHECKING:
    from zoo.entry import Entry


def load(
    name: str,
    *,
    repo_id: str | None = None,
    revision: str | None = None,
    root: str | os.PathLike[str] | None = None,
    source: str = "auto",
    device: str = "auto",
) -> Entry:
    """The zoo entry `name` (e.g. "case-33"): model, ground-truth circuit, case with a seeded sampler.

    source: "auto" (the local zoo root if it holds the entry, else the Hub), "local" or "hub".
    Every file is checked against the sha256 sums in manifest.json before it is parsed; weights come
    only from safetensors and everything else from JSON, and every field is checked (zoo.entry_check:
    the config is allow-listed, so building the model fetches and runs nothing; the case comes from
    case.json's contents, never from importing what its id names). Raises a ZooError subclass with
    one line saying what was wrong (ArtifactError for a bad entry, HubError for the Hub). An entry
    being replaced by a concurrent install is read whole, old or new (zoo.artifact).
    device: where `entry.model` is built: "auto" (a CUDA GPU when torch sees one, else the CPU),
    "cpu" or "cuda" (a ZooError where there is none).
    """
    from zoo.entry import load_entry_dir
    from zoo.errors import ZooError

    check_entry_name(name)
    if source not in ("auto", "local", "hub"):
        raise ZooError(f"source must be auto, local or hub, not {source!r}")
    where = device_or_error(device)
    local = entries_dir(zoo_root(root)) / name
    if source == "local" or (source == "auto" and local.is_dir()):
        if not local.is_dir():
            raise ZooError(f"entry {name} is not in the local zoo root ({local.parent})")
        return dataclasses.replace(load_entry_dir(local), device=where)
    from zoo.hub import fetch_entry

    path: Path = fetch_entry(name, repo_id=repo_id, revision=revision)
    return dataclasses.replace(load_entry_dir(path, name=name), device=where)


def device_or_error(name: str) -> str:
    """eval.core.device.resolve_device, its DeviceError a one-line ZooError (`cpu` or `cuda:N`)."""
    from eval.core.device import DeviceError, resolve_device
    from zoo.errors import ZooError

    try:
        return str(resolve_device(name))
    except DeviceError as exc:
        raise ZooError(str(exc)) from None
