"""A zoo entry in memory: model, ground-truth circuit, case and encoding, read from its directory.

`load_entry_dir` takes one verified snapshot of the files (zoo.artifact.read_entry: sha256 sums,
nothing unpickled), checks every field (zoo.entry_check: config allow-list, tensors against the
config, circuit inside the model's graph, folder name against case id) and only then builds
anything. The case comes from case.json's contents (zoo.case_json), never by importing what its id
names. Any malformed content is one ArtifactError line, never a raw TypeError / KeyError.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

from eval.core.circuit import Circuit
from rasp_programs.case import Case
from rasp_programs.encoding import Encoding
from zoo.artifact import ArtifactError, EntryFiles, read_entry
from zoo.entry_check import CheckedEntry, check_entry


@dataclasses.dataclass(frozen=True)
class Entry:
    """One zoo entry: a trained model whose circuit is known."""

    name: str
    """Entry name, e.g. `case-33`."""
    path: Path
    """Directory the entry was read from."""
    config: dict[str, Any]
    """HookedTransformerConfig fields (config.json), checked against eval.core.model_config's allow-list."""
    circuit: Circuit
    """Ground-truth circuit at head granularity (circuit.json)."""
    circuit_json: dict[str, Any]
    """circuit.json as written: also the correspondence and high-level labels."""
    case_json: dict[str, Any]
    """case.json: task metadata and the encoding."""
    encoding: Encoding
    training: dict[str, Any] | None
    validation: dict[str, Any] | None
    state_dict: dict[str, Any]
    """The weights (TransformerLens names), read from the same snapshot as every other file."""
    case: Case
    """The task: a built-in case, or a data-only case built from case.json (zoo.case_json)."""
    device: str = "cpu"
    """Where `model` is built: `cpu` or `cuda:N` (zoo.load's device, resolved by eval.core.device)."""

    @functools.cached_property
    def model(self) -> Any:
        """The entry's weights in the installed TransformerLens: a HookedTransformer on 3.x, a
        TransformerBridge on 4.x; same logits, attention_mask read as 3.x does (eval.core.tlens)."""
        from eval.core.tlens import build_hooked

        return build_hooked(self.config, self.state_dict, device=self.device)

    @classmethod
    def from_checked(cls, checked: CheckedEntry, path: Path) -> Entry:
        return cls(name=checked.name, path=path, config=checked.config, circuit=checked.circuit,
                   circuit_json=checked.circuit_json, case_json=checked.case_json, encoding=checked.encoding,
                   training=checked.training, validation=checked.validation, state_dict=checked.state_dict,
                   case=checked.case)


def read_checked(path: Path, *, name: str | None = None) -> CheckedEntry:
    """Verify and check the entry stored in `path` (see the module docstring). `name` is the entry
    name when the directory's own name is not (a temporary or cache folder)."""
    return check_files(read_entry(path, name=name))


def check_files(files: EntryFiles) -> CheckedEntry:
    """zoo.entry_check.check_entry, with any error it did not foresee kept to one ArtifactError line."""
    try:
        return check_entry(files)
    except ArtifactError:
        raise
    except (TypeError, KeyError, ValueError, IndexError, AttributeError, RecursionError) as exc:
        # every field is checked there; this keeps the documented error type if a check missed one
        raise ArtifactError(f"entry {files.label}: malformed ({type(exc).__name__}: "
                            f"{str(exc).splitlines()[0][:120] if str(exc) else ''})") from None


def load_entry_dir(path: Path, *, name: str | None = None) -> Entry:
    """Read, verify and check the entry stored in `path`."""
    return Entry.from_checked(read_checked(path, name=name), path)
