"""A trained entry -> its validation.json recomputed on the setup it was judged on, and the entry
rewritten (`zoo validate`); and that setup rebuilt for the benchmarks that study an entry.

Top level is standard library only (the CLI imports it); torch and siit are imported inside.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def entry_setup(compiled, entry, dest: Path, device: str = "cpu"):
    """(siit.trainer's setup, the low-level model) of a trained entry, rebuilt from its recorded
    training config: the validation data and evaluators it was judged on, on `device`. Refuses an
    entry whose circuit.json names another correspondence than that config implies."""
    import torch

    from siit.export import config_from_training_json, correspondence_from_circuit_json
    from siit.trainer import prepare
    from siit.transformer import Transformer
    from zoo.errors import ZooError

    config, arch = config_from_training_json(entry.training)
    setup = prepare(compiled, config, arch, device=torch.device(device))
    high_layout = {"n_layers": setup.corr.high.n_layers, "n_heads": setup.corr.high.n_heads}
    corr = correspondence_from_circuit_json(entry.circuit_json, high_layout, entry.config)
    if corr.mapping != setup.corr.mapping:
        raise ZooError(f"entry {dest}: its correspondence differs from the one its training config implies")
    return setup, Transformer.from_state_dict(entry.config, entry.state_dict).to(device)


def trained_entry(case_id: str, root: str | None):
    """(case, entry, setup, model) of the trained entry of case `case_id` in the zoo root (None:
    $ZOO_HOME or ~/.cache/zoo), rebuilt by entry_setup: for the benchmarks that study an entry."""
    from zoo.high_level_source import resolve_case
    from zoo.entry import load_entry_dir
    from zoo.high_level_source import high_level_task
    from zoo.paths import compiled_dir, entries_dir, zoo_root

    case = resolve_case("case", case_id)
    root_dir = zoo_root(root)
    dest = entries_dir(root_dir) / case.entry_name
    entry = load_entry_dir(dest)  # the root exists, since the entry does: compile into its cache
    task = high_level_task(case, compiled_dir(root_dir))
    return (case, entry, *entry_setup(task, entry, dest))


def revalidate_entry(case, dest: Path, root: str | None, *, device: str = "cpu", stage=None) -> dict[str, Any]:
    """Recompute validation.json of the entry in `dest` (of `case`), rewrite the entry with it and
    return it; a ZooError if there is no usable trained entry there. stage: told each part of the
    validation as it starts (siit.validation.PARTS, then zoo.entry_verdicts.PATCHING_PARTS)."""
    from zoo.artifact import ArtifactError
    from zoo.entry import load_entry_dir
    from zoo.errors import ZooError
    from zoo.train_entry import check_writable, compiled_task

    try:
        entry = load_entry_dir(dest)
    except ArtifactError as exc:
        raise ZooError(str(exc)) from None
    if entry.training is None:
        raise ZooError(f"entry {dest} has no training.json: nothing to validate against")
    check_writable(dest)
    import torch

    torch.set_num_threads(1)
    from siit.validation import validate_model
    from zoo.artifact import write_entry
    from zoo.card import render_model_card

    compiled = compiled_task(root, case)
    setup, model = entry_setup(compiled, entry, dest, device)
    from zoo.entry_verdicts import patching_checks

    validation = patching_checks(validate_model(model, setup.final_evaluator, compiled, stage=stage),
                                 entry.config, entry.state_dict, entry.circuit_json, compiled, stage=stage)
    files = {name: data for name, data in (("config.json", entry.config), ("circuit.json", entry.circuit_json),
                                           ("case.json", entry.case_json), ("training.json", entry.training))}
    files["validation.json"] = validation
    readme = render_model_card(name=dest.name, config=entry.config, circuit=entry.circuit_json,
                               case=entry.case_json, training=entry.training, validation=validation)
    write_entry(dest, state_dict=entry.state_dict, json_files=files, readme=readme)
    return validation
