"""An EvalReport -> PNG plots (matplotlib, Agg backend): ROC curves, CAUSAL-BENCH radar,
permutation null with the observed value, Jaccard heatmap, MIB faithfulness curves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eval.evaluator.report import EvalReport

RADAR_AXES = ("faithfulness", "completeness", "minimality", "stability", "causal_optimality")


def write_plots(report: EvalReport, out_dir: str | Path) -> list[Path]:
    """Write every plot the report supports into out_dir; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")  # no display; select before pyplot is imported
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    name = report.entry["name"]

    def save(fig, filename: str) -> None:
        path = out / filename
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    for plot in (_roc_plots, _radar_plot, _mib_plot, _convergence_plots):
        plot(report, name, plt, save)
    return written


def _roc_plots(report: EvalReport, name: str, plt: Any, save: Any) -> None:
    for level in ("node", "edge"):
        fig, ax = plt.subplots(figsize=(5, 5))
        for m in report.methods:
            r = getattr(m, level)
            style = "--" if r.auroc_kind == "pessimistic" else "-"
            ax.plot(r.roc.fpr, r.roc.tpr, style, drawstyle="default", label=f"{m.key} ({r.auroc:.2f})")
        ax.plot([0, 1], [0, 1], ":", color="grey")
        ax.set(xlabel="false-positive rate", ylabel="true-positive rate", title=f"{name}: {level} ROC",
               xlim=(-0.02, 1.02), ylim=(-0.02, 1.02))
        ax.legend(fontsize=8, loc="lower right")
        save(fig, f"roc_{level}.png")


def _radar_plot(report: EvalReport, name: str, plt: Any, save: Any) -> None:
    import numpy as np

    angles = np.linspace(0, 2 * np.pi, len(RADAR_AXES), endpoint=False).tolist()
    fig, ax = plt.subplots(figsize=(5.5, 5.5), subplot_kw={"polar": True})
    for m in report.methods:
        cb = m.causal_bench
        vals = [getattr(cb, a) if getattr(cb, a) is not None else 0.0 for a in RADAR_AXES]
        vals = [min(max(v, 0.0), 1.0) for v in vals]
        ax.plot(angles + angles[:1], vals + vals[:1], label=f"{m.key} ({cb.composite:.2f})")
        ax.fill(angles + angles[:1], vals + vals[:1], alpha=0.08)
    ax.set_xticks(angles, [a.replace("_", "\n") for a in RADAR_AXES], fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_title(f"{name}: CAUSAL-BENCH")
    ax.legend(fontsize=7, loc="upper right", bbox_to_anchor=(1.35, 1.1))
    save(fig, "causal_bench_radar.png")


def _mib_plot(report: EvalReport, name: str, plt: Any, save: Any) -> None:
    scorers = [m for m in report.methods if m.mib is not None]
    if scorers:
        fig, ax = plt.subplots(figsize=(6, 4))
        for m in scorers:
            ax.plot(m.mib.sizes, m.mib.f_signed, marker="o", label=f"{m.key} CPR {m.mib.cpr:.2f}")
        ax.axhline(1.0, color="grey", linestyle=":")
        ax.set(xscale="log", xlabel="circuit size (share of edges)", ylabel="faithfulness f",
               title=f"{name}: MIB faithfulness (signed ranking)")
        ax.legend(fontsize=8)
        save(fig, "mib_faithfulness.png")


def _convergence_plots(report: EvalReport, name: str, plt: Any, save: Any) -> None:
    import numpy as np

    c = report.convergence
    if c is not None:
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.hist(c.null, bins=30, color="lightgrey", edgecolor="grey", label=f"null (B={len(c.null)})")
        ax.axvline(c.observed, color="crimson", label=f"observed {c.observed:.3f} (z={c.z:.2f}, p={c.p:.3f})")
        ax.set(xlabel="mean pairwise Jaccard", ylabel="count", title=f"{name}: cross-method convergence")
        ax.legend(fontsize=8)
        save(fig, "convergence_null.png")

        fig, ax = plt.subplots(figsize=(1.2 * len(c.labels) + 2, 1.0 * len(c.labels) + 1.5))
        im = ax.imshow(np.asarray(c.matrix), vmin=0, vmax=1, cmap="viridis")
        ax.set_xticks(range(len(c.labels)), c.labels, rotation=45, ha="right", fontsize=8)
        ax.set_yticks(range(len(c.labels)), c.labels, fontsize=8)
        for i, row in enumerate(c.matrix):
            for j, v in enumerate(row):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="white" if v < 0.5 else "black", fontsize=8)
        fig.colorbar(im, ax=ax)
        ax.set_title(f"{name}: Jaccard between methods")
        save(fig, "jaccard_heatmap.png")
