"""Weights of several models -> centred weight histograms on shared bins -> KL divergences between
them (InterpBench Table 5 and Figures 2 / 16: natural vs SIIT, IIT and Tracr-compiled models).

The paper gives the idea, not the numbers that fix it ("the weights are centered before computing
the KL divergence between the distributions"); this module pins every choice down:

1. Pooled weights: every matrix of every block of a TransformerLens state dict, W_Q, W_K, W_V,
   W_O (attention) and W_in, W_out (MLP), flattened and concatenated (`MATRICES`). Biases,
   embeddings and the unembedding are left out: Tracr's embeddings and unembedding are one-hot
   projections by construction, not learned, and biases are few and mostly zero.
2. Centring: each model's pooled weights minus their own mean.
3. Bins: `bins` (default 100) equal-width bins on one shared range for all the models compared,
   [min over models of Q1 - k * IQR, max over models of Q3 + k * IQR] (Tukey's far-out fences,
   k = `fence`, default 3; quartiles of each model's centred weights). Weights beyond the range
   are counted in the first or last bin. Fences rather than min / max because Tracr writes a few
   weights of 100 (attention sharpness) among 95-99 % exact zeros: a min-max range would put every
   trained weight into two or three bins. A model whose weights are mostly one value (Tracr) has
   IQR 0 and adds only that value to the range; trained weights set it.
4. Smoothing: a probability floor `floor` (default 1e-6) added to every bin's share before
   renormalising, p_i = (c_i / N + floor) / (1 + bins * floor), so no bin is empty and KL is
   finite. A floor rather than pseudo-counts (Laplace) because the models differ in size by 50x
   (a Tracr model may have 120 weights, its trained counterpart 6000): pseudo-counts would flatten
   the small model's histogram and hide its spikes. Where Q has no weights and P has mass m, KL
   gains about m ln(p / floor), up to m * 13.8 nats: KL against a model without support there is
   large by design, and its size is set by the floor.
5. KL(P || Q) = sum_i p_i ln(p_i / q_i), in nats. It is not symmetric; the table's cell in row r,
   column c (r below c, as in the paper's lower-triangular table) is KL(P_c || P_r): the column's
   histogram is the reference. `matrix[i][j]` holds KL(P_i || P_j) for every ordered pair.

Pure numpy / torch; imports no other package of the project.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

MATRICES = ("W_Q", "W_K", "W_V", "W_O", "W_in", "W_out")
"""The parameter names (last component of a TL state-dict key under `blocks.`) that are pooled."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class HistogramSpec:
    """How weights become histograms (see the module docstring)."""

    bins: int = 100
    """Equal-width bins on the shared range."""
    fence: float = 3.0
    """k of Tukey's fences Q1 - k IQR, Q3 + k IQR that bound the shared range (3: 'far out')."""
    floor: float = 1e-6
    """Probability added to every bin's share before renormalising (0: no smoothing)."""
    centre: bool = True
    """Subtract each model's mean weight first (the paper centres)."""

    def __post_init__(self) -> None:
        if not isinstance(self.bins, int) or self.bins < 1:
            raise ValueError(f"bins must be a positive integer, got {self.bins!r}")
        if not (math.isfinite(self.fence) and self.fence >= 0):
            raise ValueError(f"fence must be a finite number >= 0, got {self.fence}")
        if not (math.isfinite(self.floor) and 0 <= self.floor < 1):
            raise ValueError(f"floor must be a number in [0, 1), got {self.floor}")

    def describe(self) -> str:
        """The definition in one paragraph (written into reports)."""
        return (f"pooled weights: every {', '.join(MATRICES)} matrix of every block (no biases, embeddings "
                f"or unembedding); {'centred (each model minus its own mean); ' if self.centre else ''}"
                f"{self.bins} equal-width bins on one range shared by all models, [min Q1 - {self.fence:g} IQR, "
                f"max Q3 + {self.fence:g} IQR] over the models' quartiles, weights beyond it counted in "
                f"the end bins; shares p_i = (c_i / N + {self.floor:g}) / (1 + bins * {self.floor:g}); KL(P||Q) = sum p ln(p/q) "
                "in nats; table cell (row r, column c) = KL(P_c || P_r)")


def pooled_weights(state_dict: Mapping[str, Any], names: Sequence[str] = MATRICES) -> np.ndarray:
    """float64 [n]: the named block matrices of a TL state dict, flattened in sorted key order."""
    keys = sorted(k for k in state_dict if k.startswith("blocks.") and k.rsplit(".", 1)[-1] in names)
    if not keys:
        raise ValueError(f"the state dict has no block matrices named {', '.join(names)}")
    return np.concatenate([_numpy(state_dict[k]).reshape(-1) for k in keys])


def _numpy(tensor: Any) -> np.ndarray:
    if hasattr(tensor, "detach"):
        tensor = tensor.detach().cpu().double().numpy()
    return np.asarray(tensor, dtype=np.float64)


def centred(weights: np.ndarray) -> np.ndarray:
    return weights - weights.mean()


