"""Model cards and the benchmark card, rendered from the templates in `cards/` (Markdown with YAML
front matter, `string.Template` placeholders).

The front matter is built as data and dumped with yaml.safe_dump, so descriptions with colons or
quotes cannot break it; the prose placeholders are filled with `safe_substitute`, so `$` in a
description is left alone. validation.json is read defensively (its producer is the training code):
numeric top-level figures (accuracy, iia, siia, ...) go into `model-index`; per-node effects are
tabulated when `nodes` (or `node_effects`) maps a node, or lists rows with a `node` key, to numbers
and an `in_circuit` flag.
"""

from __future__ import annotations

import json
from importlib import resources
from string import Template
from typing import Any

import yaml

from zoo.benchmark import cell, scalar_fields, validation_figures

LICENSE = "apache-2.0"
TAGS = ["mechanistic-interpretability", "circuits", "ground-truth-circuit", "tracr", "rasp",
        "interpbench", "transformer-lens", "zoo"]
COUNTS = frozenset({"n_sequences", "n_labelled_positions"})  # sizes, listed under zoo: but not as metrics
METRIC_NAMES = {"accuracy": "Accuracy", "iia": "IIA (interchange intervention accuracy)",
                "siia": "SIIA (strict interchange intervention accuracy)"}


def _template(name: str) -> Template:
    return Template(resources.files("cards").joinpath(name).read_text(encoding="utf-8"))


def _front_matter(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100).rstrip("\n")


def loading_snippet(name: str) -> str:
    """Python that loads the entry and runs it on seeded inputs (a test executes it)."""
    return "\n".join([
        "import torch",
        "import zoo",
        "",
        f'entry = zoo.load("{name}")',
        "seqs = entry.case.sample(4, seed=0)          # seeded inputs from the task's sampler",
        "tokens, mask = entry.encoding.encode(seqs)   # prepends BOS, pads, masks",
        "with torch.no_grad():",
        "    logits = entry.model(tokens, attention_mask=mask)",
        "print(entry.encoding.decode(logits, [len(s) for s in seqs]))",
        "print(entry.circuit.nodes)",
    ])


def _node_rows(validation: dict[str, Any] | None) -> list[dict[str, Any]]:
    raw = (validation or {}).get("nodes", (validation or {}).get("node_effects"))
    if isinstance(raw, dict):
        raw = [{"node": k, **v} for k, v in raw.items() if isinstance(v, dict)]
    if not isinstance(raw, list):
        return []
    return [r for r in raw if isinstance(r, dict) and "node" in r]


def _validation_text(validation: dict[str, Any] | None) -> str:
    if not validation:
        return "No validation report in this entry."
    figures = validation_figures(validation)
    lines = ["| figure | value |", "| --- | --- |"]
    lines += [f"| {METRIC_NAMES.get(k, k)} | {cell(v)} |" for k, v in figures.items()]
    nodes = _node_rows(validation)
    if nodes:
        columns = [c for c in nodes[0] if c != "node" and all(_plain(r.get(c)) for r in nodes)]
        lines += ["", "Effect of ablating each node (resample, mean and zero ablation; whether the "
                  "node is in the ground-truth circuit):", "",
                  "| node | " + " | ".join(columns) + " |", "| --- |" + " --- |" * len(columns)]
        lines += ["| " + " | ".join([cell(r["node"])] + [cell(r.get(c)) for c in columns]) + " |"
                  for r in nodes]
    return "\n".join(lines)


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _training_text(training: dict[str, Any] | None) -> str:
    fields = scalar_fields(training)
    if not fields:
        return "Compiled with Tracr; no training record in this entry."
    return "\n".join(["| setting | value |", "| --- | --- |"]
                     + [f"| {cell(k)} | {cell(v)} |" for k, v in fields.items()])


