"""An entry (or case) + methods -> an `EvalReport`: the evaluator's one orchestrating function.

Reads top to bottom: resolve the model and its ground truth, sample task data with reference
labels, run each method (main seed + K-1 reruns for stability), score against the ground truth at
node and edge level, measure faithfulness on the model, then compare methods.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import torch

from eval.core.device import device_of, device_record
from eval.patching.ablation import AblationKind, make_context
from eval.methods.registry import REGISTRY
from eval.core.circuit import Circuit, edge_name, parse_edge
from eval.scoring.chance import chance_line, circuit_chance, output_kind
from eval.scoring.faithfulness import BehaviourKind, MIB_SIZES, causal_bench, mib_curve, node_behaviour, qkv_scores
from eval.core.graph import ComputationGraph, circuit_edges, edges_to_node_scores, graph_of, nodes_to_edge_scores, promote_scores
from eval.methods.interface import Method, MethodError, MethodOutput, Progress, call_method, get_method, read_score_file
from eval.methods.options import options_of
from eval.evaluator.score_files import save_output
from eval.core.metrics import convergence, mean_pairwise_jaccard, pessimistic_auroc, prf, roc, roc_point, top_k
from eval.methods.edge_patching import inert_edges
from eval.evaluator.report import EvalReport, Inert, LevelResult, MethodResult, versions
from eval.core.corruption import check_corruption, parse_corruption
from eval.patching.task import TaskData, make_task

RunProgress = Callable[[str, int, int], Progress | None]
"""progress(method key, run, runs) as each method run (main, then the stability reruns) begins ->
None or a callback for that run's own steps (eval.methods.interface.Progress); `zoo eval` draws a bar."""

@dataclasses.dataclass(frozen=True, kw_only=True)
class Target:
    """The model under evaluation, its ground truth and where its labels come from."""

    name: str
    """Entry name, e.g. `case-3`."""
    which: Literal["trained", "compiled"]
    model: Any
    """HookedTransformer under evaluation."""
    truth: Circuit
    """Ground truth at head granularity."""
    case: Any
    """rasp_programs Case (sampler and task kind)."""
    encoding: Any
    reference: Any
    """Model whose outputs are the labels: the compiled model of the case."""
    path: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """Every knob of an evaluation (all recorded in the report)."""

    n: int = 200
    """Clean inputs (and as many counterfactuals) per run."""
    seed: int = 0
    """Seed of the main run; stability reruns use seed + 1 ... seed + K - 1."""
    ablation: AblationKind = "resample"
    """How ablated nodes / edges are replaced: resample (counterfactual), mean or zero."""
    behaviour: BehaviourKind = "normalized"
    """CAUSAL-BENCH β: normalized logit difference (default) or accuracy."""
    stability_seeds: int = 10
    """K runs (main included) for stability; 1 turns stability off."""
    permutations: int = 1000
    """B, the permutation null's size for cross-method convergence."""
    relative_threshold: float = 0.05
    """A scorer identifies the components with |score| >= this x max |score| (and > 0)."""
    cos_threshold: float = 0.85
    """Faithfulness floor of CAUSAL-BENCH's causal optimality reduction."""
    weights: Mapping[str, float] | None = None
    """Composite weights (default equal over F, C, M, S, COS)."""
    mib_sizes: tuple[float, ...] = MIB_SIZES
    """Circuit sizes (proportions of edges) of the MIB curve."""
    chance_draws: int = 200
    """Monte-Carlo draws of the circuit methods' chance line (scorers' chance lines are exact)."""
    inert_atol: float = 1e-6
    """Largest |logit change| at which a patched ground-truth edge counts as inert (EvalReport.inert)."""
    corruption: str | None = None
    """How the methods' counterfactuals are made (eval.core.corruption: `resample` or `token:K`);
    None: the case's own (`Case.corruption`, `resample` but for a distribution-shift entry)."""


