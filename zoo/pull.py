"""Hub entries -> checked entries installed in the local zoo root (`zoo pull`).

Every entry is fetched into the Hugging Face cache and checked completely before any of them
enters the zoo root: files verified (zoo.artifact), contents checked (zoo.entry_check: config
allow-list, tensors against the config, finite weights, circuit inside the model's graph, folder
name against case id, case from case.json only), then the model run on its case's inputs
(zoo.behaviour_check). Then exactly the bytes that were checked are installed, each entry in one
atomic swap. With several entries (`--all`) nothing is installed unless all pass; if an install
itself fails (a full disk), the error names the entries installed and those not installed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from zoo.artifact import ArtifactError, EntryFiles, install_files, read_entry
from zoo.behaviour_check import BehaviourCheck, check_behaviour
from zoo.entry import check_files
from zoo.entry_check import CheckedEntry
from zoo.errors import ZooError
from zoo.paths import compiled_dir


@dataclasses.dataclass(frozen=True)
class Pulled:
    """One installed entry and what was checked."""

    name: str
    path: Path
    n_tensors: int
    behaviour: BehaviourCheck

    def describe(self) -> str:
        return f"{self.n_tensors} tensors fit config.json, circuit in the model's graph, {self.behaviour.describe()}"


def check_and_install(names: Sequence[str], entries: Path, fetch: Callable[[str], Path], *,
                      compile_cache: Path | None = None) -> list[Pulled]:
    """Fetch (`fetch(name)` -> a verified folder, zoo.hub.fetch_entry) and check every entry of
    `names`, then install them all into `entries/<name>`."""
    cache = compile_cache if compile_cache is not None else compiled_dir(entries.parent)
    ready: list[tuple[str, EntryFiles, CheckedEntry, BehaviourCheck]] = []
    for i, name in enumerate(names):
        try:
            files = read_entry(fetch(name), name=name)
            checked = check_files(files)
            ready.append((name, files, checked, check_behaviour(checked, cache)))
        except ZooError as exc:
            if len(names) == 1:
                raise
            raise type(exc)(f"{exc} [entry {i + 1} of {len(names)}; nothing was installed]") from None
    pulled: list[Pulled] = []
    for i, (name, files, checked, behaviour) in enumerate(ready):
        try:
            path = install_files(files.data, entries / name)
        except (OSError, ZooError) as exc:
            done = ", ".join(p.name for p in pulled) or "none"
            rest = ", ".join(n for n, *_ in ready[i:])
            raise ArtifactError(f"installing {name} failed ({str(exc).splitlines()[0] if str(exc) else exc!r}); "
                                f"installed: {done}; not installed: {rest}") from None
        pulled.append(Pulled(name, path, len(checked.state_dict), behaviour))
    return pulled