def render_model_card(
    *,
    name: str,
    config: dict[str, Any],
    circuit: dict[str, Any],
    case: dict[str, Any],
    training: dict[str, Any] | None,
    validation: dict[str, Any] | None,
) -> str:
    """The README.md of one entry: YAML front matter (license, library, tags, model-index with the
    validation figures, zoo fields) and prose (task, circuit labelling, validation, loading)."""
    figures = validation_figures(validation)
    nodes, edges = circuit.get("nodes", []), circuit.get("edges", [])
    task_kind = case.get("task_kind", "classification")
    front: dict[str, Any] = {
        "license": LICENSE,
        "library_name": "transformer-lens",
        "tags": TAGS,
        "zoo": {
            "entry": name,
            "case_id": str(case.get("id", "")),
            "task_kind": task_kind,
            "circuit": {"granularity": circuit.get("granularity", "head"),
                        "n_nodes": len(nodes), "n_edges": len(edges)},
            "validation": figures,
        },
    }
    if figures:
        front["model-index"] = [{
            "name": name,
            "results": [{
                "task": {"type": "token-classification" if task_kind == "classification" else "regression",
                         "name": case.get("name") or name},
                "dataset": {"type": "synthetic", "name": f"{name} held-out inputs (seeded sampler)"},
                "metrics": [{"type": k, "value": float(v), "name": METRIC_NAMES.get(k, k)}
                            for k, v in figures.items() if k not in COUNTS],
            }],
        }]
    labels = circuit.get("labels", {}) or {}
    node_table = "\n".join(["| node | computes |", "| --- | --- |"]
                           + [f"| `{n}` | {cell(labels.get(n, ''))} |" for n in nodes])
    corr = circuit.get("correspondence")
    correspondence = ""
    if corr:
        correspondence = "\nCorrespondence (high-level node -> low-level nodes): " + ", ".join(
            f"`{k}` -> {', '.join(f'`{x}`' for x in v)}" for k, v in corr.items()) + "\n"
    output = case.get("encoding", {}).get("output_vocab")
    notes = f"- Note: {case['notes']}\n" if case.get("notes") else ""
    values = {
        "front_matter": _front_matter(front),
        "name": name,
        "title": case.get("name") or name,
        "description": case.get("description", ""),
        "origin": "then trained with SIIT" if training else "weights as compiled",
        "case_id": case.get("id", ""),
        "case_name": case.get("name", ""),
        "task_kind": task_kind,
        "attention": "causal attention" if case.get("causal") else "bidirectional attention",
        "vocab": ", ".join(f"`{v}`" for v in case.get("vocab", [])),
        "min_len": case.get("min_seq_len", 1),
        "max_len": case.get("max_seq_len", ""),
        "bos": case.get("bos", "BOS"),
        "pad": case.get("pad", "PAD"),
        "output": (f"one of {', '.join(f'`{v}`' for v in output)} at every input position (argmax of the logits)"
                   if output else "one number at every input position (logits[..., 0])"),
        "notes": notes,
        **{k: config.get(k, "") for k in ("n_layers", "n_heads", "d_model", "d_head", "d_mlp", "act_fn",
                                           "attention_dir", "n_ctx", "d_vocab", "d_vocab_out")},
        "n_nodes": len(nodes),
        "n_edges": len(edges),
        "node_table": node_table,
        "edges": ", ".join(f"`{s}->{d}`" for s, d in edges) or "none",
        "correspondence": correspondence,
        "validation": _validation_text(validation),
        "training": _training_text(training),
        "snippet": loading_snippet(name),
        "files": "`model.safetensors`, `config.json`, `circuit.json`, `case.json`, `training.json`, "
                 "`validation.json`, `README.md`, `manifest.json` (sha256 of every file).",
    }
    return _template("model_card.md").safe_substitute(values)


def render_benchmark_card(rows: list[dict[str, Any]], *, repo_id: str, tables: list[str]) -> str:
    """README.md at the root of the Hub repository: what the zoo is, a table of every entry."""
    header = ["entry", "task", "kind", "layers", "heads", "nodes", "edges", "accuracy", "IIA", "SIIA"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for r in rows:
        arch, circ, val = r.get("architecture", {}), r.get("circuit", {}), r.get("validation", {})
        lines.append("| " + " | ".join(cell(x) for x in [
            r["entry"], r.get("description"), r.get("task_kind"), arch.get("n_layers"), arch.get("n_heads"),
            circ.get("n_nodes"), circ.get("n_edges"), val.get("accuracy"), val.get("iia"), val.get("siia"),
        ]) + " |")
    example = rows[0]["entry"] if rows else "case-33"
    front = {"license": LICENSE, "library_name": "transformer-lens", "tags": TAGS,
             "zoo": {"format": "zoo/1", "entries": [r["entry"] for r in rows]}}
    others = [t for t in tables if t != "benchmark_metadata.json"]
    return _template("benchmark_card.md").safe_substitute({
        "front_matter": _front_matter(front),
        "title": f"zoo: transformers with known circuits ({len(rows)} entries)",
        "table": "\n".join(lines),
        "tables": f"(and the same table as {' and '.join(f'`{t}`' for t in others)})" if others else "",
        "example": example,
        "example_kind": example.partition("-")[0],
        "example_id": example.partition("-")[2],
        "repo_id": repo_id,
    })


def front_matter(card: str) -> dict[str, Any]:
    """The parsed YAML front matter of a card (a ValueError when there is none)."""
    if not card.startswith("---\n"):
        raise ValueError("card has no YAML front matter")
    block, sep, _ = card[4:].partition("\n---\n")
    if not sep:
        raise ValueError("card's YAML front matter is not closed")
    data = yaml.safe_load(block)
    return json.loads(json.dumps(data))  # plain JSON-native data