def shared_edges(samples: Sequence[np.ndarray], bins: int, fence: float) -> np.ndarray:
    """[bins + 1] edges on the union of the samples' Tukey fences (see the module docstring)."""
    lo, hi = math.inf, -math.inf
    for w in samples:
        q1, q3 = np.quantile(w, [0.25, 0.75])
        lo, hi = min(lo, q1 - fence * (q3 - q1)), max(hi, q3 + fence * (q3 - q1))
    if not hi > lo:  # every sample constant at one value: one unit-wide range around it
        lo, hi = lo - 0.5, hi + 0.5
    return np.linspace(lo, hi, bins + 1)


def bin_counts(weights: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """int [bins]: weights per bin; bins are [e_i, e_i+1) except the last, which is closed, and
    values beyond the range count in the first or last bin."""
    index = np.searchsorted(edges, weights, side="right") - 1
    index = np.clip(index, 0, len(edges) - 2)
    return np.bincount(index, minlength=len(edges) - 1)


def masses(counts: np.ndarray, floor: float) -> np.ndarray:
    """Smoothed probability per bin: (c_i / N + floor) / (1 + bins * floor)."""
    counts = np.asarray(counts, dtype=np.float64)
    if counts.sum() <= 0:
        raise ValueError("an empty histogram has no distribution")
    return (counts / counts.sum() + floor) / (1.0 + floor * len(counts))


def kl_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """KL(P || Q) = sum p ln(p / q) in nats (terms with p = 0 are 0; inf if q = 0 where p > 0)."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if p.shape != q.shape:
        raise ValueError(f"histograms of different shapes {p.shape} and {q.shape}")
    support = p > 0
    if np.any(q[support] <= 0):
        return math.inf
    return float(np.sum(p[support] * np.log(p[support] / q[support])))


@dataclasses.dataclass(frozen=True, kw_only=True)
class KLTable:
    """Histograms of several models on shared bins and the KL divergence of every ordered pair."""

    labels: tuple[str, ...]
    """Model kinds in table order (e.g. natural, tracr, siit, iit)."""
    edges: np.ndarray
    """[bins + 1] shared bin edges (of the centred weights)."""
    counts: dict[str, np.ndarray]
    """Raw weights per bin, per model (what the plots show)."""
    masses: dict[str, np.ndarray]
    """Smoothed probabilities per bin, per model (what KL is computed on)."""
    n_weights: dict[str, int]
    """How many weights each model pooled."""
    matrix: np.ndarray
    """[m, m]: matrix[i, j] = KL(P_i || P_j)."""
    spec: HistogramSpec
    """The binning and smoothing used."""

    def kl(self, reference: str, other: str) -> float:
        """KL(P_reference || P_other)."""
        return float(self.matrix[self.labels.index(reference), self.labels.index(other)])

    def lower_triangle(self) -> list[list[float | None]]:
        """The paper's layout: row r, column c <= r holds KL(P_c || P_r); None above the diagonal."""
        m = len(self.labels)
        return [[float(self.matrix[c, r]) if c <= r else None for c in range(m)] for r in range(m)]

    def to_json(self) -> dict[str, Any]:
        return {
            "order": list(self.labels),
            "lower_triangle": self.lower_triangle(),
            "matrix": [[float(v) for v in row] for row in self.matrix],
            "n_weights": dict(self.n_weights),
            "edges": [float(e) for e in self.edges],
            "counts": {k: [int(c) for c in v] for k, v in self.counts.items()},
            "spec": dataclasses.asdict(self.spec),
            "definition": self.spec.describe(),
        }


def kl_table(weights: Mapping[str, np.ndarray], spec: HistogramSpec = HistogramSpec(), *,
             edges: np.ndarray | None = None) -> KLTable:
    """Histograms and pairwise KL of already pooled weights (label -> 1-d array), in the order
    given. `edges` overrides the shared fences (e.g. to test against hand-computed masses)."""
    if not weights:
        raise ValueError("no models to compare")
    labels = tuple(weights)
    samples = {k: np.asarray(v, dtype=np.float64).reshape(-1) for k, v in weights.items()}
    for k, w in samples.items():
        if w.size == 0 or not np.all(np.isfinite(w)):
            raise ValueError(f"model {k!r}: weights must be a non-empty set of finite numbers")
    if spec.centre:
        samples = {k: centred(w) for k, w in samples.items()}
    if edges is None:
        edges = shared_edges(list(samples.values()), spec.bins, spec.fence)
    edges = np.asarray(edges, dtype=np.float64)
    counts = {k: bin_counts(w, edges) for k, w in samples.items()}
    probs = {k: masses(c, spec.floor) for k, c in counts.items()}
    matrix = np.array([[kl_divergence(probs[a], probs[b]) for b in labels] for a in labels])
    return KLTable(labels=labels, edges=edges, counts=counts, masses=probs,
                   n_weights={k: int(w.size) for k, w in samples.items()}, matrix=matrix, spec=spec)


def state_dict_kl_table(state_dicts: Mapping[str, Mapping[str, Any]], spec: HistogramSpec = HistogramSpec()) -> KLTable:
    """kl_table of the pooled block matrices of each TL state dict (label -> state dict)."""
    return kl_table({k: pooled_weights(sd) for k, sd in state_dicts.items()}, spec)
