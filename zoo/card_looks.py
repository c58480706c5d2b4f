"""validation.json's `realism.battery` (eval.core.looks) -> the model card's table of no-intervention
looks: each look's separation beside the separation random circuits reach on the same graph, which
looks give the circuit away, and what direct logit attribution can and cannot tell."""

from __future__ import annotations

from typing import Any

from zoo.hub_metadata import cell

LOOK_TEXT = {
    "output_norm": "mean output norm", "output_variance": "output variance across inputs",
    "last_norm": "output norm at the last position", "last_variance": "output variance at the last position",
    "output_rank": "effective rank of the output (participation ratio)",
    "raw_output_rank": "effective rank of the raw output", "first_pc_share": "share of the first principal direction",
    "position_spread": "positions the output varies at (participation ratio)",
    "attention_entropy": "attention entropy (heads)", "weight_norm": "weight norm",
    "weight_norm_sum": "sum of per-matrix weight norms", "qk_norm": "‖W_Q W_Kᵀ‖ (heads)", "ov_norm": "‖W_V W_O‖ (heads)",
    "reader_alignment": "alignment with later readers", "unembed_alignment": "alignment with the unembedding",
    "gradient_norm": "gradient of the answer at the output", "gradient_x_activation": "gradient × output",
    "probe": "linear probe of the answer", "layer": "earlier layer first", "is_mlp": "MLPs first",
    "direct_logit_attribution": "direct logit attribution", "logit_variance": "variance of the direct logit contribution",
}


def battery_text(battery: Any) -> list[str]:
    """Markdown lines for the card (empty for an entry that predates the battery)."""
    if not isinstance(battery, dict) or not isinstance(battery.get("looks"), dict):
        return []
    looks = {k: r for k, r in battery["looks"].items() if isinstance(r, dict)}
    lines = ["", "**Looks that never intervene** (eval.core.looks): each ranks the nodes it applies to; separation "
             "as above; *chance 95%* is the separation that random circuits of the same size reach on the same "
             "values (label permutations), so on a small graph a high separation may be chance. Bounds (issue 32): "
             f"{cell(battery.get('bounds', {}).get('look'))} per look, median "
             f"{cell(battery.get('bounds', {}).get('median'))}, {cell(battery.get('bounds', {}).get('apart'))} for the "
             "looks reported apart.", "",
             "| look | what it reads | separation | chance 95% | nodes (circuit) | over the bound |",
             "| --- | --- | --- | --- | --- | --- |"]
    over = set(battery.get("over_bound") or [])
    for key, r in looks.items():
        what = LOOK_TEXT.get(key, key) + (" (reported apart)" if r.get("apart") else "")
        lines.append(f"| {cell(key)} | {cell(what)} | {cell(r.get('separation'))} | {cell(r.get('chance_95'))} | "
                     f"{cell(r.get('nodes'))} ({cell(r.get('circuit_nodes'))}) | {'yes' if key in over else 'no'} |")
    lines += ["", _meaning(battery, looks, over)]
    return lines


def _meaning(battery: dict[str, Any], looks: dict[str, Any], over: set[str]) -> str:
    bounded_over = sorted(k for k in over if not looks.get(k, {}).get("apart"))
    if battery.get("met"):
        text = "**Read it as:** no look above finds the circuit beyond its bound, so a method must intervene to find it."
    elif bounded_over:
        text = (f"**Read it as:** {', '.join(bounded_over)} find(s) the circuit without any intervention on this "
                "entry; do not credit a method for what these looks find as well.")
        if all(_within_chance(looks.get(k, {})) for k in bounded_over):
            text += (" The graph is small enough that random circuits of the same size reach these separations "
                     "too (chance 95%), but that does not make them harder to read off.")
    else:
        text = "**Read it as:** only the looks reported apart find the circuit beyond their bound."
    return text + (" Direct logit attribution reads the circuit off wherever no component outside it writes towards "
                   "the task's logits, which strictness forbids on a single-task entry; it cannot tell a circuit "
                   "node from another task's component that writes to the same logits, and it misses circuit nodes "
                   "that act only through later ones.")


def _within_chance(row: dict[str, Any]) -> bool:
    sep, chance = row.get("separation"), row.get("chance_95")
    return isinstance(sep, (int, float)) and isinstance(chance, (int, float)) and sep <= chance
