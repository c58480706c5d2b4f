"""Is an entry's edge-level ground truth true? Exact patching of every q/k/v edge of trained
entries, the effect measured as validation.json measures a node's: the fraction of labelled
positions whose output changes (classification: another argmax; regression: by the tolerance or
more) against the unpatched model, under resample patching on fresh inputs. As JSON.

    python tests/benchmarks/bench_edge_exactness.py ROOT [--entries case-3 planted-ioi ...] [--n 1000]
        [--seed 7] [--bound 0.01] [--per-length]

An edge is a circuit edge when its head-level edge is in circuit.json (`<q>`, `<k>`, `<v>` parts of a
labelled head edge all count as labelled); every other edge (q/k/v level), including edges between
two circuit nodes that the high-level graph lacks, is a non-circuit edge and should move nothing
(issue 36: <= 0.01). Per entry, what validation.json's `edge_effects` holds (zoo.edge_exactness, with
this benchmark's n, seed and bound, and no edge limit): the largest non-circuit effect and its edge,
the edges above the bound, the circuit edges' smallest and median effects, and the largest |logit
change| of a non-circuit edge beside the circuit edges' median. Inputs: the case's sampler (seed --seed, counterfactuals
seed + 1000003), padded to n_ctx; the other input shapes are not measured here. The positions of one
input are not independent, so the input is the unit: `upper_95` is the 95% Clopper-Pearson bound
on the fraction of inputs a non-circuit edge changes (n inputs, none changed: 1 - 0.05^(1/n)).
--per-length adds, per entry, validation.json's `edge_bounds` (siit.edge_bounds, no edge limit): every
non-circuit edge patched alone on 300 fresh sequences per input length (seed 36000017), the largest
effect per length, and the entry's validation set rebuilt from training.json for its shapes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def measure_entry(path: Path, n: int, seed: int, bound: float, per_length: bool = False) -> dict[str, Any]:
    """zoo.edge_exactness.edge_section (what validation.json holds) on a trained entry, with this
    benchmark's n, seed and bound and no edge limit."""
    from zoo.edge_exactness import edge_section
    from zoo.entry import load_entry_dir
    from zoo.high_level_source import high_level_task
    from zoo.paths import compiled_dir

    start = time.perf_counter()
    entry = load_entry_dir(path)
    task = high_level_task(entry.case, compiled_dir(path.parent.parent))
    section = edge_section(entry.config, entry.state_dict, entry.circuit_json, task,
                           (entry.validation or {}).get("tolerance"), n=n, seed=seed, limit=10**9, bound=bound)
    section.pop("definition")
    out = {"entry": path.name, **section, "seconds": round(time.perf_counter() - start, 2)}
    if per_length:
        out["per_length"] = _per_length(path, entry, task)
    return out


def _per_length(path: Path, entry: Any, task: Any) -> dict[str, Any]:
    """siit.edge_bounds on the entry (no edge limit), without its by_length cells but with each
    length's largest effect and its edge, and the seconds it took."""
    from siit.edge_bounds import edge_bounds
    from zoo.validate_entry import entry_setup

    setup, model = entry_setup(task, entry, path)
    start = time.perf_counter()
    section = edge_bounds(model, setup.final_evaluator, task, limit=10**9)
    section.pop("definition")
    cells = section.pop("by_length")
    section["max_by_length"] = {length: max((c["effect"], c["edge"] or "", kind) for by_kind in by_shape.values()
                                            for kind, c in by_kind.items())
                                for length, by_shape in cells.items()}
    return {**section, "seconds": round(time.perf_counter() - start, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="zoo root whose entries/ holds trained entries")
    parser.add_argument("--entries", nargs="+", default=None, help="entry names (default: every entry)")
    parser.add_argument("--n", type=int, default=1000, help="fresh inputs (and as many counterfactuals)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the inputs (not the validation's)")
    parser.add_argument("--bound", type=float, default=0.01, help="the bound a non-circuit edge must stay within")
    parser.add_argument("--per-length", action="store_true", help="also siit.edge_bounds: per input length, fresh sample")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    names = args.entries or sorted(p.name for p in (args.root / "entries").iterdir() if not p.name.startswith("."))
    rows = []
    for name in names:
        rows.append(measure_entry(args.root / "entries" / name, args.n, args.seed, args.bound, args.per_length))
        r = rows[-1]
        print(f"{name}: max non-circuit edge effect {r['max_out_of_circuit_edge_effect']:.4f} ({r['worst_edge']}), "
              f"{len(r['out_of_circuit_edges_above_bound'])} above {args.bound}; circuit edges min "
              f"{r['min_circuit_edge_effect']} ({r['seconds']} s)"
              + (f"; per length: max {r['per_length']['max_effect']:.4f}" if args.per_length else ""),
              file=sys.stderr, flush=True)
    above = [r["entry"] for r in rows if r["max_out_of_circuit_edge_effect"] > args.bound]
    print(json.dumps({"n": args.n, "seed": args.seed, "bound": args.bound, "entries_above_bound": above,
                      "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
