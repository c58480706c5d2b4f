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

Writing: an entry is written into a temporary sibling directory which then replaces the old one
in one atomic swap (eval.core.directory_swap): a concurrent reader always finds a complete entry, the
old or the new, and an interrupted write changes nothing. JSON is written without NaN / Infinity
(not JSON), and weights must be finite.

Reading: `read_entry` takes one consistent snapshot of the files' bytes. Before anything is
parsed it refuses unexpected file names, oversized files and files whose leading bytes are not
what their names promise (a pickle or a torch zip under any name is refused unread), then checks
the sha256 sums; if the entry was swapped while being read, it reads again. Nothing is pickled and
nothing is unpickled. JSON is parsed strictly: no NaN / Infinity, no numbers out of range, no
nesting deeper than MAX_JSON_DEPTH, no lone surrogates (zoo.strict_json); every failure is one
ArtifactError line. Dotfiles count as unexpected files: an entry folder holds only its files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from eval.core.directory_swap import fsync_tree, replace_directory, sibling_tmp
from eval.core.model_config import MAX_MODEL_BYTES
from zoo.strict_json import ArtifactError, dumps_json, parse_json

FORMAT = "zoo/1"
MANIFEST = "manifest.json"
REQUIRED_FILES = ("model.safetensors", "config.json", "circuit.json", "case.json", "README.md")
OPTIONAL_JSON = ("training.json", "validation.json")
ALLOWED_FILES = frozenset(REQUIRED_FILES + OPTIONAL_JSON + (MANIFEST,))
FAILED_SUFFIX = ".failed"
"""A run that missed its criterion, written beside a better entry (`case-33.failed/`): not an entry."""
ENTRY_NAME = re.compile(r"(case|planted)-(?!.*\.failed$)[A-Za-z0-9][A-Za-z0-9_.-]{0,120}")
# safetensors puts an 8-byte little-endian header length first; real headers are a few KB.
_MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024
MAX_FILE_BYTES = {".safetensors": MAX_MODEL_BYTES + _MAX_SAFETENSORS_HEADER, ".json": 64 << 20, ".md": 4 << 20}
_MAX_NAMED_BYTES = {"config.json": 1 << 20, MANIFEST: 1 << 20, "circuit.json": 16 << 20}
"""Tighter limits by name: a config is a few hundred bytes, a manifest nine sums, and a circuit of
MAX_CIRCUIT_EDGES edges with its labels about 10 MB (a 52 MB circuit.json of a million labels is
no zoo's)."""
_READ_PATIENCE_S = 10.0
"""How long a read of an entry keeps starting over while installs keep replacing it (waiting twice
as long before each new start, up to 0.25 s). One read can span several back-to-back installs on a
loaded machine (five quick retries gave up there); waiting beats failing."""


def is_entry_name(name: object) -> bool:
    """Whether `name` is a valid entry name (`case-33`, `planted-ioi`; never `case-33.failed`)."""
    return isinstance(name, str) and bool(ENTRY_NAME.fullmatch(name)) and ".." not in name


def check_entry_name(name: str) -> str:
    """`name` if it is a valid entry name (is_entry_name); it becomes a path component."""
    if not is_entry_name(name):
        raise ArtifactError(
            f"invalid entry name {name!r}: expected case-<id> or planted-<name> (letters, digits, . _ -; "
            f"not ending in {FAILED_SUFFIX})"
        )
    return name


def file_limit(name: str) -> int:
    """The most bytes entry file `name` may hold (by name, else by suffix)."""
    return _MAX_NAMED_BYTES.get(name, MAX_FILE_BYTES[Path(name).suffix])


def unexpected_names(names: Iterable[str]) -> list[str]:
    """The names an entry must not contain (anything outside ALLOWED_FILES)."""
    return sorted(set(names) - ALLOWED_FILES)


def _describe_bytes(head: bytes) -> str:
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "pickle data"
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive (torch.save format, which holds a pickle)"
    return f"content starting with {head[:8]!r}"


def _sniff(entry: str, name: str, data: bytes, size: int) -> None:
    """Refuse content that is not what its name promises, from its first bytes only: safetensors
    must start with a plausible header, JSON with `{`, Markdown must be UTF-8 text without NUL."""
    head = data[:16]
    what = _describe_bytes(head)
    if name.endswith(".safetensors"):
        n = int.from_bytes(head[:8], "little") if len(head) >= 9 else -1
        if not (0 < n <= _MAX_SAFETENSORS_HEADER and n + 8 <= size and head[8:9] == b"{"):
            raise ArtifactError(f"entry {entry}: {name} is not a safetensors file ({what}); refused unread")
    elif name.endswith(".json"):
        if not head.lstrip(b" \t\r\n").startswith(b"{"):
            raise ArtifactError(f"entry {entry}: {name} is not a JSON object ({what}); refused unread")
    elif name.endswith(".md"):
        try:
            data[: 1 << 20].decode("utf-8")
            ok = b"\0" not in data[: 1 << 20]
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


