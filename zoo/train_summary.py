"""Many-case training results -> the rows of its summary and the table `zoo train --all` prints."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def summary_row(case_id: str, status: str, *, met: bool | None = None, steps: int | None = None, wall: float | None = None,
         accuracy=None, iia=None, siia=None, siia_all=None, effect=None, error: str | None = None) -> dict[str, Any]:
    r = lambda v: None if v is None else round(float(v), 4)  # noqa: E731
    return {"case": case_id, "status": status, "met_criterion": met, "steps": steps,
            "wall_s": None if wall is None else round(wall, 2), "accuracy": r(accuracy), "iia_min": r(iia),
            "siia_min": r(siia), "siia_all": r(siia_all), "max_out_of_circuit_effect": r(effect), "entry": None, "error": error}


def skipped_row(case_id: str, entry_dir: Path) -> dict[str, Any]:
    from zoo.artifact import read_entry

    entry = read_entry(entry_dir)
    training, validation = entry.json("training.json") or {}, entry.json("validation.json") or {}
    m = training.get("final_metrics", {})
    return {**summary_row(case_id, "skipped", met=True, steps=training.get("steps"), wall=training.get("wall_time_s"),
                accuracy=m.get("accuracy"), iia=m.get("iia_min"), siia=m.get("siia_min"),
                siia_all=m.get("siia_all"),
                effect=(validation.get("max_out_of_circuit_effect") or {}).get("resample")), "entry": str(entry_dir)}


def format_table(rows: list[dict[str, Any]]) -> str:
    def f(v, spec="") -> str:
        return "-" if v is None else format(v, spec)

    lines = [f"{'case':>12}  {'status':8} {'met':5} {'steps':>6} {'wall s':>7} {'acc':>6} {'IIA':>6} {'SIIA':>6} "
             f"{'out-eff':>7}"]
    for r in rows:
        met = "-" if r["met_criterion"] is None else ("yes" if r["met_criterion"] else "no")
        lines.append(f"{r['case']:>12}  {r['status']:8} {met:5} {f(r['steps']):>6} {f(r['wall_s'], '.1f'):>7} "
                     f"{f(r['accuracy'], '.4f'):>6} {f(r['iia_min'], '.4f'):>6} {f(r['siia_min'], '.4f'):>6} "
                     f"{f(r['max_out_of_circuit_effect'], '.4f'):>7}"
                     + (f"  {r['error']}" if r.get("error") else ""))
    return "\n".join(lines)


def saturation_line(row: dict[str, Any]) -> str:
    """One saturated head of validation.json's `saturation` (siit.saturation) in words, for the CLI and the card."""
    return (f"saturated head {row['head']}: {row['saturated']:.1%} of queries at score margin {row['margin']:g} "
            f"(min {row['min_gap']:.2f}, median {row['median_gap']:.2f}); largest attention mass off its keys "
            f"{row['max_mass_outside']:.4f}")
