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
write never leaves a half-written entry. Nothing is pickled; loading never unpickles: before any file
is parsed, `verify_entry` refuses unexpected file names and sniffs every file's leading bytes, so a
pickle (or a torch zip archive) under any name is rejected unread; then it checks the sha256 sums.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from zoo.errors import ZooError

FORMAT = "zoo/1"
MANIFEST = "manifest.json"
REQUIRED_FILES = ("model.safetensors", "config.json", "circuit.json", "case.json", "README.md")
OPTIONAL_JSON = ("training.json", "validation.json")
ALLOWED_FILES = frozenset(REQUIRED_FILES + OPTIONAL_JSON + (MANIFEST,))
ENTRY_NAME = re.compile(r"(case|planted)-[A-Za-z0-9][A-Za-z0-9_.-]{0,120}")
# safetensors puts an 8-byte little-endian header length first; real headers are a few KB.
_MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024


class ArtifactError(ZooError, ValueError):
    """An entry that is missing, incomplete, tampered with or unsafe (the CLI: one line, exit 2)."""


def check_entry_name(name: str) -> str:
    """`name` if it is a valid entry name (`case-33`, `planted-ioi`); it becomes a path component."""
    if not ENTRY_NAME.fullmatch(name) or ".." in name:
        raise ArtifactError(
            f"invalid entry name {name!r}: expected case-<id> or planted-<name> (letters, digits, . _ -)"
        )
    return name


def unexpected_names(names: Iterable[str]) -> list[str]:
    """The names an entry must not contain (anything outside ALLOWED_FILES)."""
    return sorted(set(names) - ALLOWED_FILES)


def _describe_bytes(head: bytes) -> str:
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "pickle data"
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive (torch.save format, which holds a pickle)"
    return f"content starting with {head[:8]!r}"


def check_file_safe(path: Path) -> None:
    """Refuse a file whose content is not what its name promises, reading only its first bytes.

    safetensors must start with a plausible header, JSON with `{`, Markdown must be UTF-8 text
    without NUL bytes. This runs before anything is parsed, so a pickle never reaches a parser.
    """
    entry, name = path.parent.name, path.name
    if not path.is_file():
        raise ArtifactError(f"entry {entry}: {name} is not a regular file (refused)")
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(16)
        rest = fh.read(1 << 20) if name.endswith(".md") else b""
    what = _describe_bytes(head)
    if name.endswith(".safetensors"):
        n = int.from_bytes(head[:8], "little") if len(head) >= 9 else -1
        if not (0 < n <= _MAX_SAFETENSORS_HEADER and n + 8 <= size and head[8:9] == b"{"):
            raise ArtifactError(f"entry {entry}: {name} is not a safetensors file ({what}); refused unread")
    elif name.endswith(".json"):
        if not head.lstrip(b" \t\r\n").startswith(b"{"):
            raise ArtifactError(f"entry {entry}: {name} is not a JSON object ({what}); refused unread")
    elif name.endswith(".md"):
        text = head + rest
        try:
            text.decode("utf-8")
            ok = b"\0" not in text
        except UnicodeDecodeError:
            ok = False
        if not ok:
            raise ArtifactError(f"entry {entry}: {name} is not UTF-8 text ({what}); refused unread")
    else:
        raise ArtifactError(f"entry {entry}: {name} has an unexpected extension (refused)")


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
    with _staged(dest) as tmp:
        tensors = {k: v.detach().contiguous().cpu() for k, v in state_dict.items()}
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": FORMAT})
        for name, data in json_files.items():
            (tmp / name).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        (tmp / "README.md").write_text(readme)
        files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir())}
        (tmp / MANIFEST).write_text(json.dumps({"format": FORMAT, "files": files}, indent=1) + "\n")
    return dest