def read_json(entry_dir: Path, name: str) -> dict[str, Any]:
    return parse_json((entry_dir / name).read_bytes(), f"entry {entry_dir.name}: {name}")


# ------------------------------------------------------------------------------------------------
# reading


@dataclasses.dataclass(frozen=True)
class EntryFiles:
    """One consistent, verified snapshot of an entry's files."""

    label: str
    """The entry's name, for messages."""
    data: Mapping[str, bytes]
    """File name -> bytes, the manifest included."""
    sums: Mapping[str, str]
    """File name -> sha256, as the manifest lists them (the manifest itself excluded)."""

    def json(self, name: str) -> dict[str, Any] | None:
        """The parsed JSON file `name`, None if the entry lacks it."""
        return parse_json(self.data[name], f"entry {self.label}: {name}") if name in self.data else None


def read_entry(entry_dir: Path, *, name: str | None = None) -> EntryFiles:
    """Read and verify every file of the entry in `entry_dir` (see the module docstring).

    If the directory is replaced while it is read (an install swapping it), the read starts over,
    so the snapshot is never a mixture of two versions. `name` labels messages when the directory
    is a temporary one.
    """
    label = name or entry_dir.name
    deadline, delay = time.monotonic() + _READ_PATIENCE_S, 0.005
    while True:
        try:
            # held open while reading: the directory's inode cannot be freed and reused by the next
            # install's directory, so "same inode before and after" really means "not replaced"
            # (without it a swap, delete, swap sequence handed a reader a mixture: seen on ext4)
            handle = os.open(entry_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except FileNotFoundError:
            raise ArtifactError(f"no entry at {entry_dir}") from None
        except NotADirectoryError:
            raise ArtifactError(f"no entry at {entry_dir} (not a directory)") from None
        try:
            before = os.fstat(handle).st_ino
            try:
                files = _read_once(entry_dir, label)
            except (ArtifactError, OSError) as exc:
                if not _replaced(entry_dir, before):
                    if isinstance(exc, OSError):
                        raise ArtifactError(f"entry {label}: cannot read {Path(exc.filename or '?').name} "
                                            f"({exc.strerror or exc})") from None
                    raise
            else:
                if not _replaced(entry_dir, before):
                    return files
        finally:
            os.close(handle)
        if time.monotonic() > deadline:
            raise ArtifactError(f"entry {label} kept changing while it was read for {_READ_PATIENCE_S:.0f} s; "
                                "try again")
        time.sleep(delay)  # replaced meanwhile: start over, a little later each time
        delay = min(2 * delay, 0.25)


def _replaced(path: Path, inode: int) -> bool:
    try:
        return os.stat(path).st_ino != inode
    except OSError:
        return True


def _read_once(entry_dir: Path, label: str) -> EntryFiles:
    if not entry_dir.is_dir():
        raise ArtifactError(f"no entry at {entry_dir}")
    present = {p.name for p in entry_dir.iterdir()}  # dotfiles too: an entry holds nothing unlisted
    unexpected = unexpected_names(present)
    if unexpected:
        raise ArtifactError(
            f"entry {label}: unexpected files {unexpected} (refused unread; an entry holds only "
            f"{', '.join(sorted(ALLOWED_FILES))})"
        )
    data: dict[str, bytes] = {}
    for file_name in sorted(present):
        path = entry_dir / file_name
        if not path.is_file():
            raise ArtifactError(f"entry {label}: {file_name} is not a regular file (refused)")
        limit = file_limit(file_name)
        if path.stat().st_size > limit:
            raise ArtifactError(f"entry {label}: {file_name} is larger than {limit >> 20} MiB (refused unread)")
        with open(path, "rb") as fh:
            data[file_name] = fh.read(limit + 1)
        _sniff(label, file_name, data[file_name], len(data[file_name]))
    if MANIFEST not in data:
        raise ArtifactError(f"entry {label}: {MANIFEST} is missing")
    manifest = parse_json(data[MANIFEST], f"entry {label}: {MANIFEST}")
    if manifest.get("format") != FORMAT:
        raise ArtifactError(f"entry {label}: unknown format {str(manifest.get('format'))[:40]!r} (expected {FORMAT!r})")
    sums = manifest.get("files", {})
    if not isinstance(sums, dict) or not all(isinstance(v, str) for v in sums.values()):
        raise ArtifactError(f"entry {label}: {MANIFEST} has no file table")
    for file_name in REQUIRED_FILES:
        if file_name not in sums or file_name not in data:
            raise ArtifactError(f"entry {label}: {file_name} is missing")
    for file_name, expected in sums.items():
        if file_name not in ALLOWED_FILES or file_name == MANIFEST:
            raise ArtifactError(f"entry {label}: manifest names unexpected file {file_name[:60]!r}")
        if file_name not in data:
            raise ArtifactError(f"entry {label}: {file_name} is missing")
        actual = hashlib.sha256(data[file_name]).hexdigest()
        if actual != expected:
            raise ArtifactError(
                f"entry {label}: {file_name} does not match its sha256 (expected {expected[:12]}…, "
                f"got {actual[:12]}…): the file was changed or corrupted"
            )
    extra = set(data) - set(sums) - {MANIFEST}
    if extra:
        raise ArtifactError(f"entry {label}: files not in the manifest {sorted(extra)} (refused)")
    return EntryFiles(label=label, data=data, sums=dict(sums))


def verify_entry(entry_dir: Path, *, name: str | None = None) -> dict[str, str]:
    """Check an entry against its manifest; returns {file: sha256}. Raises ArtifactError."""
    return dict(read_entry(entry_dir, name=name).sums)


def tensors_from_bytes(data: bytes) -> dict[str, Any]:
    """Weights from safetensors bytes (the only weight format the zoo reads)."""
    from safetensors.torch import load

    return load(data)


def load_state_dict(entry_dir: Path) -> dict[str, Any]:
    """Weights from model.safetensors."""
    from safetensors.torch import load_file

    return load_file(str(entry_dir / "model.safetensors"))


# ------------------------------------------------------------------------------------------------
# writing


def write_entry(
    dest: Path,
    *,
    state_dict: Mapping[str, Any],
    json_files: Mapping[str, Mapping[str, Any]],
    readme: str,
) -> Path:
    """Write an entry atomically to `dest` (replacing an older one) and return `dest`.

    `json_files` maps file names (config.json, circuit.json, case.json, and optionally
    training.json, validation.json) to JSON-native dicts. NaN / infinite numbers or weights are
    refused (ArtifactError) before anything is written.
    """
    import torch
    from safetensors.torch import save as save_bytes

    missing = {"config.json", "circuit.json", "case.json"} - set(json_files)
    if missing:
        raise ArtifactError(f"entry {dest.name}: missing {sorted(missing)}")
    unknown = set(json_files) - ALLOWED_FILES
    if unknown:
        raise ArtifactError(f"entry {dest.name}: unexpected files {sorted(unknown)}")
    tensors = {k: v.detach().contiguous().cpu() for k, v in state_dict.items()}
    bad = [k for k, v in tensors.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise ArtifactError(f"entry {dest.name}: weights {bad[:3]} hold NaN or infinite values; refused")
    files = {name: dumps_json(data, f"entry {dest.name}: {name}").encode() for name, data in json_files.items()}
    files["model.safetensors"] = save_bytes(tensors, metadata={"format": FORMAT})
    files["README.md"] = readme.encode()
    return install_files(files, dest)


def install_files(files: Mapping[str, bytes], dest: Path) -> Path:
    """Write entry files (name -> bytes; a manifest is made if absent) to `dest` atomically; the
    written copy is verified before it replaces the old entry."""
    with _staged(dest) as tmp:
        for name, data in files.items():
            if name not in ALLOWED_FILES:
                raise ArtifactError(f"entry {dest.name}: unexpected file {name!r}")
            (tmp / name).write_bytes(data)
        if MANIFEST not in files:
            sums = {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())}
            (tmp / MANIFEST).write_text(json.dumps({"format": FORMAT, "files": sums}, indent=1) + "\n")
        read_entry(tmp, name=dest.name)
    return dest


def install_entry(src: Path, dest: Path) -> Path:
    """Copy a verified entry (e.g. from the Hugging Face cache) to `dest` atomically: `dest` is
    either the old entry or the complete new one, never a mixture, never missing."""
    return install_files(read_entry(src).data, dest)


@contextlib.contextmanager
def _staged(dest: Path) -> Iterator[Path]:
    """A temporary sibling of `dest` to fill; swapped in for `dest` if the block succeeds, removed if
    it raises (Ctrl-C included)."""
    import shutil

    tmp = sibling_tmp(dest)
    try:
        yield tmp
        fsync_tree(tmp)
        replace_directory(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
