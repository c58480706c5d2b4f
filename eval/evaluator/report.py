"""Evaluation results -> a versioned JSON report and a terminal table."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Literal

from eval.scoring.faithfulness import COS_NOTE, CausalBench, MibCurve
from eval.core.metrics import Convergence, Prf, Roc

SCHEMA = "zoo-eval/1"


@dataclasses.dataclass(frozen=True, kw_only=True)
class LevelResult:
    """Ground-truth recovery at one level (nodes or edges)."""

    level: Literal["node", "edge", "qkv_edge"]
    """Which items were scored: components, head-level edges, or q/k/v-level edges."""
    auroc: float
    """Area under `roc` (scorers: threshold sweep; circuit methods: pessimistic staircase)."""
    roc: Roc
    """The ROC curve."""
    auroc_kind: Literal["threshold_sweep", "pessimistic"]
    """How the curve was built."""
    at_threshold: Prf
    """P/R/F1 of the identified set (relative threshold, or the chosen circuit)."""
    at_top_k: Prf | None
    """P/R/F1 of the top-k items, k = |ground truth| (scorers only)."""
    n_positive: int
    """Ground-truth items at this level."""
    n_total: int
    """Items in the universe at this level."""
    chance: float | None = None
    """The chance line (eval.scoring.chance): for scorers the exact expected AUROC of uniformly random
    scores of the method's kind put through the same node->edge and q/k/v promotion rules (not 0.5
    at edge level); for circuit methods the mean pessimistic AUROC of random circuits of its sizes."""
    chance_se: float | None = None
    """Monte-Carlo standard error of `chance` (circuit methods); None when `chance` is exact."""
    chance_rule: str | None = None
    """Which random scorer `chance` is for and how its scores reach this level, in words."""
    excluded: tuple[str, ...] = ()
    """Ground-truth items left out of this level's AUROC, P/R/F1 and chance line (neither a miss nor
    a hit, and not counted in n_positive / n_total): edges no counterfactual of the task moves
    (EvalReport.inert)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class MethodResult:
    """Everything measured for one method on one entry."""

    key: str
    name: str
    kind: Literal["scores", "circuits"]
    """Whether the method scored components/edges or returned circuits."""
    node: LevelResult
    edge: LevelResult
    qkv_edge: LevelResult | None
    """q/k/v-level edges (scorers; None for circuit methods): a head edge of the ground truth stands for
    its q, k and v parts, inert parts left out; head-level scores are copied to their parts."""
    causal_bench: CausalBench
    """CAUSAL-BENCH metrics of the identified node set."""
    mib: MibCurve | None
    """MIB faithfulness curve, CPR and CMD (scorers only: circuits of chosen sizes need scores)."""
    identified: tuple[str, ...]
    """The identified node set S_ℓ."""
    node_scores: Mapping[str, float] | None
    """The main run's node scores (derived from edges for edge-only methods)."""
    circuits: tuple[dict[str, Any], ...] | None
    """Circuit methods: param, nodes and the (fpr, tpr) point of every run."""
    stability_sets: tuple[tuple[str, ...], ...] | None
    """Identified sets of the K seed reruns (None when run once)."""
    seconds: float
    """Wall time of the method's runs (main + stability reruns)."""
    eval_seconds: float
    """Wall time of computing the metrics (ablations included)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Inert:
    """Ground-truth edges that no counterfactual of the task can move: patching one leaves every
    logit at every label position within `atol`, so no counterfactual method can find it on this
    task (eval.methods.edge_patching.logit_movement). Listed, never scored as a miss or a hit."""

    edges: tuple[str, ...]
    """Head-level ground-truth edges all of whose q/k/v parts are inert: left out of edge scoring."""
    qkv_edges: tuple[str, ...]
    """q/k/v-level parts of ground-truth edges that are inert (e.g. a head's query reading a
    writer that only feeds its value); informational, since ground truth is scored per head edge."""
    atol: float
    """Largest |logit change| that still counts as unmoved."""
    rule: str = ("each ground-truth edge's q/k/v parts patched alone to the counterfactual (the report's "
                 "ablation) on the report's clean inputs with resampled counterfactuals, whatever corruption the "
                 "methods get (an edge a corruption leaves unchanged is hidden, not inert); inert = no logit at a "
                 "label position moves by more than atol")
    """How it was decided, in words."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalReport:
    """The report `eval.evaluate` returns and `zoo eval` prints."""

    entry: Mapping[str, Any]
    """Which model was evaluated: entry name, case id, `trained` or `compiled`, path."""
    ground_truth: Mapping[str, Any]
    """The head-level circuit the methods were scored against (circuit.json layout)."""
    graph: Mapping[str, Any]
    """Shape and size of the model's computation graph."""
    settings: Mapping[str, Any]
    """Every setting that changes a number: n, seeds, ablation, behaviour, thresholds, weights."""
    methods: tuple[MethodResult, ...]
    convergence: Convergence | None
    """Cross-method agreement of the identified sets (two or more methods)."""
    versions: Mapping[str, str]
    """Package versions the numbers were computed with."""
    inert: Inert | None = None
    """Ground-truth edges no counterfactual of the task moves (None: not checked)."""

    def to_json(self) -> dict[str, Any]:
        return _clean({"schema": SCHEMA, **dataclasses.asdict(self)})

    def method(self, key: str) -> MethodResult:
        for m in self.methods:
            if m.key == key:
                return m
        raise KeyError(key)


