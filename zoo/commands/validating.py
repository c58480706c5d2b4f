"""`zoo validate case N` (recompute validation.json of a trained entry), and the trained entry rebuilt
with the setup it was judged on (for validate and the benchmarks that study an entry).

Top level is standard library only (the CLI must start fast); torch and siit are imported inside
the functions.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    from zoo.commands.common import add_common

    p = sub.add_parser(
        "validate", help="recompute validation.json of a trained entry (node effects, ablations)",
        description="Load a trained entry, recompute accuracy, IIA, SIIA and per-node effects under "
        "resample, mean and zero ablation on its held-out data, and rewrite validation.json.")
    add_common(p)
    p.add_argument("--out", metavar="DIR", help="entry directory (default <root>/entries/case-N)")
    p.set_defaults(func=run_validate)


def entry_setup(compiled, entry, dest: Path):
    """(siit.trainer's setup, the low-level model) of a trained entry, rebuilt from its recorded
    training config: the validation data and evaluators it was judged on. Refuses an entry whose
    circuit.json names another correspondence than that config implies."""
    from siit.export import config_from_training_json, correspondence_from_circuit_json
    from siit.trainer import prepare
    from siit.transformer import Transformer
    from zoo.errors import ZooError

    config, arch = config_from_training_json(entry.training)
    setup = prepare(compiled, config, arch)
    high_layout = {"n_layers": setup.corr.high.n_layers, "n_heads": setup.corr.high.n_heads}
    corr = correspondence_from_circuit_json(entry.circuit_json, high_layout, entry.config)
    if corr.mapping != setup.corr.mapping:
        raise ZooError(f"entry {dest}: its correspondence differs from the one its training config implies")
    return setup, Transformer.from_state_dict(entry.config, entry.state_dict)


def trained_entry(case_id: str, root: str | None):
    """(case, entry, setup, model) of the trained entry of case `case_id` in the zoo root (None:
    $ZOO_HOME or ~/.cache/zoo), rebuilt by entry_setup: for the benchmarks that study an entry."""
    from zoo.commands.common import resolve_case
    from zoo.entry import load_entry_dir
    from zoo.high_level_source import high_level_task
    from zoo.paths import compiled_dir, entries_dir, zoo_root

    case = resolve_case("case", case_id)
    root_dir = zoo_root(root)
    dest = entries_dir(root_dir) / case.entry_name
    entry = load_entry_dir(dest)  # the root exists, since the entry does: compile into its cache
    task = high_level_task(case, compiled_dir(root_dir))
    return (case, entry, *entry_setup(task, entry, dest))


def run_validate(args: argparse.Namespace) -> int:
    from zoo.artifact import ArtifactError
    from zoo.commands.common import resolve_case
    from zoo.commands.training import _check_writable, _compiled, _destination
    from zoo.entry import load_entry_dir
    from zoo.errors import ZooError

    case = resolve_case(args.kind, args.id)
    dest = _destination(args, case)
    try:
        entry = load_entry_dir(dest)
    except ArtifactError as exc:
        raise ZooError(str(exc)) from None
    if entry.training is None:
        raise ZooError(f"entry {dest} has no training.json: nothing to validate against")
    _check_writable(dest)
    import torch

    torch.set_num_threads(1)
    from siit.validation import validate_model
    from zoo.artifact import write_entry
    from zoo.card import render_model_card

    compiled = _compiled(args, case)
    setup, model = entry_setup(compiled, entry, dest)
    from zoo.inert_edges import inert_section

    validation = {**validate_model(model, setup.final_evaluator),
                  "inert_edges": inert_section(entry.config, entry.state_dict, entry.circuit_json, compiled)}
    files = {name: data for name, data in (("config.json", entry.config), ("circuit.json", entry.circuit_json),
                                           ("case.json", entry.case_json), ("training.json", entry.training))}
    files["validation.json"] = validation
    readme = render_model_card(name=dest.name, config=entry.config, circuit=entry.circuit_json,
                               case=entry.case_json, training=entry.training, validation=validation)
    write_entry(dest, state_dict=entry.state_dict, json_files=files, readme=readme)
    m = validation["metrics"]
    out = {"entry": str(dest), "accuracy": m["accuracy"], "iia": m["iia"], "siia_min": m["siia_min"],
           "max_out_of_circuit_effect": validation["max_out_of_circuit_effect"],
           "max_out_of_circuit_effect_by_shape": validation["max_out_of_circuit_effect_by_shape"],
           "max_out_of_circuit_effect_by_length": validation["max_out_of_circuit_effect_by_length"],
           "accuracy_non_circuit_ablated": validation["accuracy_non_circuit_ablated"],
           "heuristic_separation": {k: v["separation"] for k, v in validation["realism"]["heuristics"].items()}}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{dest.name}: accuracy {m['accuracy']:.4f}  IIA {m['iia']:.4f}  SIIA min {m['siia_min']:.4f}")
        print(f"  per node, the largest effect over {', '.join(validation['input_shapes'])} inputs:")
        for row in validation["node_effects"]:
            flag = "in " if row["in_circuit"] else "out"
            print(f"  {row['node']:7s} {flag}  resample {row['resample']:.3f}  mean {row['mean']:.3f}  "
                  f"zero {row['zero']:.3f}")
        print("  largest out-of-circuit effect per input length: " + ", ".join(
            f"{n}: {v['resample']:.3f}/{v['mean']:.3f}" for n, v in validation["max_out_of_circuit_effect_by_length"].items())
            + " (resample/mean)")
        sep = {k: v["separation"] for k, v in validation["realism"]["heuristics"].items()}
        print(f"  circuit vs size (separation, 0.5 = chance): output norm {sep['output_norm']:.2f}, "
              f"output variance {sep['output_variance']:.2f}, weight norm {sep['weight_norm']:.2f}")
    return 0
