"""A leaderboard -> PNG plots (matplotlib, Agg backend): node and edge AUROC per method as box
plots over entries with each method's chance line, and the pairwise A12 matrix (InterpBench
Figure 9a and Table 9)."""

from __future__ import annotations

from pathlib import Path

from eval.leaderboard.table import Leaderboard
from eval.scoring.stats import MIN_ENTRIES, a12_matrix


def _limits(values: list[float]) -> tuple[float, float]:
    """The AUROC axis around what is shown (a margin of a tenth of the range, at least 0.01), kept
    inside [-0.02, 1.02]."""
    if not values:
        return -0.02, 1.02
    low, high = min(values), max(values)
    margin = max(0.1 * (high - low), 0.01)
    return max(-0.02, low - margin), min(1.02, high + margin)


def _legend_handles() -> list:
    from matplotlib.lines import Line2D

    return [Line2D([], [], color="black", label="median (box: quartiles)"),
            Line2D([], [], marker="^", linestyle="", markerfacecolor="white", markeredgecolor="black", label="mean"),
            Line2D([], [], marker="o", linestyle="", color="tab:blue", alpha=0.6, markersize=4, label="one entry"),
            Line2D([], [], marker="_", linestyle="", color="crimson", markersize=14, label="chance line")]


def write_bench_plots(board: Leaderboard, out_dir: str | Path) -> list[Path]:
    """`auroc_box.png` and, with two or more methods, `a12_matrix.png`; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")  # no display; select before pyplot is imported
    import matplotlib.pyplot as plt
    import numpy as np

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    keys = [r.method for r in board.rows]
    ok = [c for c in board.cells if c.status == "ok"]

    fig, axes = plt.subplots(1, 2, figsize=(max(6.0, 0.9 * len(keys) + 3), 4.5), sharey=True)
    shown: list[float] = []
    for ax, level in zip(axes, ("node", "edge")):
        data = [[getattr(c, f"{level}_auroc") for c in ok if c.method == k and getattr(c, f"{level}_auroc") is not None]
                for k in keys]
        ax.boxplot([d if d else [np.nan] for d in data], showmeans=True, medianprops={"color": "black"},
                   meanprops={"marker": "^", "markerfacecolor": "white", "markeredgecolor": "black"})
        for i, d in enumerate(data, start=1):  # every entry, jittered, so small samples stay visible
            ax.scatter(np.full(len(d), i) + np.linspace(-0.12, 0.12, len(d)) if d else [], d, s=10, alpha=0.6,
                       color="tab:blue")
        chance = [getattr(r, f"{level}_chance").mean for r in board.rows]
        ax.scatter([i for i, v in enumerate(chance, start=1) if v is not None], [v for v in chance if v is not None],
                   marker="_", s=400, color="crimson", zorder=3)
        shown += [v for d in data for v in d] + [v for v in chance if v is not None]
        ax.set_xticks(range(1, len(keys) + 1), keys, rotation=45, ha="right", fontsize=8)
        ax.set_title(f"{level} AUROC over {len(board.entries)} entries")
    axes[0].set_ylim(*_limits(shown))  # scaled to the data: .95-1.0 spreads must not look flat
    axes[1].legend(handles=_legend_handles(), fontsize=7, loc="lower right")
    axes[0].set_ylabel("AUROC")
    fig.tight_layout()
    path = out / "auroc_box.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    tested = [r.method for r in board.rows if r.edge_auroc.n]
    if len(tested) >= 2:
        m = np.array([[np.nan if v is None else v for v in row] for row in a12_matrix(tested, board.pairs)])
        fig, ax = plt.subplots(figsize=(0.8 * len(tested) + 2.5, 0.7 * len(tested) + 2))
        im = ax.imshow(m, vmin=0, vmax=1, cmap="coolwarm")
        ax.set_xticks(range(len(tested)), tested, rotation=45, ha="right", fontsize=8)
        ax.set_yticks(range(len(tested)), tested, fontsize=8)
        sig = {(t.a, t.b) for t in board.pairs if t.significant}
        for i, a in enumerate(tested):
            for j, b in enumerate(tested):
                if i != j:
                    star = "*" if (a, b) in sig or (b, a) in sig else ""
                    ax.text(j, i, f"{m[i, j]:.2f}{star}", ha="center", va="center", fontsize=7)
        fig.colorbar(im, ax=ax, label="A12 (row vs column)")
        ax.set_title(f"Vargha-Delaney A12 of edge AUROC (* Holm p < 0.05, n >= {MIN_ENTRIES})", fontsize=9)
        fig.tight_layout()
        path = out / "a12_matrix.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