def evaluate(target: Target, methods: str | Method | Sequence[str | Method] = (), *,
             scores: str | Path | Sequence[str | Path] = (), settings: Settings | None = None,
             save_scores: str | Path | None = None, progress: RunProgress | None = None,
             **overrides: Any) -> EvalReport:
    """Evaluate methods (registry keys, `package.module:function`, Method records) and / or MIB
    score files on a Target; keyword overrides set Settings fields. `zoo.evaluate` builds the
    Target from an entry, a compiled case or a case id. With `save_scores`, each method's main run
    is written there as MIB files (eval.evaluator.score_files). `progress` hears of every method run as it
    begins (RunProgress)."""
    s = dataclasses.replace(settings or Settings(), **overrides)
    if s.chance_draws < 2:
        raise ValueError(f"chance_draws must be at least 2 (a standard error needs two draws), got {s.chance_draws}")
    method_list = [methods] if isinstance(methods, (str, Method)) else list(methods)
    score_files = [scores] if isinstance(scores, (str, Path)) else list(scores)
    if not method_list and not score_files:
        raise MethodError(f"name at least one method ({', '.join(REGISTRY)}) or a score file")
    resolved = [get_method(m, REGISTRY) for m in method_list]
    t = target
    graph = graph_of(t.model)
    for node in t.truth.nodes:
        graph.check_node(node)
    files = [(Path(f), read_score_file(Path(f), graph)) for f in score_files]  # fail before any work
    s = dataclasses.replace(s, corruption=check_corruption(t.case, corruption_of(s, t.case)).spec)

    task = make_task(case=t.case, encoding=t.encoding, reference=t.reference, n=s.n, seed=s.seed,
                     corruption=s.corruption).to(device_of(t.model))
    ctx = make_context(t.model, task, graph, s.ablation)
    nb = node_behaviour(ctx, s.behaviour)
    inert = inert_truth(_truth_context(ctx, t, s, graph), graph, t.truth, s.inert_atol)
    results = []
    for method in resolved:
        start = time.perf_counter()
        out, reruns = _run_method(method, t, task, graph, s, save_scores, progress)
        results.append(_score(method.key, method.name, out, reruns, time.perf_counter() - start, t, graph, ctx, nb,
                              s, inert))
    for path, out in files:
        results.append(_score(f"file:{path.name}", path.name, out, [], 0.0, t, graph, ctx, nb, s, inert))

    conv = None
    if len(results) >= 2:
        conv = convergence({r.key: r.identified for r in results}, graph.components,
                           permutations=s.permutations, seed=s.seed)
    truth = t.truth
    return EvalReport(
        entry={"name": t.name, "case": t.case.id, "model": t.which, "path": t.path, "task_kind": t.case.task_kind},
        ground_truth=truth.to_json(), graph={**graph.to_json(), "edges": len(graph.edges),
                                             "edges_qkv": len(graph.at("qkv").edges)},
        settings=_report_settings(s, resolved, t.model),
        methods=tuple(results), convergence=conv, versions=versions(), inert=inert,
    )


def _run_method(method: Method, t: Target, task: Any, graph: ComputationGraph, s: Settings,
                save_scores: str | Path | None, progress: RunProgress | None) -> tuple[MethodOutput, list[MethodOutput]]:
    """One method's main run (saved as MIB files with save_scores) and its stability reruns."""
    runs = s.stability_seeds if method.seeded and s.stability_seeds > 1 else 1
    out = call_method(method, t.model, task, graph=graph, seed=s.seed, ablation=s.ablation,
                      progress=progress(method.key, 0, runs) if progress else None)
    if save_scores is not None:
        save_output(out, graph, Path(save_scores), method.key,
                    cfg={"case": t.case.id, "model": t.which, "seed": s.seed, "n": s.n, "ablation": s.ablation})
    reruns = []
    if method.seeded and s.stability_seeds > 1:
        for k in range(1, s.stability_seeds):
            task_k = make_task(case=t.case, encoding=t.encoding, reference=t.reference, n=s.n,
                               seed=s.seed + k, corruption=s.corruption).to(device_of(t.model))
            reruns.append(call_method(method, t.model, task_k, graph=graph, seed=s.seed + k, ablation=s.ablation,
                                      progress=progress(method.key, k, runs) if progress else None))
    return out, reruns


