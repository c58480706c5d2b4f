"""`zoo validate case N`: recompute validation.json of a trained entry (zoo.validate_entry) and print it.

Top level is standard library only (the CLI must start fast).
"""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    from zoo.commands.common import add_common, add_device

    p = sub.add_parser(
        "validate", help="recompute validation.json of a trained entry (node effects, ablations)",
        description="Load a trained entry, recompute accuracy, IIA, SIIA and per-node effects under "
        "resample, mean and zero ablation on its held-out data, and rewrite validation.json.")
    add_common(p)
    p.add_argument("--out", metavar="DIR", help="entry directory (default <root>/entries/case-N)")
    add_device(p)
    p.set_defaults(func=run_validate)


def run_validate(args: argparse.Namespace) -> int:
    from zoo.high_level_source import resolve_case
    from zoo.train_entry import destination
    from zoo.validate_entry import revalidate_entry

    case = resolve_case(args.kind, args.id)
    dest = destination(args.root, args.out, case)
    from zoo.commands.common import ValidationProgress, device_from

    validating = ValidationProgress()
    try:
        validation = revalidate_entry(case, dest, args.root, device=device_from(args), stage=validating.stage)
    finally:
        validating.close()
    m = validation["metrics"]
    out = {"entry": str(dest), "accuracy": m["accuracy"], "iia": m["iia"], "siia_min": m["siia_min"],
           "max_out_of_circuit_effect": validation["max_out_of_circuit_effect"],
           "max_out_of_circuit_effect_by_shape": validation["max_out_of_circuit_effect_by_shape"],
           "max_out_of_circuit_effect_by_length": validation["max_out_of_circuit_effect_by_length"],
           "accuracy_non_circuit_ablated": validation["accuracy_non_circuit_ablated"],
           "effect_bounds": {k: v for k, v in (validation.get("effect_bounds") or {}).items()
                             if k not in ("definition", "by_length")},
           "edge_effects": {k: v for k, v in validation["edge_effects"].items() if k != "definition"},
           "edge_bounds": {k: v for k, v in (validation.get("edge_bounds") or {}).items()
                           if k not in ("definition", "by_length")},
           "heuristic_separation": {k: v["separation"] for k, v in validation["realism"]["heuristics"].items()},
           **({"saturation": validation["saturation"]} if "saturation" in validation else {})}
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
        from zoo.card_bounds import bound_sentence, edge_bound_sentence
        from zoo.train_summary import saturation_line

        if sentence := bound_sentence(validation.get("effect_bounds"), markdown=False):
            print(f"  out-of-circuit bound: {sentence}")
        edges = validation["edge_effects"]
        if "skipped" in edges:
            print(f"  edge-level ground truth: not measured ({edges['skipped']})")
        else:
            print(f"  edge-level ground truth: {'exact' if edges['exact'] else 'NOT exact'}: largest non-circuit "
                  f"edge effect {edges['max_out_of_circuit_edge_effect']:.3f}{f' ({w})' if (w := edges['worst_edge']) else ''}, "
                  f"{len(edges['out_of_circuit_edges_above_bound'])} edge(s) above {edges['bound']}")
        if sentence := edge_bound_sentence(validation.get("edge_bounds"), markdown=False):
            print(f"  edge-level bound: {sentence}")
        for row in validation.get("saturation") or ():  # a family's saturated heads (siit.saturation)
            print(f"  {saturation_line(row)}")
        sep = {k: v["separation"] for k, v in validation["realism"]["heuristics"].items()}
        print(f"  circuit vs size (separation, 0.5 = chance): output norm {sep['output_norm']:.2f}, "
              f"output variance {sep['output_variance']:.2f}, weight norm {sep['weight_norm']:.2f}")
    return 0
