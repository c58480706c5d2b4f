"""Model cards and the benchmark card, rendered from the templates in `cards/` (Markdown with YAML
front matter, `string.Template` placeholders).

The front matter is built as data and dumped with yaml.safe_dump, so descriptions with colons or
quotes cannot break it; the prose placeholders are filled with `safe_substitute`, so `$` in a
description is left alone. validation.json is read defensively (its producer is the training code):
numeric top-level figures (accuracy, iia, siia, ...) go into `model-index`; per-node effects are
tabulated when `nodes` (or `node_effects`) maps a node, or lists rows with a `node` key, to numbers
and an `in_circuit` flag (nested per-shape effects are summarised in their own table). The Realism
section reads validation.json's `realism` (eval.core.node_heuristics) and training.json's `realism` (what each
out-of-circuit node was trained to compute); entries made before either existed say so.
"""

from __future__ import annotations

import json
from importlib import resources
from string import Template
from typing import Any

import yaml

from zoo.card_bounds import bound_sentence, edge_bound_sentence, edge_lines
from zoo.card_looks import battery_text
from zoo.card_tasks import tasks_text
from zoo.hub_metadata import cell, scalar_fields, validation_figures
from zoo.train_summary import saturation_line

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
    lines += _largest_effect_lines(
        validation.get("max_out_of_circuit_effect_by_shape"), "input shape",
        "per input shape (padded to n_ctx, unpadded, padded part of the way; the model must ignore these nodes "
        "on every batch a user builds)")
    lines += _largest_effect_lines(
        validation.get("max_out_of_circuit_effect_by_length"), "length",
        "per input length (in the input shape where it is largest; n_sequences: validation inputs of that length)")
    sentence = bound_sentence(validation.get("effect_bounds"))
    lines += ["", f"Out-of-circuit bound on a fresh sample: {sentence}."] if sentence else []
    lines += edge_lines(validation.get("edge_effects"))
    if sentence := edge_bound_sentence(validation.get("edge_bounds")):
        lines += ["", f"Edge-level bound on a fresh sample: {sentence}."]
    lines += [f"\nTrained {saturation_line(r)} (siit.saturation)." for r in validation.get("saturation") or ()]
    lines += _tie_lines(validation.get("iit_label_ties"))
    return "\n".join(lines)


def _tie_lines(ties: Any) -> list[str]:
    """A warning where some IIT labels are ties of the compiled model (siit.validation)."""
    if not isinstance(ties, dict) or not ties.get("any"):
        return []
    parts = ", ".join(f"{node}: {v['ties']} of {v['labels']}" for node, v in ties.get("per_node", {}).items()
                      if v.get("ties"))
    return ["", f"Some IIT labels are ties of the compiled model's top two logits ({parts} labelled positions): "
                "argmax's tie-break or float noise decides them, not the program, and IIA is judged on them too "
                "(validation.json `iit_label_ties`; docs/training.md)."]


def _largest_effect_lines(table: Any, key: str, what: str) -> list[str]:
    """The largest out-of-circuit effect per input shape or length (validation.json), if present."""
    if not isinstance(table, dict) or not table or not all(isinstance(v, dict) for v in table.values()):
        return []
    kinds = [k for k in next(iter(table.values())) if all(_plain(v.get(k)) for v in table.values())]
    return ["", f"Largest effect of any out-of-circuit node, {what}:", "",
            f"| {key} | " + " | ".join(kinds) + " |", "| --- |" + " --- |" * len(kinds)] + [
        "| " + " | ".join([cell(name)] + [cell(v.get(k)) for k in kinds]) + " |" for name, v in table.items()]


DISTRACTOR_TEXT = {
    "previous_token": "a random feature of the token {offset} position(s) back",
    "running_mean": "the running mean of a random token feature over the input so far",
    "input_mean": "the mean of a random token feature over the whole input",
    "token_position": "the absolute difference of a random token feature and a random position code",
}