def _report_settings(s: Settings, resolved: list[Method], model: Any) -> dict[str, Any]:
    """The report's settings: every Settings field and what the numbers depend on."""
    return {**dataclasses.asdict(s), "weights": dict(s.weights) if s.weights else None,
            "stability_run_seeds": [s.seed + k for k in range(max(1, s.stability_seeds))],
            "torch_threads": torch.get_num_threads(),  # float results and times depend on it
            "device": device_record(device_of(model)).to_json(),  # and so do they on the device
            "method_options": {m.key: dataclasses.asdict(o) for m in resolved
                               if (o := options_of(m)) is not None},
            "counterfactuals": parse_corruption(s.corruption).describe(),  # resolved by evaluate
            "labels": "reference (compiled) model outputs",
            "node_universe": "every head and MLP of the model, zero-weight ones included as negatives",
            "edge_universe": "every head-level edge of the model's graph but inert ground-truth edges "
                             "(inert.edges)",
            "roc_scores": "absolute values",
            "chance": "eval.scoring.chance: exact expected AUROC of random scores of the method's kind (node, "
                      "head-edge or q/k/v-edge) under the report's promotion rules; circuit methods: "
                      "random circuits of the same sizes, seeded Monte Carlo with standard error",
            "mib_circuits": "top floor(k|E|) q/k/v edges (signed for CPR, |score| for CMD), pruned as "
                            "EAP-IG's Graph.prune; head-level scores copied to their q/k/v edges"}


def corruption_of(s: Settings, case: Any) -> str:
    """The corruption a run uses: the settings' own, else the case's (`Case.corruption`), else resample."""
    return s.corruption or getattr(case, "corruption", "resample")


def _truth_context(ctx: Any, t: Target, s: Settings, graph: ComputationGraph) -> Any:
    """The context inert ground-truth edges are measured in: the methods' own where they get resampled
    counterfactuals; else one on the same clean inputs with resampled ones, since an edge the corruption
    leaves unchanged is not inert (it is what a distribution-shift entry hides from the methods)."""
    if s.corruption == "resample":
        return ctx
    task = make_task(case=t.case, encoding=t.encoding, reference=t.reference, n=s.n, seed=s.seed)
    return make_context(t.model, task.to(device_of(t.model)), graph, s.ablation)


def inert_truth(ctx: Any, graph: ComputationGraph, truth: Circuit, atol: float) -> Inert:
    """The ground-truth edges that patching to the counterfactual does not move: their q/k/v
    parts, and the head edges whose every part is inert (eval.methods.edge_patching.inert_edges)."""
    heads = [tuple(e) for e in truth.edges]
    parts = sorted({p for e in heads for p in graph.expand_to_qkv(e)})
    dead = set(inert_edges(ctx, parts, atol=atol))
    head = sorted(e for e in heads if all(p in dead for p in graph.expand_to_qkv(e)))
    return Inert(edges=tuple(edge_name(*e) for e in head), qkv_edges=tuple(edge_name(*p) for p in sorted(dead)),
                 atol=atol)


def identified_set(out: MethodOutput, graph: ComputationGraph, relative: float) -> set[str]:
    """S_ℓ: a scorer's components with |score| >= relative x max|score| (> 0); a circuit
    method's first circuit."""
    if out.circuits is not None:
        return set(out.circuits[0].nodes)
    scores = _node_scores(out, graph)
    top = max((abs(v) for v in scores.values()), default=0.0)
    return {c for c, v in scores.items() if abs(v) > 0 and abs(v) >= relative * top}


def _node_scores(out: MethodOutput, graph: ComputationGraph) -> dict[str, float]:
    if out.node_scores is not None:
        return {c: float(out.node_scores.get(c, 0.0)) for c in graph.components}
    assert out.edge_scores is not None
    return edges_to_node_scores(graph, out.edge_scores)


def _edge_scores(out: MethodOutput, graph: ComputationGraph) -> dict[tuple[str, str], float]:
    if out.edge_scores is not None:
        promoted = promote_scores(out.edge_scores)
        return {e: promoted.get(e, 0.0) for e in graph.edges}
    return nodes_to_edge_scores(graph, _node_scores(out, graph))


@dataclasses.dataclass(frozen=True)
class _Truth:
    """The ground truth a method is scored against, inert edges left out of both classes."""

    nodes: set[str]
    edges: set[tuple[str, str]]
    edge_names: set[str]
    skip: set[str]
    """Inert ground-truth edges: neither positives nor negatives, no counterfactual can find them."""
    skip_pairs: set[tuple[str, str]]
    edge_universe: list[str]
    qkv_names: set[str]
    """q/k/v-level ground truth: every part of a ground-truth head edge (an edge into a head stands for
    its q, k and v edges) that some counterfactual moves."""
    qkv_skip: set[str]
    """Inert q/k/v parts of ground-truth edges (Inert.qkv_edges): neither positives nor negatives."""


