"""Model + task -> one subnetwork-probing circuit per sparsity penalty, on nodes or on q/k/v edges.

Subnetwork probing (Cao et al. 2021, as run by Conmy et al. 2023 and InterpBench §5 RQ4) learns a
hard-concrete mask z ∈ [0, 1] per node (`node_sp`: heads and MLPs) or per q/k/v edge (`edge_sp`,
InterpBench's "edgewise SP"). A node's readers see z·a + (1 - z)·a' (a' its reference: the
counterfactual output under resample ablation); an edge's reader sees its sender that way. The
loss is InterpBench's metric (KL from the full model's output for classification, mean squared
difference for regression, at label positions) plus λ times the expected share of open masks:

    loss = D(masked model, full model) + λ · mean_j P(z_j > 0)

Hard concrete (Louizos et al. 2018): s = σ((log u - log(1-u) + log α)/β), z = clamp(s(ζ-γ)+γ, 0, 1)
with β = 2/3, γ = -0.1, ζ = 1.1 and u ~ U(0, 1); P(z > 0) = σ(log α - β log(-γ/ζ)). After training,
a mask is in the circuit when its deterministic value clamp(σ(log α)(ζ-γ)+γ, 0, 1) exceeds 0.5.

Every penalty of the sweep trains at once: one row block per λ in each forward pass (per-row
weights, eval.patching.hooks), its own masks and its own Adam state, so a sweep costs `steps` forward and
backward passes, each on a random minibatch of the task. InterpBench trained 3000 epochs on the
full data; the default here is shorter (options).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

import torch

from eval.patching.ablation import AblationKind, make_context
from eval.methods.acdc import divergence_metric
from eval.core.circuit import promote
from eval.methods.edge_patching import repeat_rows
from eval.core.graph import ComputationGraph
from eval.methods.interface import CircuitRun, Method, MethodOutput, Progress
from eval.patching.task import TaskData

_ROW_FIELDS = ("tokens", "mask", "cf_tokens", "cf_mask", "labels", "cf_labels", "positions")
BETA, GAMMA, ZETA = 2 / 3, -0.1, 1.1
"""Hard-concrete temperature and stretch interval (Louizos et al. 2018)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SPOptions:
    """The penalty sweep and the optimisation of subnetwork probing."""

    penalties: tuple[float, ...] = (0.1, 0.0, 0.01, 0.03, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
    """λ values, one circuit each; the first is the method's chosen circuit. The penalty is λ times
    the mean share of open masks, so each mask feels λ / (number of masks): on graphs of 100+ edges
    a grid that stopped at 3 never pruned (edge_sp kept 69-108 of case 11's 108 edges at every λ;
    edge AUROC over the 16 main entries .749 ± .247, 0.84-0.98 on the worst cases with 10-100)."""
    steps: int = 200
    """Adam steps (InterpBench ran 3000 epochs)."""
    lr: float = 0.1
    """Adam learning rate on log α."""
    init_keep: float = 0.95
    """σ(log α) at the start: every mask starts nearly open."""
    batch: int = 32
    """Task rows per step (a fresh random minibatch each step, shared by every λ); at most n."""
    max_rows: int = 4096
    """Rows per forward pass (batch rows per λ); larger sweeps train in groups of λ."""

    def __post_init__(self) -> None:
        if not self.penalties or any(not lam >= 0 for lam in self.penalties):
            raise ValueError(f"penalties must be a non-empty list of values >= 0, got {self.penalties}")
        if self.steps < 0 or not 0 < self.init_keep < 1:
            raise ValueError(f"steps must be >= 0 and init_keep in (0, 1), got {self.steps} and {self.init_keep}")
        if not self.lr > 0 or self.batch < 1 or self.max_rows < 1:
            raise ValueError(f"lr must be > 0 and batch and max_rows at least 1, got {self.lr}, {self.batch}, "
                             f"{self.max_rows}")


def hard_concrete(log_alpha: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A stretched, clamped concrete sample z ∈ [0, 1], differentiable in log α."""
    # drawn on the CPU generator and moved: the same draws on every device
    u = torch.rand(log_alpha.shape, generator=generator, device="cpu").to(log_alpha.device).clamp(1e-6, 1 - 1e-6)
    s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + log_alpha) / BETA)
    return (s * (ZETA - GAMMA) + GAMMA).clamp(0.0, 1.0)


def deterministic_mask(log_alpha: torch.Tensor) -> torch.Tensor:
    """The mask's test-time value clamp(σ(log α)(ζ-γ)+γ, 0, 1)."""
    return (torch.sigmoid(log_alpha) * (ZETA - GAMMA) + GAMMA).clamp(0.0, 1.0)


def open_probability(log_alpha: torch.Tensor) -> torch.Tensor:
    """P(z > 0), the expected L0 norm's term."""
    return torch.sigmoid(log_alpha - BETA * math.log(-GAMMA / ZETA))


def _train(ctx: Any, units: list[Any], level: Literal["node", "edge"], penalties: tuple[float, ...],
           options: SPOptions, seed: int, progress: Progress | None) -> torch.Tensor:
    """Trained log α [len(penalties), len(units)], every λ as its own row block; progress counts steps."""
    task = ctx.task
    n = min(task.n, options.batch)
    with torch.no_grad():
        full = ctx.forward()
    init = math.log(options.init_keep / (1 - options.init_keep))
    out = []
    per = max(1, options.max_rows // n)
    generator = torch.Generator().manual_seed(seed)
    sources = sorted({u if level == "node" else u[0] for u in units})
    total, done = -(-len(penalties) // per) * options.steps, 0
    for start in range(0, len(penalties), per):
        device = task.tokens.device
        lams = torch.tensor(penalties[start:start + per], dtype=torch.float32, device=device)
        k = len(lams)
        log_alpha = torch.full((k, len(units)), init, requires_grad=True, device=device)
        opt = torch.optim.Adam([log_alpha], lr=options.lr)
        for _ in range(options.steps):
            rows = torch.randperm(task.n, generator=generator, device="cpu")[:n].to(task.tokens.device)
            sub = dataclasses.replace(task, **{f: getattr(task, f)[rows] for f in _ROW_FIELDS})
            metric = divergence_metric(sub, full[rows])
            tokens, mask = repeat_rows(sub.tokens, k), repeat_rows(sub.mask, k)
            reference = {s: repeat_rows(ctx.reference[s].expand(task.n, -1, -1)[rows], k) for s in sources}
            z = hard_concrete(log_alpha, generator)  # [k, units]
            w = (1.0 - z).repeat_interleave(n, dim=0)  # [k·n, units]: weight towards the reference
            if level == "node":
                patch = {"nodes": {u: w[:, j] for j, u in enumerate(units)}}
            else:  # one [λ blocks, edges] matrix: a slice per edge would cost a full-size gradient each
                patch = {"edge_matrix": (tuple(units), 1.0 - z)}
            run = ctx.adapter.run(tokens, mask, reference=reference, grad=True, **patch)
            logits = run.logits.view(k, n, *run.logits.shape[1:])
            fit = torch.stack([metric(logits[i]) for i in range(k)]).float()
            loss = (fit + lams * open_probability(log_alpha).mean(dim=1)).sum()
            # Only log α's gradient: the model's weights are not trained, so autograd skips them.
            (log_alpha.grad,) = torch.autograd.grad(loss, [log_alpha])
            opt.step()
            done += 1
            if progress is not None:
                progress(done, total)
        out.append(log_alpha.detach())
    return torch.cat(out)


def _sp(model: Any, task: TaskData, graph: ComputationGraph, ablation: AblationKind, seed: int,
        options: SPOptions, level: Literal["node", "edge"], progress: Progress | None) -> MethodOutput:
    ctx = make_context(model, task, graph, ablation)
    units: list[Any] = list(graph.components) if level == "node" else list(graph.at("qkv").edges)
    kept = deterministic_mask(_train(ctx, units, level, tuple(options.penalties), options, seed,
                                            progress)) > 0.5
    circuits = []
    for lam, row in zip(options.penalties, kept):
        chosen = [u for u, keep in zip(units, row.tolist()) if keep]
        if level == "node":
            circuits.append(CircuitRun(param=float(lam), nodes=frozenset(chosen)))
        else:
            nodes = {promote(x) for e in chosen for x in e} & set(graph.components)
            circuits.append(CircuitRun(param=float(lam), nodes=frozenset(nodes), edges=frozenset(chosen)))
    return MethodOutput(circuits=tuple(circuits))


def node_sp(model: Any, task: TaskData, *, graph: ComputationGraph, seed: int = 0,
            ablation: AblationKind = "resample", options: SPOptions = SPOptions(),
            progress: Progress | None = None) -> MethodOutput:
    """Subnetwork probing with a hard-concrete mask per head and MLP: one circuit per λ."""
    return _sp(model, task, graph, ablation, seed, options, "node", progress)


def edge_sp(model: Any, task: TaskData, *, graph: ComputationGraph, seed: int = 0,
            ablation: AblationKind = "resample", options: SPOptions = SPOptions(),
            progress: Progress | None = None) -> MethodOutput:
    """Edgewise subnetwork probing: a hard-concrete mask per q/k/v edge, one circuit per λ."""
    return _sp(model, task, graph, ablation, seed, options, "edge", progress)


METHODS = (
    Method(key="node_sp", name="Node SP", function=node_sp,
           description="subnetwork probing: hard-concrete masks on heads and MLPs, one circuit per penalty"),
    Method(key="edge_sp", name="Edge SP", function=edge_sp,
           description="edgewise subnetwork probing: hard-concrete masks on q/k/v edges, one circuit per penalty"),
)
