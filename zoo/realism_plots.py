"""A realism report (zoo.realism_report) -> PNG plots (matplotlib, Agg backend): the weight histograms of
the model kinds on their shared bins (InterpBench Figure 16), and per-node output norm and
variance of the SIIT entry and of the Tracr model with the circuit nodes marked."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

COLOURS = {"natural": "tab:green", "tracr": "tab:red", "siit": "tab:blue", "iit": "tab:orange"}
TITLES = {"natural": "natural (behaviour only)", "tracr": "Tracr-compiled", "siit": "SIIT (the entry)", "iit": "IIT"}


def write_plots_atomically(report: dict[str, Any], target: Path) -> list[Path]:
    """Plots go to a temporary folder inside `target` first and are moved in when all are drawn,
    so a failure leaves no half-written plot set; returns the final paths."""
    target.mkdir(parents=True, exist_ok=True)
    out = []
    with tempfile.TemporaryDirectory(dir=target, prefix=".plots-") as tmp:
        for path in write_plots(report, Path(tmp)):
            final = target / path.name
            path.replace(final)  # same folder tree, so an atomic rename
            out.append(final)
    return out


def write_plots(report: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")  # no display; select before pyplot is imported
    import matplotlib.pyplot as plt

    written: list[Path] = []
    entry = f"{report['family']} {report['case']}"

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        written.append(out_dir / name)

    kl = report.get("weight_kl")
    if kl:
        save(_histograms(plt, kl, entry), "weight_histograms.png")
    for kind in ("siit", "tracr"):
        activity = report["activity"].get(kind)
        if activity:
            save(_node_activity(plt, activity, f"{entry}, {TITLES[kind]}"), f"node_activity_{kind}.png")
    return written


def _histograms(plt: Any, kl: dict[str, Any], entry: str) -> Any:
    import numpy as np

    order = kl["order"]
    edges = np.asarray(kl["edges"])
    cols = 2 if len(order) > 1 else 1
    rows = (len(order) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 3.2 * rows), sharex=True, sharey=True, squeeze=False)
    for ax, kind in zip(axes.flat, order):
        counts = np.asarray(kl["counts"][kind], dtype=float)
        share = counts / max(counts.sum(), 1.0)
        ax.stairs(share, edges, fill=True, color=COLOURS.get(kind, "grey"), alpha=0.8)
        ax.set_yscale("log")
        ref = order[0]
        note = f"KL({ref} || {kind}) = {_kl(kl, ref, kind):.2f}" if kind != ref else f"{kl['n_weights'][kind]} weights"
        ax.set_title(f"{TITLES.get(kind, kind)}: {note}", fontsize=9)
        ax.set_xlabel("centred weight (outer bins hold the tails)", fontsize=8)
        ax.set_ylabel("share of weights", fontsize=8)
    for ax in list(axes.flat)[len(order):]:
        ax.set_visible(False)
    fig.suptitle(f"{entry}: weight histograms on shared bins", fontsize=10)
    return fig


def _kl(kl: dict[str, Any], a: str, b: str) -> float:
    order = kl["order"]
    return kl["matrix"][order.index(a)][order.index(b)]


def _node_activity(plt: Any, activity: dict[str, Any], title: str) -> Any:
    nodes = activity["nodes"]
    names = [n["node"] for n in nodes]
    inside = [n["in_circuit"] for n in nodes]
    fig, axes = plt.subplots(1, 2, figsize=(max(8.0, 1.1 * len(nodes) + 2), 3.6))
    for ax, field, label in ((axes[0], "output_norm", "mean output norm"),
                             (axes[1], "output_variance", "output variance across inputs")):
        values = [n[field] for n in nodes]
        bars = ax.bar(range(len(nodes)), values, color=["tab:red" if i else "tab:grey" for i in inside])
        for bar, member in zip(bars, inside):
            if member:
                bar.set_hatch("//")
                bar.set_edgecolor("black")
        ax.set_xticks(range(len(nodes)), names, rotation=45, ha="right", fontsize=8)
        sep = activity["heuristics"][field]["separation"]
        ax.set_title(f"{label} (separation {sep:.2f})" if sep is not None else label, fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color="tab:red", hatch="//", ec="black"),
               plt.Rectangle((0, 0), 1, 1, color="tab:grey")]
    axes[1].legend(handles, ["in the circuit", "out of the circuit"], fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig
