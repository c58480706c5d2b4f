"""validation.json's `tasks` (a multi-task view, planted.multi_task) -> the model card's lines: the
bundle the weights were trained in, every task's circuit and whether its ground truth holds, and the
looks that never intervene measured on every task's inputs."""

from __future__ import annotations

from typing import Any

from zoo.card_looks import battery_text
from zoo.hub_metadata import cell


def tasks_text(validation: dict[str, Any] | None) -> list[str]:
    """Markdown lines (empty for a single-task entry)."""
    tasks = (validation or {}).get("tasks")
    if not isinstance(tasks, dict) or not isinstance(tasks.get("views"), dict):
        return []
    lines = ["", f"**Multi-task model.** These weights were trained on the rows of every task of the bundle "
             f"`{cell(tasks.get('bundle'))}` at once (one vocabulary, one unembedding; each task answers with its own "
             "classes). The components outside this entry's circuit are the other tasks' circuits: on this task's "
             "inputs they still compute their own nodes, and strictness per task keeps them from moving this "
             "task's output. Each task is an entry of its own with the same weights:", "",
             "| task (entry) | circuit | met | accuracy | IIA min | SIIA min | out-of-circuit resample | bound exact | "
             "edges exact | edges exact per length |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, row in tasks["views"].items():
        if not isinstance(row, dict):
            continue
        effect = (row.get("max_out_of_circuit_effect") or {}).get("resample")
        lines.append(f"| `{cell(name)}` | {cell(', '.join(row.get('circuit') or []))} | {cell(row.get('met_criterion'))} | "
                     f"{cell(row.get('accuracy'))} | {cell(row.get('iia_min'))} | {cell(row.get('siia_min'))} | "
                     f"{cell(effect)} | {cell(row.get('effect_bounds_exact'))} | {cell(row.get('edges_exact'))} | "
                     f"{cell(row.get('edge_bounds_exact'))} |")
    mixed = ((validation or {}).get("realism") or {}).get("battery_all_tasks")
    if isinstance(mixed, dict):
        lines += ["", "The looks again, this entry's circuit against the rest, on every task's inputs (a look at the "
                  "model that does not know which task a user studies):"]
        lines += battery_text(mixed)
    return lines