def _realism_text(validation: dict[str, Any] | None, training: dict[str, Any] | None, case_id: Any) -> str:
    """How well a method that never intervenes finds the circuit, and what the busy nodes compute."""
    measured = (validation or {}).get("realism")
    trained = (training or {}).get("realism")
    measured = measured if isinstance(measured, dict) else None
    trained = trained if isinstance(trained, dict) else None
    if measured is None and trained is None:
        return ("No realism measurements in this entry (it predates them). `zoo realism case "
                f"{case_id}` reports how well activation and weight size find its circuit.")
    lines: list[str] = []
    heuristics = (measured or {}).get("heuristics")
    bounded = (measured or {}).get("bounded_heuristics") or []
    if isinstance(heuristics, dict) and heuristics:
        lines += ["How well ranking the nodes by a quantity that needs no intervention finds the circuit, as "
                  "node AUROC against the circuit and its separation max(AUROC, 1 - AUROC): 0.5 is chance, 1.0 "
                  "gives the circuit away (target <= 0.75 for the bounded heuristics).", "",
                  "| heuristic | AUROC | separation | bounded |", "| --- | --- | --- | --- |"]
        lines += [f"| {cell(name)} | {cell(h.get('auroc'))} | {cell(h.get('separation'))} | "
                  f"{'yes' if name in bounded else 'no (reported)'} |"
                  for name, h in heuristics.items() if isinstance(h, dict)]
        ratio = measured.get("variance_floor_ratio")
        if isinstance(ratio, (int, float)):
            lines += ["", f"Variance floor ratio (smallest out-of-circuit output variance / median circuit node's): "
                      f"{cell(float(ratio))} (target >= 0.25)."]
    distractors = {d["node"]: d for d in (trained or {}).get("distractors") or [] if isinstance(d, dict) and "node" in d}
    rows = [r for r in (measured or {}).get("nodes") or [] if isinstance(r, dict) and "node" in r]
    names = [r["node"] for r in rows] or list(distractors)
    if names:
        stats = {r["node"]: r for r in rows}
        lines += ["", "| node | in circuit | output norm | output variance | weight norm | trained to compute | R² |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for n in names:
            r, d = stats.get(n, {}), distractors.get(n)
            inside = r.get("in_circuit")
            what = _distractor_text(d) if d else ("the task (circuit)" if inside else "-")
            lines.append(f"| `{n}` | {cell(inside)} | {cell(r.get('output_norm'))} | {cell(r.get('output_variance'))} | "
                         f"{cell(r.get('weight_norm'))} | {cell(what)} | {cell(d.get('r2') if d else None)} |")
    multi_task = isinstance((validation or {}).get("tasks"), dict)
    if trained is not None and not distractors and not multi_task:
        lines += ["", "Out-of-circuit nodes were given no tasks of their own (plain SIIT): their outputs are "
                  "squashed, and activation size gives the circuit away."]
    if (trained or {}).get("head_rescale"):
        lines += ["", "After training each head's Q/K and V/O weights were rescaled by opposite factors (no output "
                  "changes; factors in training.json `realism.head_rescale`), so that weight size reflects the draw, not "
                  "the optimiser's path."]
    lines += ["", _realism_meaning(heuristics if isinstance(heuristics, dict) else {}, bounded, bool(distractors))]
    lines += battery_text((measured or {}).get("battery"))
    lines += tasks_text(validation)
    return "\n".join(lines).strip("\n")


def _distractor_text(d: dict[str, Any]) -> str:
    kind = d.get("kind")
    text = DISTRACTOR_TEXT[kind].format(offset=d.get("offset", "?")) if kind in DISTRACTOR_TEXT else str(kind)
    if d.get("reads"):  # siit.busy_reads: the feature is what earlier busy heads compute, read from their outputs
        what = f"a weighted sum of what {', '.join(f'`{n}`' for n in d['reads'])} compute (read from their outputs)"
        text = (f"the absolute difference of a random position code and {what}" if kind == "token_position"
                else f"{what}, {d.get('offset', '?')} position(s) back")
    # siit.busy_components: the same computation on further token features (a share under 0.1 is no feature yet)
    shares = [v for v in d.get("component_shares") or [] if v >= 0.1]
    if shares:
        text += f" ({len(shares) + 1} such features, each along its own direction)"
    if d.get("at") is not None:
        return f"{text}, at position {d['at']} only"
    if d.get("profile") is not None:  # siit.position_profiles
        return f"{text}, varying more at some positions than at others (its profile in training.json)"
    return text


def _realism_meaning(heuristics: dict[str, Any], bounded: list[str], busy: bool) -> str:
    """What the numbers mean for a user, in two sentences."""
    loud = [n for n in bounded if isinstance(heuristics.get(n), dict)
            and isinstance(heuristics[n].get("separation"), (int, float)) and heuristics[n]["separation"] > 0.75]
    if busy:
        text = ("**What this means for you:** the out-of-circuit nodes are busy with functions of the input of "
                "their own (above; the task output ignores them) yet ablating them changes nothing (see "
                "Validation), so a method has to test causal relevance to find the circuit")
        text += (f"; but on this entry {', '.join(loud)} still separate(s) the circuit beyond the 0.75 target, "
                 "so do not credit a method for what that heuristic finds as well." if loud
                 else ": ranking nodes by size is close to chance.")
    else:
        text = ("**What this means for you:** judge a method on this entry against the size heuristics above; "
                "where their separation is near 1 the circuit can be read off without any intervention.")
    dla = heuristics.get("logit_variance")
    if isinstance(dla, dict) and isinstance(dla.get("separation"), (int, float)) and dla["separation"] > 0.75:
        text += (" Direct logit attribution (logit_variance) still finds the circuit: strictness forbids "
                 "out-of-circuit nodes from writing input-dependent signals onto the task logits.")
    return text


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _training_text(training: dict[str, Any] | None) -> str:
    fields = scalar_fields(training)
    if not fields:
        return "Compiled with Tracr; no training record in this entry."
    table = "\n".join(["| setting | value |", "| --- | --- |"]
                      + [f"| {cell(k)} | {cell(v)} |" for k, v in fields.items()])
    actions = ((training or {}).get("adaptation") or {}).get("actions") or []
    if not actions:
        return table
    lines = [f"- step {a.get('step')}: {a.get('action')} ({a.get('reason')})" for a in actions]
    return "\n\n".join([table, "Where training stalled or collapsed, it adapted (siit.adaptation):",
                         "\n".join(lines)])


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
    planted = case.get("family") == "planted"
    node_table, correspondence = _circuit_tables(circuit)
    output = case.get("encoding", {}).get("output_vocab")
    notes = f"- Note: {case['notes']}\n" if case.get("notes") else ""
    if (corruption := case.get("corruption", "resample")) != "resample":  # eval.core.corruption
        notes += f"- Counterfactuals: methods get `{corruption}`, not SIIT's resampled inputs (`zoo eval`'s default)\n"
    values = {
        "front_matter": _front_matter(_card_front(name, case, circuit, figures)),
        "name": name,
        "title": case.get("name") or name,
        "description": case.get("description", ""),
        "construction": ("a high-level causal model written by hand (package `planted`)" if planted
                         else "a RASP program compiled with Tracr"),
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
        "realism": _realism_text(validation, training, case.get("id", "N")),
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


def _card_front(name: str, case: dict[str, Any], circuit: dict[str, Any], figures: dict[str, Any]) -> dict[str, Any]:
    """The model card's YAML front matter: license, library, tags, zoo fields and the model-index."""
    nodes, edges = circuit.get("nodes", []), circuit.get("edges", [])
    task_kind = case.get("task_kind", "classification")
    planted = case.get("family") == "planted"
    front: dict[str, Any] = {
        "license": LICENSE,
        "library_name": "transformer-lens",
        "tags": [t for t in TAGS if t not in ("tracr", "rasp")] + ["planted-circuit"] if planted else TAGS,
        "zoo": {
            "entry": name,
            "case_id": str(case.get("id", "")),
            "task_kind": task_kind,
            **({"corruption": case["corruption"]} if case.get("corruption", "resample") != "resample" else {}),
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
    return front


def _circuit_tables(circuit: dict[str, Any]) -> tuple[str, str]:
    """The card's node table (node, what it computes) and its correspondence line."""
    nodes = circuit.get("nodes", [])
    labels = circuit.get("labels", {}) or {}
    node_table = "\n".join(["| node | computes |", "| --- | --- |"]
                           + [f"| `{n}` | {cell(labels.get(n, ''))} |" for n in nodes])
    corr = circuit.get("correspondence")
    correspondence = ""
    if corr:
        correspondence = "\nCorrespondence (high-level node -> low-level nodes): " + ", ".join(
            f"`{k}` -> {', '.join(f'`{x}`' for x in v)}" for k, v in corr.items()) + "\n"
    return node_table, correspondence
