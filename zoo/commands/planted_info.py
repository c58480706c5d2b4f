"""`zoo list planted` and `zoo show planted NAME`: the planted models, their architecture and circuit."""

from __future__ import annotations

import argparse
import json
from typing import Any


def describe(name: str) -> dict[str, Any]:
    """JSON-native facts about one planted model (no training, no torch work beyond import)."""
    from siit.config import ArchConfig
    from zoo.high_level_source import planted_task

    task = planted_task(name)
    low = task.low_level_config(ArchConfig())
    graph = task.graph
    return {
        "id": name, "entry": task.case.entry_name, "case": task.case.metadata(),
        "encoding": task.encoding.to_json(),
        "low_level": {k: low[k] for k in ("n_layers", "n_heads", "d_model", "d_head", "d_mlp", "n_ctx")},
        "components": low["n_layers"] * (low["n_heads"] + 1),
        "graph": graph.to_json(),
        "family": task.failure_mode,
        "joint_interchanges": ["+".join(group) for group in task.model.joint],
        "saturated_heads": list(getattr(task.model, "saturated", ())),
        "logit_template": task.logit_template,
        "bundle": None if task.bundle is None else {
            "name": task.bundle.name, "views": list(task.bundle.view_names),
            "trained_on": "every task's rows: the views of a bundle share their weights (planted.multi_task)"},
        "correspondence_rule": ("fixed: each node is the component it names (planted.multi_task)" if task.fixed_placement
                                else "a high-level head -> a head of the same layer drawn with the training seed; "
                                     "an MLP -> the MLP of its layer (siit.correspondence)"),
    }


def run_list_planted(args: argparse.Namespace) -> int:
    from planted import family_members, planted_names
    from rasp_programs.case import CaseError
    from zoo.errors import ZooError
    from zoo.paths import entries_dir, zoo_root

    entries = entries_dir(zoo_root(args.root))
    try:
        names = planted_names() if getattr(args, "family", None) is None else family_members(args.family)
    except CaseError as exc:
        raise ZooError(str(exc)) from None
    rows = [describe(n) for n in names]
    for row in rows:
        row["trained"] = (entries / row["entry"]).is_dir()
    if args.json:
        print(json.dumps([{k: r[k] for k in ("id", "entry", "family", "bundle", "low_level", "components", "trained")}
                          | {"nodes": len(r["graph"]["nodes"]), "edges": len(r["graph"]["edges"]),
                             "description": r["case"]["description"]} for r in rows], indent=1))
        return 0
    header = ("id", "kind", "family", "layers", "heads", "components", "nodes", "edges", "trained")
    table = [header] + [(r["id"], "planted", r["family"] or (r["bundle"] or {}).get("name") or "-", str(r["low_level"]["n_layers"]),
                         str(r["low_level"]["n_heads"]),
                         str(r["components"]), str(len(r["graph"]["nodes"])), str(len(r["graph"]["edges"])),
                         "yes" if r["trained"] else "-") for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    return 0


def run_show_planted(args: argparse.Namespace) -> int:
    info = describe(args.id)
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    case, low, graph = info["case"], info["low_level"], info["graph"]
    print(f"planted {info['id']}: {case['name']} ({case['task_kind']}{', causal' if case['causal'] else ''})")
    print(f"  {case['description']}")
    print(f"  vocab: {case['vocab']}  lengths {case['min_seq_len']}..{case['max_seq_len']}")
    print(f"low-level model: layers {low['n_layers']}, heads {low['n_heads']}, d_model {low['d_model']}, "
          f"d_head {low['d_head']}, d_mlp {low['d_mlp']} ({info['components']} components)")
    print(f"circuit ({len(graph['nodes'])} nodes, {len(graph['edges'])} edges):")
    for node in graph["nodes"]:
        print(f"  {node:8s} {graph['labels'].get(node, '')}")
    print("  edges: " + ", ".join(f"{s}->{d}" for s, d in graph["edges"]))
    print(f"  correspondence: {info['correspondence_rule']}")
    if info["joint_interchanges"]:
        print(f"  joint interchanges (IIT draws and IIA judges each like a node): {', '.join(info['joint_interchanges'])}")
    if info["logit_template"] is not None:
        print(f"  logits trained to a template of the answer, margin {info['logit_template']:g} (siit.losses.template_loss)")
    if info["saturated_heads"]:
        print(f"  saturated heads (trained to a score margin on their keys, siit.saturation): "
              f"{', '.join(info['saturated_heads'])}")
    if (corruption := case.get("corruption", "resample")) != "resample":
        print(f"  methods' counterfactuals: {corruption} (trained on resampled interchanges; `zoo eval --corruption "
              f"resample` gives them those)")
    if info["bundle"]:
        views = info["bundle"]["views"]
        print(f"multi-task bundle {info['bundle']['name']}: trained on the rows of all {len(views)} tasks, whose "
              f"views share the weights: {', '.join(views)} (`zoo train planted {case['id']} --all-views` writes "
              "every view's entry from one training)")
    return 0