def _truth(t: Target, graph: ComputationGraph, inert: Inert) -> _Truth:
    skip = set(inert.edges)
    skip_pairs = {(a, b) for a, b in graph.edges if f"{a}->{b}" in skip}
    truth_edges = {(a, b) for a, b in t.truth.edges} - skip_pairs
    qkv_skip = set(inert.qkv_edges)
    qkv_names = {edge_name(*p) for e in t.truth.edges for p in graph.expand_to_qkv(tuple(e))} - qkv_skip
    return _Truth(nodes=set(t.truth.nodes), edges=truth_edges, edge_names={f"{a}->{b}" for a, b in truth_edges},
                  skip=skip, skip_pairs=skip_pairs,
                  edge_universe=[f"{a}->{b}" for a, b in graph.edges if f"{a}->{b}" not in skip],
                  qkv_names=qkv_names, qkv_skip=qkv_skip)


def _score(key: str, name: str, out: MethodOutput, reruns: list[MethodOutput], seconds: float, t: Target,
           graph: ComputationGraph, ctx: Any, nb: Any, s: Settings, inert: Inert) -> MethodResult:
    start = time.perf_counter()
    tr = _truth(t, graph, inert)
    identified = identified_set(out, graph, s.relative_threshold)
    circuits = None
    mib = None
    qkv_level = None  # circuit methods: their circuits are head-level
    if out.circuits is None:
        node_level, edge_level, qkv_level, mib, node_scores = _score_scorer(out, graph, ctx, s, tr, identified)
    else:
        node_scores = None
        node_level, edge_level, circuits = _score_circuits(out, graph, s, tr, identified)
    sets = [identified] + [identified_set(r, graph, s.relative_threshold) for r in reruns]
    stability = mean_pairwise_jaccard(sets) if len(sets) > 1 else None
    cb = causal_bench(nb, identified, stability=stability, weights=s.weights, cos_threshold=s.cos_threshold)
    return MethodResult(
        key=key, name=name, kind=out.kind, node=node_level, edge=edge_level, qkv_edge=qkv_level, causal_bench=cb,
        mib=mib,
        identified=tuple(c for c in graph.components if c in identified), node_scores=node_scores,
        circuits=tuple(circuits) if circuits is not None else None,
        stability_sets=tuple(tuple(sorted(x)) for x in sets) if len(sets) > 1 else None,
        seconds=seconds, eval_seconds=time.perf_counter() - start,
    )


def _score_scorer(out: MethodOutput, graph: ComputationGraph, ctx: Any, s: Settings, tr: _Truth,
                  identified: set[str]) -> tuple[LevelResult, LevelResult, LevelResult, Any, dict[str, float]]:
    """A scorer's node, edge and q/k/v-edge results (threshold sweeps), its MIB curve and its node scores."""
    truth_nodes, truth_edges, truth_edge_names = tr.nodes, tr.edges, tr.edge_names
    skip, skip_pairs, edge_universe = tr.skip, tr.skip_pairs, tr.edge_universe
    node_scores = _node_scores(out, graph)
    edge_scores = _edge_scores(out, graph)
    named_edges = {f"{a}->{b}": abs(v) for (a, b), v in edge_scores.items() if f"{a}->{b}" not in skip}
    node_roc = roc({c: abs(v) for c, v in node_scores.items()}, truth_nodes)
    edge_roc = roc(named_edges, truth_edge_names)
    chance = chance_line(graph, truth_nodes, truth_edges, output_kind(out.node_scores, out.edge_scores),
                         exclude=skip_pairs, exclude_qkv={parse_edge(e) for e in tr.qkv_skip})
    rel_edges = s.relative_threshold * max(named_edges.values(), default=0.0)
    edge_ident = {e for e, v in named_edges.items() if v > 0 and v >= rel_edges}
    node_level = LevelResult(level="node", auroc=node_roc.auroc, roc=node_roc, auroc_kind="threshold_sweep",
                             at_threshold=prf(identified, truth_nodes),
                             at_top_k=prf(top_k({c: abs(v) for c, v in node_scores.items()}, len(truth_nodes)), truth_nodes),
                             n_positive=len(truth_nodes), n_total=len(graph.components),
                             chance=chance.node_auroc, chance_rule=chance.rule)
    edge_level = LevelResult(level="edge", auroc=edge_roc.auroc, roc=edge_roc, auroc_kind="threshold_sweep",
                             at_threshold=prf(edge_ident, truth_edge_names),
                             at_top_k=prf(top_k(named_edges, len(truth_edges)), truth_edge_names),
                             n_positive=len(truth_edges), n_total=len(edge_universe),
                             chance=chance.edge_auroc, chance_rule=chance.rule, excluded=tuple(sorted(skip)))
    # MIB ranks q/k/v edges: the method's own edge scores, unpromoted (head-level ones are copied)
    own = out.edge_scores if out.edge_scores is not None else edge_scores
    mib = mib_curve(ctx, own, s.mib_sizes)
    qkv_level = _qkv_level(own, graph, tr, chance, s.relative_threshold)
    return node_level, edge_level, qkv_level, mib, node_scores