def versions() -> dict[str, str]:
    from eval.core.provenance import package_versions

    return package_versions(("zoo", "torch", "transformer-lens", "numpy", "scipy"))


def _clean(value: Any) -> Any:
    """JSON-native copy: NaN / inf become None (JSON has no NaN), tuples lists, keys strings."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {(k if isinstance(k, str) else "->".join(k) if isinstance(k, tuple) else str(k)): _clean(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else value
        return [_clean(v) for v in items]
    return value


def _fmt(value: float | None) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def table(report: EvalReport) -> str:
    """A fixed-width table: one row per method."""
    header = ("method", "AUROC-n", "chance-n", "AUROC-e", "chance-e", "P", "R", "F1", "F1@k", "F", "C", "M", "S",
              "COS", "comp", "CPR", "CMD", "|S|", "sec")
    rows = [header]
    for m in report.methods:
        cb, prf_ = m.causal_bench, m.node.at_threshold
        rows.append((
            m.key, _fmt(m.node.auroc), _fmt(m.node.chance), _fmt(m.edge.auroc), _fmt(m.edge.chance),
            _fmt(prf_.precision), _fmt(prf_.recall), _fmt(prf_.f1),
            _fmt(m.node.at_top_k.f1 if m.node.at_top_k else None), _fmt(cb.faithfulness), _fmt(cb.completeness),
            _fmt(cb.minimality), _fmt(cb.stability), _fmt(cb.causal_optimality),
            _fmt(cb.composite) + ("†" if cb.cos_vacuous else ""),
            _fmt(m.mib.cpr if m.mib else None), _fmt(m.mib.cmd if m.mib else None), str(len(m.identified)),
            f"{m.seconds + m.eval_seconds:.2f}",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    e = report.entry
    gt = report.ground_truth
    title = (f"{e['name']} ({e['model']} model), ground truth {len(gt['nodes'])} of "
             f"{report.graph['components']} components, {len(gt['edges'])} of {report.graph['edges']} edges; "
             f"ablation {report.settings['ablation']}, n={report.settings['n']}, seed {report.settings['seed']}")
    if (corruption := report.settings.get("corruption") or "resample") != "resample":
        title += f"; counterfactuals {corruption} (not the resampling the model was trained with)"
    out = [title, *lines]
    if report.inert is not None and report.inert.qkv_edges:
        head = f"; head-level, left out of edge scoring: {', '.join(report.inert.edges)}" if report.inert.edges else ""
        out.append(f"inert ground-truth edges (no counterfactual of the task moves them, so no counterfactual method "
                   f"can find them; listed, not scored as a miss or a hit): {', '.join(report.inert.qkv_edges)}{head}")
    c = report.convergence
    if c is not None:
        out.append(f"convergence: mean Jaccard {c.observed:.3f} vs null {c.null_mean:.3f}±{c.null_std:.3f}, "
                   f"z={_fmt(c.z)}, p={c.p:.3f} ((1+k)/(1+B), B={len(c.null)}; the paper's k/B: {c.p_paper:.3f}); "
                   f"consensus {list(c.consensus)}, majority {list(c.majority)}")
    out.append("AUROC-n/e: node/edge AUROC; chance-n/e: expected AUROC of random scores of the same kind under "
               "the same node->edge and q/k/v rules (not 0.5; circuit methods: random circuits of the same sizes, "
               "seeded Monte Carlo, standard error in --json); P R F1 at the identified set; "
               "F C M S COS comp: CAUSAL-BENCH; CPR CMD: MIB on the q/k/v edge graph")
    cos_t = report.settings.get("cos_threshold", 0.85)
    out.append(f"comp: {COS_NOTE.format(t=cos_t)}; † marks a composite where this happened")
    return "\n".join(out)
