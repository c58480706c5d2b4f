"""Command-line choices -> validated, frozen training configuration (`ArchConfig`, `TrainConfig`)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

Scheme = Literal["alg1", "apph"]
Pairing = Literal["auto", "source_not_shorter", "independent"]
StrictSampling = Literal["one", "half", "mixed"]
Schedule = Literal["constant", "linear"]
ActFn = Literal["gelu", "relu"]


class ConfigError(ValueError):
    """A training option outside its allowed range (the CLI reports it as bad input)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ArchConfig:
    """Overrides of the low-level architecture; None keeps InterpBench's rule (REFERENCE.md)."""

    n_layers: int | None = None
    """Layers; default max(2, high-level layers). Must be >= the high-level layers."""
    n_heads: int | None = None
    """Heads per layer; default max(4, high-level heads). Must be >= the high-level heads."""
    d_head: int | None = None
    """Head width; default max(min_d_head, high-level d_head // 2). d_model = n_heads * d_head."""
    min_d_head: int = 4
    """Smallest default head width (InterpBench's rule has 1). Distractor tasks need room: at
    d_model 4 they reached only R² 0.26-0.36 (REFERENCE.md); 4 gives d_model >= 16."""
    d_mlp: int | None = None
    """MLP width; default 4 * d_model."""
    act_fn: ActFn = "gelu"
    """MLP activation (TransformerLens names; "gelu" is the exact erf GELU)."""

    def __post_init__(self) -> None:
        for name in ("n_layers", "n_heads", "d_head", "d_mlp", "min_d_head"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.act_fn not in ("gelu", "relu"):
            raise ConfigError(f"act_fn must be gelu or relu, got {self.act_fn!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Everything that determines a training run (written to training.json).

    Defaults differ from the paper where that trains much faster on CPU; the paper's settings stay
    reachable: Algorithm 1 is `scheme="alg1", lr=1e-3, batch_size=512` (constant lr, betas
    (0.9, 0.999)); Appendix H is `scheme="apph", lr=1e-3` (betas (0.9, 0.9), lr decayed linearly
    to 0.2 * lr).
    """

    scheme: Scheme = "apph"
    """"alg1": three optimiser steps per batch (IIT, strictness with one non-aligned node per
    example, behaviour). "apph": one summed loss, every non-aligned node ablated w.p. 0.5."""
    strict_sampling: StrictSampling | None = None
    """Which non-aligned nodes a strictness row ablates: "one" (one drawn uniformly, Algorithm 1),
    "half" (each w.p. 0.5, Appendix H), "mixed" (half the rows each way); None: the scheme's own."""
    strict_all: float = 0.0
    """The share of strictness rows that ablate every non-aligned node at once (SIIA's "all" group), drawn
    on top of strict_sampling. A multi-task bundle's views missed their criterion there: the other tasks'
    components, each inert alone, together moved an answer, and "half" ablates all of 9 nodes once in 512
    rows (planted.case_bundles sets 0.25). 0: as runs before the field existed."""
    strict_edges: bool = False
    """Strictness also patches edges outside the circuit (siit.edges): besides its ablated nodes,
    each strictness row patches non-circuit edges (reader r reads sender u's source value), one
    edge in half the rows (lagging edges drawn more often, siit.edges.edge_weights) and each edge
    w.p. 0.5 in the others, from another row's source (any length, as eval's resample draws); the
    output must not move. Checks then judge every such edge's SIIA (against edge_criterion) once
    the nodes meet the criterion. Only the readers learn from edge patches (the differences are
    detached). Node-level strictness alone lets a circuit node write along
    paths the high-level graph lacks, and busy nodes' writes cancel, so single edges move the
    output (issue 36): trained so, 13 of the 16 main cases had edges outside circuit.json that
    moved up to 81% of the outputs. Off by default until every main case and planted model meets
    it (cases 11 and 20 and causal-bench-4x4 do not yet: docs/results.md): the paper's node-level
    SIIT, whose edge labels validation.json's edge_effects then only reports."""
    edge_criterion: float = 0.999
    """With strict_edges: every non-circuit edge's SIIA on the validation bases (counterfactuals
    of any length, in each input shape apart) must reach this, not `criterion`. The entry's gate is
    exact edge patching on fresh inputs at 0.01 (zoo.edge_exactness). On case 3, 1.0 left its last edge 1-2 positions of
    1543 short for thousands of steps, and 0.995 passed training but failed the gate at 0.012;
    0.999 met both (0.0013)."""
    iit_weight: float = 1.0
    """Weight_IIT. 0 together with strict_weight 0 trains a "natural" (behaviour-only) model."""
    strict_weight: float = 0.5
    """Weight_SIIT (applied once, unlike InterpBench's code); 0 gives plain IIT."""
    behavior_weight: float = 1.0
    """Weight_behaviour."""
    lr: float = 1e-2
    """Initial Adam learning rate (the paper: 1e-3). Measured on cases 33 and 3: 1e-2 with batch
    128 reaches the criterion in 50 / 250 steps, 3e-3 with batch 256 in 200 / 700."""
    lr_schedule: Schedule | None = None
    """"linear" decays to lr_final_factor * lr over the step budget; None: linear for apph,
    constant for alg1 (as in the paper)."""
    lr_final_factor: float = 0.2
    """Final lr / initial lr of the linear schedule (the paper: 2e-4 / 1e-3)."""
    betas: tuple[float, float] | None = None
    """Adam betas; None: (0.9, 0.9) for apph, (0.9, 0.999) for alg1 (as in the paper)."""
    source_gradient: bool = True
    """Differentiate the loss through the source run as well (the full gradient of the paper's
    LOSS(INTINV(M, b, s, V))); InterpBench's code detaches the source activations."""
    weight_decay: float = 0.0
    """Decoupled (AdamW) weight decay; 0 is the paper's plain Adam."""
    batch_size: int = 128
    """Base/source pairs per step (the paper: 512)."""
    epochs: int = 250
    """Step budget in passes over the training set; training stops earlier at criterion. With
    distractors the slowest main case (11) needs ~2400 steps (150 epochs of 16 steps)."""
    n_train: int = 2048
    """Training sequences, drawn once from the case's sampler (pairs are redrawn every step)."""
    n_val: int = 512
    """Held-out validation sequences (another seed); pairs are drawn once."""
    eval_every: int = 25
    """Steps between validations (and checkpoints): training stops at the first validation that
    meets the criterion, so this bounds the steps spent after convergence."""
    criterion: float = 1.0
    """Stop when accuracy, every node's IIA and every SIIA reach this on validation."""
    seed: int = 0
    """Seeds data, the correspondence, initial weights and every step's sampling."""
    pairing: Pairing = "auto"
    """How a source is drawn for a base. "source_not_shorter": uniformly among sequences at least
    as long as the base, so every real base position receives a real source activation while
    lengths still differ. "independent": uniformly; base positions past the source's end then
    receive the source's PAD-position activations. "auto": source_not_shorter, unless a
    high-level node never changes the high-level output under it on the training data (a node
    that depends on positions only, e.g. case 26's Map(indices), takes the same value at the
    same position of any two sequences); then independent, so that every labelled node is
    exercised by IIT and has a measurable effect. The resolved choice is recorded."""
    init_output_scale: float = 0.1
    """Std multiplier of W_O and W_out at initialisation (1.0: plain 1/sqrt(fan_in)). Starting with
    components that barely write to the residual stream lets strictness converge in far fewer
    steps: only the aligned nodes have to grow."""
    regression_tolerance: float = 0.05
    """A regression output is correct within this absolute tolerance (the paper's atol)."""
    regression_hinge: float = 10.0
    """Regression outputs: the loss of a position is e² + regression_hinge · max(0, |e| - tolerance/2)²
    (siit.losses.regression_loss), so errors past half the tolerance weigh more and the loss presses
    on the few positions near the tolerance that accuracy, IIA and SIIA count, not only on the mean.
    0 is plain MSE (entries trained before it existed). With MSE alone, case 3's edge SIIA stalled at
    0.985-0.997 for 5000 steps, its 8000-step budget unmet: single edges moved a few outputs by
    0.05-0.066, just past the tolerance, while the rest of the squared error set the gradient."""
    distractors: bool | None = None
    """Give every out-of-circuit node a task of its own (siit.distractors), so that it stays busy
    and input-dependent while strictness keeps it irrelevant to the task output. None: on when
    strictness is trained (strict_weight > 0), off for IIT-only and natural models."""
    distractor_weight: float = 1.0
    """Weight of the distractor loss (mean over nodes of MSE / target variance)."""
    distractor_spread: float = 2.2
    """Each busy node's target variance (and squared mean output norm) is the circuit nodes' running median
    times a factor stratified over a span of spread² with the median at a quantile q drawn from
    siit.distractors.CIRCUIT_BAND (<= 0.6): the smallest factor, spread^(-2q) >= 0.38, keeps every
    busy node's variance above a quarter of the circuit's."""
    distractor_r2: float = 0.9
    """Training also needs every distractor's R² on validation data >= this before it stops."""
    busy_attention: bool = True
    """Busy heads whose distractor copies one token (previous_token) also keep a floor on the attention
    they give it (siit.source_attention): a head saturated on the wrong key gets no gradient from its
    distractor's error (case 33 seed 4: R² 0.88 from step 275 to 8000 without it). False: as runs
    before the field existed (absent in their training.json)."""
    distractor_profile: float = 1.0
    """How unevenly a busy node's target varies over positions: the largest sigma of the log of its
    per-position variance (siit.distractors.make_distractors draws each node's sigma stratified over
    [0, this]). 0: the same variance at every position, which no circuit node has (the
    position_spread look then reads the circuit off)."""
    distractor_components: int = 1
    """Most scalars a busy node's target has (siit.busy_components; 1 to 6, a head's at most d_head):
    each node gets up to this - 1 further components, each read along its probe direction of its own
    and counted in the distractor R² like the first; how many it writes follows the circuit's own
    participation ratio per type (siit.busy_ranks). 1: one scalar a node, as runs before the field
    existed."""
    distractor_reads: int = 0
    """Most earlier busy heads a busy node reads (siit.busy_reads; 0 to 3): a busy MLP's target is then
    a nonlinear function of what they compute (their targets' weighted sum, less a position code, in
    absolute value), a copying head's their running means from `offset` back, which only their outputs
    carry, so later components read the busy heads' work. 0: every busy node computes on tokens, as
    runs before the field existed."""
    view_phase: bool = False
    """A multi-task bundle's views (siit.train_setup.Setup.views) count in the stall test (siit.adaptation):
    the first check that judges them starts an lr cycle, as the edge phase does, and their summed shortfall
    (siit.adaptation.AdaptState.views_score) counts as a metric. False: the stall test reads the pooled
    check alone, whose metrics sit at 1.0 while views lag, so every check counts as a stall and restarts
    halved the lr to its floor within 1000 steps of the views being judged (mt-case-33, SIIA "all" of its
    views at .98 then)."""
    circuit_norm_ceiling: float = 2.5
    """Ceiling on the rms output norm of circuit nodes (with distractors on), inside the distractor
    range: without it SIIT makes circuit nodes louder than every distractor."""
    input_shapes: bool = True
    """Train on every input shape (padded to n_ctx, unpadded, partly padded; siit.data.SHAPES) so
    the circuit holds on whatever batch a user builds. Matters for bidirectional attention only,
    where PAD keys are attended; causal models compute the same in every shape."""
    adaptive: bool = True
    """When progress stalls, adapt before giving up (siit.adaptation): first draw lagging
    high-level nodes more often for IIT, then restart the learning rate; when the budget runs out
    within `reach` of the criterion or still rising, extend it. What was done is recorded in
    training.json."""
    patience: int = 8
    """Validations without a new best of the worst judged metric that count as a stall."""
    stall_tolerance: float = 1e-3
    """A new best must beat the previous one by more than this."""
    extension: float = 0.5
    """Each budget extension adds this fraction of the configured step budget."""
    max_extensions: int = 2
    """At most this many extensions."""
    reach: float = 0.02
    """Extend when every judged metric is within this fraction of its target (at the best
    validation), or when the run is still rising (`progress`)."""
    progress: float = 0.02
    """Extend also when the best worst-metric (each judged metric / its target) rose by at least
    this over the last quarter of the configured budget: still learning, not stalled."""
    rescale_heads: bool | None = None
    """After training, rescale each head's Q/K and V/O pairs by opposite factors (the function
    and every node output unchanged) to balanced norms drawn from the range of the model's node
    weight norms, so weight size says nothing about circuit membership. None: with distractors."""
    lean_activations: bool = False
    """The wide-model step: the stacked run's groups read the one copy of the source activations
    (strictness rows held in their sources' order) and the stacked run and the checks sum the heads'
    outputs from z, patching only the (row, head)s they name (Transformer.forward's sum_heads),
    instead of copying the source activations per group and making every head's output
    [batch, pos, H, d_model]. The same losses and predictions to float rounding, at a fraction of a
    wide model's cost (tests/benchmarks/bench_wide_step.py: 2 x 49 heads, step 2.4x, check 2.5x).
    Off by default: float rounding moves a run's trajectory, and a seed must reproduce the weights
    every entry so far was trained to, byte for byte."""

    def __post_init__(self) -> None:
        if self.scheme not in ("alg1", "apph"):
            raise ConfigError(f"scheme must be alg1 or apph, got {self.scheme!r}")
        if self.pairing not in ("auto", "source_not_shorter", "independent"):
            raise ConfigError(f"pairing must be auto, source_not_shorter or independent, got {self.pairing!r}")
        if not self.weight_decay >= 0:
            raise ConfigError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if not self.lr > 0 or not math.isfinite(self.lr):
            raise ConfigError(f"lr must be a finite number > 0, got {self.lr}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or not 0 <= self.seed < 2**32:
            raise ConfigError(f"seed must be an integer in [0, 2**32 - 1] (numpy's seed range), got {self.seed!r}")
        for name in ("batch_size", "epochs", "n_train", "n_val", "eval_every", "patience"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.batch_size > self.n_train:
            raise ConfigError(f"batch_size ({self.batch_size}) must not exceed n_train ({self.n_train})")
        for name in ("iit_weight", "strict_weight", "behavior_weight"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0")
        if self.iit_weight == self.strict_weight == self.behavior_weight == 0:
            raise ConfigError("at least one loss weight must be > 0")
        if not 0 < self.criterion <= 1 or not 0 < self.edge_criterion <= 1:
            raise ConfigError(f"criterion and edge_criterion must be in (0, 1], got {self.criterion}, {self.edge_criterion}")
        if not self.init_output_scale > 0:
            raise ConfigError("init_output_scale must be > 0")
        if not 0 < self.lr_final_factor <= 1:
            raise ConfigError("lr_final_factor must be in (0, 1]")
        for name in ("lr", "lr_final_factor", "iit_weight", "strict_weight", "behavior_weight", "weight_decay",
                     "criterion", "init_output_scale", "regression_tolerance", "regression_hinge", "distractor_weight",
                     "distractor_r2"):
            if not math.isfinite(getattr(self, name)):
                raise ConfigError(f"{name} must be a finite number, got {getattr(self, name)}")
        if self.regression_hinge < 0 or not self.regression_tolerance > 0:
            raise ConfigError(f"regression_hinge must be >= 0 and regression_tolerance > 0, "
                              f"got {self.regression_hinge} and {self.regression_tolerance}")
        self._check_realism()
        if not isinstance(self.max_extensions, int) or isinstance(self.max_extensions, bool) or self.max_extensions < 0:
            raise ConfigError(f"max_extensions must be an integer >= 0, got {self.max_extensions!r}")
        for name in ("stall_tolerance", "extension", "reach", "progress"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and 0 <= value <= 1):
                raise ConfigError(f"{name} must be a number in [0, 1], got {value!r}")
        if self.distractors is None:
            object.__setattr__(self, "distractors", self.strict_weight > 0)
        if self.rescale_heads is None:
            object.__setattr__(self, "rescale_heads", bool(self.distractors))
        if self.strict_sampling is None:
            object.__setattr__(self, "strict_sampling", "one" if self.scheme == "alg1" else "half")
        if self.strict_sampling not in ("one", "half", "mixed"):
            raise ConfigError(f"strict_sampling must be one, half or mixed, got {self.strict_sampling!r}")
        if not 0.0 <= self.strict_all <= 1.0:
            raise ConfigError(f"strict_all must be in [0, 1], got {self.strict_all}")
        if self.lr_schedule is None:
            object.__setattr__(self, "lr_schedule", "linear" if self.scheme == "apph" else "constant")
        if self.betas is None:
            object.__setattr__(self, "betas", (0.9, 0.9) if self.scheme == "apph" else (0.9, 0.999))
        object.__setattr__(self, "betas", tuple(float(b) for b in self.betas))
        if len(self.betas) != 2 or not all(math.isfinite(b) and 0 <= b < 1 for b in self.betas):
            raise ConfigError(f"betas must be two finite numbers in [0, 1), got {self.betas}")

    @property
    def steps_per_epoch(self) -> int:
        return self.n_train // self.batch_size

    @property
    def max_steps(self) -> int:
        return self.epochs * self.steps_per_epoch

    @property
    def trains_edges(self) -> bool:
        """Whether edge-level strictness is trained: strict_edges with strictness on (an IIT-only or
        natural model has no strictness rows to patch edges in)."""
        return self.strict_edges and self.strict_weight > 0

    @property
    def judged_metrics(self) -> tuple[str, ...]:
        """The metrics the criterion needs: only what the losses train."""
        return (("accuracy",) + (("iia",) if self.iit_weight > 0 else ()) + (("siia",) if self.strict_weight > 0 else ())
                + (("distractor_r2",) if self.distractors else ())
                + (("edge_siia",) if self.trains_edges else ()))

    def _check_realism(self) -> None:
        """The distractors' and the norm ceiling's fields."""
        if not (math.isfinite(self.distractor_spread) and self.distractor_spread >= 1 and 0 <= self.distractor_profile <= 3):
            raise ConfigError("distractor_spread must be a finite number >= 1 and distractor_profile one in [0, 3], "
                              f"got {self.distractor_spread} and {self.distractor_profile}")
        if isinstance(self.distractor_components, bool) or not (  # siit.busy_components.MAX_COMPONENTS
                isinstance(self.distractor_components, int) and 1 <= self.distractor_components <= 6):
            raise ConfigError(f"distractor_components must be an integer in [1, 6], got {self.distractor_components!r}")
        if isinstance(self.distractor_reads, bool) or not (  # siit.busy_reads.MAX_READS
                isinstance(self.distractor_reads, int) and 0 <= self.distractor_reads <= 3):
            raise ConfigError(f"distractor_reads must be an integer in [0, 3], got {self.distractor_reads!r}")
        if not self.circuit_norm_ceiling > 0:
            raise ConfigError(f"circuit_norm_ceiling must be > 0 (inf turns it off), got {self.circuit_norm_ceiling}")
        if self.distractor_weight < 0 or not 0 <= self.distractor_r2 <= 1:
            raise ConfigError("distractor_weight must be >= 0 and distractor_r2 in [0, 1]")

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["betas"] = list(self.betas)
        if not self.lean_activations:  # at its default, as runs before it recorded them (checkpoints resume)
            del data["lean_activations"]
        if not self.busy_attention:  # as runs before the field existed recorded them
            del data["busy_attention"]
        if self.distractor_profile == 0.0:  # flat targets: as runs before the field existed recorded them
            del data["distractor_profile"]
        if self.distractor_components == 1:  # one scalar a node: as runs before the field existed
            del data["distractor_components"]
        if self.distractor_reads == 0:  # busy nodes compute on tokens: as runs before the field existed
            del data["distractor_reads"]
        if not self.view_phase:  # the pooled check alone: as runs before the field existed
            del data["view_phase"]
        if self.strict_all == 0.0:  # as runs before the field existed
            del data["strict_all"]
        return data
