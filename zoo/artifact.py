"""The zoo entry on disk: one directory of safetensors + JSON + a card, the same as on the Hub.

    case-33/
      model.safetensors   TransformerLens state_dict; header metadata {"format": "zoo/1"}
      config.json         HookedTransformerConfig as JSON-native fields
      circuit.json        ground-truth circuit (head granularity) + correspondence + labels
      case.json           task metadata and encodings
      training.json       hyperparameters, seeds, versions, metric history, wall time
      validation.json     accuracy, IIA, SIIA, per-node effects
      README.md           model card
      manifest.json       {"format": "zoo/1", "files": {name: sha256}}: what loading verifies

Entries are written into a temporary sibling directory and renamed into place, so an interrupted
write never leaves a half-written entry. Nothing is pickled; loading never unpickles.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

FORMAT = "zoo/1"
MANIFEST = "manifest.json"
REQUIRED_FILES = ("model.safetensors", "config.json", "circuit.json", "case.json", "README.md")
OPTIONAL_JSON = ("training.json", "validation.json")
ALLOWED_FILES = frozenset(REQUIRED_FILES + OPTIONAL_JSON + (MANIFEST,))


class ArtifactError(ValueError):
    """An entry that is missing, incomplete, tampered with or unsafe."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_entry(
    dest: Path,
    *,
    state_dict: Mapping[str, Any],
    json_files: Mapping[str, Mapping[str, Any]],
    readme: str,
) -> Path:
    """Write an entry atomically to `dest` (replacing an older one) and return `dest`.

    `json_files` maps file names (config.json, circuit.json, case.json, and optionally
    training.json, validation.json) to JSON-native dicts.
    """
    from safetensors.torch import save_file

    missing = {"config.json", "circuit.json", "case.json"} - set(json_files)
    if missing:
        raise ArtifactError(f"entry {dest.name}: missing {sorted(missing)}")
    unknown = set(json_files) - ALLOWED_FILES
    if unknown:
        raise ArtifactError(f"entry {dest.name}: unexpected files {sorted(unknown)}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp.", dir=dest.parent))
    try:
        tensors = {k: v.detach().contiguous().cpu() for k, v in state_dict.items()}
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": FORMAT})
        for name, data in json_files.items():
            (tmp / name).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        (tmp / "README.md").write_text(readme)
        files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir())}
        (tmp / MANIFEST).write_text(json.dumps({"format": FORMAT, "files": files}, indent=1) + "\n")
        if dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old.", dir=dest.parent))
            old.rmdir()
            dest.rename(old)
            tmp.rename(dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def verify_entry(entry_dir: Path) -> dict[str, str]:
    """Check an entry against its manifest; returns {file: sha256}. Raises ArtifactError."""
    if not entry_dir.is_dir():
        raise ArtifactError(f"no entry at {entry_dir}")
    manifest_path = entry_dir / MANIFEST
    if not manifest_path.is_file():
        raise ArtifactError(f"entry {entry_dir.name}: {MANIFEST} is missing")
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"entry {entry_dir.name}: {MANIFEST} is not valid JSON ({exc})") from None
    if manifest.get("format") != FORMAT:
        raise ArtifactError(f"entry {entry_dir.name}: unknown format {manifest.get('format')!r}")
    present = {p.name for p in entry_dir.iterdir() if not p.name.startswith(".")}
    unexpected = present - ALLOWED_FILES
    if unexpected:
        raise ArtifactError(f"entry {entry_dir.name}: unexpected files {sorted(unexpected)} (refused)")
    files: dict[str, str] = manifest.get("files", {})
    for name in REQUIRED_FILES:
        if name not in files or not (entry_dir / name).is_file():
            raise ArtifactError(f"entry {entry_dir.name}: {name} is missing")
    for name, expected in files.items():
        if name not in ALLOWED_FILES:
            raise ArtifactError(f"entry {entry_dir.name}: manifest names unexpected file {name!r}")
        path = entry_dir / name
        if not path.is_file():
            raise ArtifactError(f"entry {entry_dir.name}: {name} is missing")
        actual = sha256_file(path)
        if actual != expected:
            raise ArtifactError(
                f"entry {entry_dir.name}: {name} does not match its sha256 (expected {expected[:12]}…, "
                f"got {actual[:12]}…): the file was changed or corrupted"
            )
    return files


def read_json(entry_dir: Path, name: str) -> dict[str, Any]:
    return json.loads((entry_dir / name).read_text())


def load_state_dict(entry_dir: Path) -> dict[str, Any]:
    """Weights from model.safetensors (the only weight format the zoo reads)."""
    from safetensors.torch import load_file

    return load_file(str(entry_dir / "model.safetensors"))
