"""Which busy node an entry's training waited for, and whether the circuit reads it (issues 35 and 36).

From each trained entry's own files (training.json's history and distractors, validation.json's edge
effects; nothing is rerun): when the circuit was first at 1.0 and when it held there (IIA min and SIIA min
within 0.001 of 1; from then on, for the second),
when the distractor R² criterion did, which busy node crossed last, and for every busy node the step its
R² first reached the criterion, its loudness gains (siit.loudness: a norm gain at the floor 0.25 means the
node stayed louder than its target with the target trimmed to a quarter), and the largest single-edge
effect from it into a circuit node or the logits (validation.json lists the edges above the bound; any
other counts as 0). Also the Spearman correlation, over an entry's busy nodes, between the step each
crossed and that edge effect. Case 11 (thirty-fourth session) waited ~3,500 steps for `a0.h3`, the busy
head whose edge into the circuit's `m0` moves the output most (docs/results.md).

    python tests/benchmarks/bench_busy_lag.py ROOT [ROOT ...] [--r2 0.9]

Prints one JSON object: entries (one row per entry under ROOT/entries with both files) and a summary.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from scipy.stats import spearmanr

NEAR = 0.001
"""How close to 1 the circuit's IIA and SIIA minima count as met (training's checks are on a sample)."""


def _first_step_from(history: list[dict], ok) -> int | None:
    """The first step from which ok(metrics) holds at every later check, or None."""
    step = None
    for record in history:
        if ok(record["metrics"]):
            step = record["step"] if step is None else step
        else:
            step = None
    return step


def _first_step(history: list[dict], ok) -> int | None:
    return next((r["step"] for r in history if ok(r["metrics"])), None)


def _spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rho (ties at their mean rank), or None below 3 points or where either side is constant."""
    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    return round(float(spearmanr(xs, ys).statistic), 3)


def entry_row(entry: Path, r2: float) -> dict | None:
    """One entry's row, or None when it lacks training history or distractors."""
    try:
        training = json.loads((entry / "training.json").read_text())
        validation = json.loads((entry / "validation.json").read_text())
        circuit = json.loads((entry / "circuit.json").read_text())
    except (OSError, ValueError):
        return None
    history = training.get("history") or []
    distractors = (training.get("realism") or {}).get("distractors") or []
    if not history or not distractors:
        return None
    readers = {n for nodes in circuit.get("correspondence", {}).values() for n in nodes} | {"logits"}
    into: dict[str, float] = {}
    for edge, effect in (validation.get("edge_effects") or {}).get("out_of_circuit_edges_above_bound", []):
        sender, reader = edge.split("->")
        if reader.split("<")[0] in readers:
            into[sender] = max(into.get(sender, 0.0), float(effect))
    nodes = []
    for d in distractors:
        name = d["node"]
        crossed = _first_step_from(history, lambda m, n=name: m.get("distractor_r2_per_node", {}).get(n, -1) >= r2)
        nodes.append({"node": name, "kind": d.get("kind"), "r2_step": crossed, "final_r2": d.get("r2"),
                      "gain": d.get("target_gain"), "largest_edge_into_circuit": round(into.get(name, 0.0), 4)})
    def circuit_at_one(m: dict) -> bool:
        return m["iia_min"] >= 1 - NEAR and m["siia_min"] >= 1 - NEAR

    r2_met = _first_step_from(history, lambda m: m.get("distractor_r2_min", -1) >= r2)
    crossed = [n for n in nodes if n["r2_step"] is not None]
    last = max(crossed, key=lambda n: n["r2_step"]) if crossed else None
    return {"entry": entry.name, "steps": training.get("steps"), "met": training.get("met_criterion"),
            "circuit_met_step": _first_step_from(history, circuit_at_one),
            "circuit_first_near_step": _first_step(history, circuit_at_one),
            "r2_met_step": r2_met, "last_busy_node": last["node"] if last else None,
            "last_busy_node_edge_into_circuit": last["largest_edge_into_circuit"] if last else None,
            "largest_edge_into_circuit": max((n["largest_edge_into_circuit"] for n in nodes), default=0.0),
            "gain_at_floor": [n["node"] for n in nodes if n["gain"] and min(n["gain"]) <= 0.25 + 1e-6],
            "spearman_r2_step_vs_edge": _spearman([n["r2_step"] for n in crossed],
                                                  [n["largest_edge_into_circuit"] for n in crossed]),
            "busy_nodes": nodes}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("roots", nargs="+", type=Path, help="zoo roots whose entries/ hold trained entries")
    ap.add_argument("--r2", type=float, default=0.9, help="the distractor R² criterion (TrainConfig.distractor_r2)")
    args = ap.parse_args(argv)
    missing = [str(r) for r in args.roots if not (r / "entries").is_dir()]
    if missing:
        ap.error(f"no entries/ under {', '.join(missing)}")
    rows = []
    for root in args.roots:
        for entry in sorted((root / "entries").glob("*")):
            if entry.is_dir() and not entry.name.startswith("."):
                row = entry_row(entry, args.r2)
                if row is not None:
                    rows.append(dict(row, root=str(root)))
    # an entry waited on its busy nodes when their R² held only after the circuit was first at 1.0
    waited = [r for r in rows if r["r2_met_step"] and r["circuit_first_near_step"]
              and r["r2_met_step"] > r["circuit_first_near_step"]]
    out = {"r2": args.r2, "entries": rows, "summary": {
        "entries": len(rows),
        "waited_on_busy_nodes": len(waited),
        "steps_after_circuit": {r["entry"]: r["r2_met_step"] - r["circuit_first_near_step"] for r in waited},
        "last_busy_node_is_the_most_read": sum(1 for r in waited if r["last_busy_node_edge_into_circuit"]
                                               == r["largest_edge_into_circuit"] > 0)}}
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