def _qkv_level(edge_scores: Any, graph: ComputationGraph, tr: _Truth, chance: Any, relative: float) -> LevelResult:
    """A scorer's q/k/v-level edge ROC: its q/k/v scores as given, head-level ones copied to their three
    parts (eval.scoring.faithfulness.qkv_scores), inert ground-truth parts left out."""
    named = {edge_name(*e): abs(v) for e, v in qkv_scores(graph, edge_scores).items()
             if edge_name(*e) not in tr.qkv_skip}
    qkv_roc = roc(named, tr.qkv_names)
    rel = relative * max(named.values(), default=0.0)
    return LevelResult(level="qkv_edge", auroc=qkv_roc.auroc, roc=qkv_roc, auroc_kind="threshold_sweep",
                       at_threshold=prf({e for e, v in named.items() if v > 0 and v >= rel}, tr.qkv_names),
                       at_top_k=prf(top_k(named, len(tr.qkv_names)), tr.qkv_names),
                       n_positive=len(tr.qkv_names), n_total=len(named), chance=chance.qkv_edge_auroc,
                       chance_rule=chance.rule, excluded=tuple(sorted(tr.qkv_skip)))


def _score_circuits(out: MethodOutput, graph: ComputationGraph, s: Settings, tr: _Truth,
                    identified: set[str]) -> tuple[LevelResult, LevelResult, list[dict[str, Any]]]:
    """A circuit method's node and edge results (pessimistic AUROC over its circuits) and its circuits."""
    truth_nodes, truth_edges, truth_edge_names = tr.nodes, tr.edges, tr.edge_names
    skip, skip_pairs, edge_universe = tr.skip, tr.skip_pairs, tr.edge_universe
    node_pts, edge_pts, circuits = [], [], []
    for run in out.circuits:
        run_pairs = run.edges if run.edges is not None else circuit_edges(graph, run.nodes)
        run_edges = {f"{a}->{b}" for a, b in run_pairs} - skip
        node_pts.append(roc_point(run.nodes, truth_nodes, graph.components))
        edge_pts.append(roc_point(run_edges, truth_edge_names, edge_universe))
        circuits.append({"param": run.param, "nodes": sorted(run.nodes), "node_point": node_pts[-1],
                         "edge_point": edge_pts[-1]})
    first_edges = {f"{a}->{b}" for a, b in (out.circuits[0].edges if out.circuits[0].edges is not None
                                             else circuit_edges(graph, out.circuits[0].nodes))} - skip
    n_roc, e_roc = pessimistic_auroc(node_pts), pessimistic_auroc(edge_pts)
    cc = circuit_chance(graph, truth_nodes, truth_edges,
                        [(len(r.nodes), len(r.edges) if r.edges is not None else None) for r in out.circuits],
                        draws=s.chance_draws, seed=s.seed, exclude=skip_pairs)
    node_level = LevelResult(level="node", auroc=n_roc.auroc, roc=n_roc, auroc_kind="pessimistic",
                             at_threshold=prf(identified, truth_nodes), at_top_k=None,
                             n_positive=len(truth_nodes), n_total=len(graph.components),
                             chance=cc.node_auroc, chance_se=cc.node_se, chance_rule=cc.rule)
    edge_level = LevelResult(level="edge", auroc=e_roc.auroc, roc=e_roc, auroc_kind="pessimistic",
                             at_threshold=prf(first_edges, truth_edge_names), at_top_k=None,
                             n_positive=len(truth_edges), n_total=len(edge_universe),
                             chance=cc.edge_auroc, chance_se=cc.edge_se, chance_rule=cc.rule,
                             excluded=tuple(sorted(skip)))
    return node_level, edge_level, circuits