def install_entry(src: Path, dest: Path) -> Path:
    """Copy a verified entry (e.g. from the Hugging Face cache) to `dest` atomically.

    The copy is verified again before it is renamed into place, so `dest` is either the old entry
    or the complete new one, never a mixture; symlinks (the HF cache uses them) are followed.
    """
    files = verify_entry(src)
    with _staged(dest) as tmp:
        for name in [*files, MANIFEST]:
            shutil.copyfile(src / name, tmp / name)
        verify_entry(tmp, name=dest.name)
    return dest


@contextlib.contextmanager
def _staged(dest: Path) -> Iterator[Path]:
    """A temporary sibling of `dest` to fill; renamed to `dest` if the block succeeds, removed if
    it raises (Ctrl-C included), so `dest` is always the old entry or the complete new one."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp.", dir=dest.parent))
    try:
        yield tmp
        _swap_into_place(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _swap_into_place(tmp: Path, dest: Path) -> None:
    """Rename the finished `tmp` to `dest`; an existing `dest` is moved aside first, then removed."""
    if dest.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old.", dir=dest.parent))
        old.rmdir()
        dest.rename(old)
        try:
            tmp.rename(dest)
        except BaseException:
            old.rename(dest)  # put the previous entry back rather than leave nothing
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(dest)


def verify_entry(entry_dir: Path, *, name: str | None = None) -> dict[str, str]:
    """Check an entry against its manifest; returns {file: sha256}. Raises ArtifactError.

    Order matters for safety: file names first, then every file's leading bytes (no pickle, no zip,
    each file what its extension says), and only then is the manifest parsed and each file hashed.
    `name` labels messages when the directory is a temporary one.
    """
    label = name or entry_dir.name
    if not entry_dir.is_dir():
        raise ArtifactError(f"no entry at {entry_dir}")
    present = {p.name for p in entry_dir.iterdir() if not p.name.startswith(".")}
    unexpected = unexpected_names(present)
    if unexpected:
        raise ArtifactError(
            f"entry {label}: unexpected files {unexpected} (refused unread; an entry holds only "
            f"{', '.join(sorted(ALLOWED_FILES))})"
        )
    for file_name in sorted(present):
        check_file_safe(entry_dir / file_name)
    manifest_path = entry_dir / MANIFEST
    if not manifest_path.is_file():
        raise ArtifactError(f"entry {label}: {MANIFEST} is missing")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"entry {label}: {MANIFEST} is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else None
        raise ArtifactError(f"entry {label}: unknown format {got!r} (expected {FORMAT!r})")
    files = manifest.get("files", {})
    if not isinstance(files, dict):
        raise ArtifactError(f"entry {label}: {MANIFEST} has no file table")
    for file_name in REQUIRED_FILES:
        if file_name not in files or not (entry_dir / file_name).is_file():
            raise ArtifactError(f"entry {label}: {file_name} is missing")
    for file_name, expected in files.items():
        if file_name not in ALLOWED_FILES or file_name == MANIFEST:
            raise ArtifactError(f"entry {label}: manifest names unexpected file {file_name!r}")
        path = entry_dir / file_name
        if not path.is_file():
            raise ArtifactError(f"entry {label}: {file_name} is missing")
        actual = sha256_file(path)
        if actual != expected:
            raise ArtifactError(
                f"entry {label}: {file_name} does not match its sha256 (expected {str(expected)[:12]}…, "
                f"got {actual[:12]}…): the file was changed or corrupted"
            )
    extra = present - set(files) - {MANIFEST}
    if extra:
        raise ArtifactError(f"entry {label}: files not in the manifest {sorted(extra)} (refused)")
    return files


def read_json(entry_dir: Path, name: str) -> dict[str, Any]:
    return json.loads((entry_dir / name).read_text())


def load_state_dict(entry_dir: Path) -> dict[str, Any]:
    """Weights from model.safetensors (the only weight format the zoo reads)."""
    from safetensors.torch import load_file

    return load_file(str(entry_dir / "model.safetensors"))
