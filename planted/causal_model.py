"""Hand-written high-level causal models -> siit's HighLevelModel / HighLevelTask.

A `CausalModel` is a list of named nodes, each a function of the input tokens and its parents'
values, in topological order; the last node is the output (its values are the labels). Node names
are component names of a layered model (`a0.h1`, `m1`): each node states where it lives, and
siit.correspondence maps it to the low-level model as for compiled cases (a head to a seeded
random head of the same layer, an MLP to the MLP). Values are class ids, one per position, so all
node values of a batch are one long tensor [n_nodes, N, T] (batch on dim 1, as siit expects).

A `PlantedTask` adds what training needs: the task (a rasp_programs.Case with no RASP program:
vocabulary, lengths, seeded sampler), the token encoding, the high-level graph and the low-level
architecture, which is given (L layers x H heads), not derived from the high-level model.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, Literal

import torch

from eval.core.circuit import INPUT, LOGITS, Circuit, TaskKind, node_sort_key, parse_node
from eval.core.tlens import hooked_config
from rasp_programs.case import Case, CaseError
from rasp_programs.encoding import Encoding
from siit.config import ArchConfig, ConfigError
from siit.correspondence import Correspondence, NodeLayout, make_correspondence

@dataclasses.dataclass(frozen=True)
class NoProgram:
    """A planted model's Case.build_program: a hand-written causal model has no RASP program, and asking
    for one is a one-line CaseError."""

    name: str

    def __call__(self) -> Any:
        raise CaseError(f"planted model {self.name} is a hand-written causal model; it has no RASP program")


NodeFn = Callable[..., torch.Tensor]
"""fn(digits [N, T] long, real [N, T] bool, *parent values [N, T] long) -> values [N, T] long.
`digits` are token ids minus the id of the first input value (input value k is digit k); BOS and
PAD positions hold other numbers, which no labelled position may depend on."""
KeyFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""keys(digits [N, T] long, real [N, T] bool) -> bool [N, query pos, key pos]: the keys a head attends to."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Node:
    """One high-level node."""

    name: str
    """Where it lives: `a{l}.h{h}` or `m{l}` (eval.core.circuit names)."""
    parents: tuple[str, ...]
    """Nodes whose values `fn` reads, in argument order (every node also reads the input)."""
    fn: NodeFn
    """Its values from the input and its parents' values (see NodeFn)."""
    label: str
    """What it computes, for people reading the circuit."""
    reads_input: bool = False
    """Whether the graph has an edge input -> this node (fn may read the tokens)."""
    saturated_on: KeyFn | None = None
    """A head whose attention training saturates on these keys (siit.saturation): at every query
    their scores exceed every other visible key's by a margin. A family's phenomenon (planted.
    failure_modes' saturation), not part of the causal model: values and interchanges ignore it."""

    def __post_init__(self) -> None:
        if parse_node(self.name).kind not in ("head", "mlp"):
            raise ValueError(f"node {self.name!r}: a planted node is a head or an MLP")
        if self.saturated_on is not None and parse_node(self.name).kind != "head":
            raise ValueError(f"node {self.name!r}: only a head has attention to saturate")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CausalModel:
    """Named nodes in topological order; the last one is the output. A siit HighLevelModel."""

    node_list: tuple[Node, ...]
    """The nodes in forward order (eval.core.circuit.node_sort_key: layer by layer, heads before the
    MLP), so that each parent, a component the child can read, comes before it."""
    first_value_id: int
    """Token id of input value 0 (ids of values are consecutive from there)."""
    n_values: int
    """Output classes (the output node's values lie in [0, n_values))."""
    joint: tuple[tuple[str, ...], ...] = ()
    """Groups of nodes that training also interchanges together and validation judges together
    (siit.correspondence.Correspondence.joint): redundant copies, none of which alone changes the
    output (planted.failure_modes' redundancy)."""
    saturation_margin: float = 8.0
    """The score gap its saturated heads (Node.saturated_on) are trained to (siit.saturation). 8 for
    the saturation family, whose phenomenon is the vanishing softmax gradient; a model that only needs
    each head on its key (large-circuit) takes less: at 8 its 69 busy heads' distractors stayed near R²
    0.8, at 4 they passed 0.9 in the same steps (docs/results.md)."""

    def __post_init__(self) -> None:
        if not self.node_list:
            raise ValueError("a causal model needs at least one node")
        if not self.saturation_margin > 0:
            raise ValueError(f"saturation_margin must be positive, got {self.saturation_margin}")
        for group in self.joint:
            if len(set(group)) < 2 or any(n not in self.nodes for n in group):
                raise ValueError(f"joint group {group}: needs two or more distinct nodes of the model")
        names = [n.name for n in self.node_list]
        if names != sorted(names, key=node_sort_key):
            raise ValueError(f"nodes must be listed in forward order, got {names}")
        seen: set[str] = set()
        for node in self.node_list:
            missing = [p for p in node.parents if p not in seen]
            if missing:
                raise ValueError(f"node {node.name}: parents {missing} are not earlier nodes")
            if node.name in seen:
                raise ValueError(f"duplicate node {node.name}")
            layer = parse_node(node.name)
            if layer.kind == "head" and any(parse_node(p).layer >= layer.layer for p in node.parents):
                raise ValueError(f"node {node.name}: a head reads only components of earlier layers")
            seen.add(node.name)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.node_list)

    @property
    def task_kind(self) -> TaskKind:
        return "classification"

    def graph(self) -> Circuit:
        """The high-level graph: input -> nodes that read it, parent -> child, output -> logits."""
        edges = [(INPUT, n.name) for n in self.node_list if n.reads_input]
        edges += [(p, n.name) for n in self.node_list for p in n.parents]
        edges.append((self.node_list[-1].name, LOGITS))
        return Circuit.build(self.nodes, edges, {n.name: n.label for n in self.node_list})

    def _forward(self, tokens: torch.Tensor, mask: torch.Tensor, source: torch.Tensor | None,
                 select: torch.Tensor | None) -> torch.Tensor:
        digits = tokens - self.first_value_id  # [N, T]; BOS / PAD map outside the values
        real = mask.bool()
        values: dict[str, torch.Tensor] = {}
        for i, node in enumerate(self.node_list):
            out = node.fn(digits, real, *(values[p] for p in node.parents))  # [N, T]
            if select is not None and source is not None:
                take = select[..., i]  # [] or [N]
                out = torch.where(take.reshape(-1, 1) if take.dim() else take, source[i], out)
            values[node.name] = out
        return torch.stack([values[n.name] for n in self.node_list])  # [n_nodes, N, T]

    @property
    def saturated(self) -> tuple[str, ...]:
        """The heads whose attention training saturates (Node.saturated_on)."""
        return tuple(n.name for n in self.node_list if n.saturated_on is not None)

    def attention_keys(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """bool [n_saturated, N, query pos, key pos]: the keys each saturated head attends to."""
        digits = tokens - self.first_value_id
        fns = [n.saturated_on for n in self.node_list if n.saturated_on is not None]
        return torch.stack([fn(digits, mask.bool()) for fn in fns])

    def run(self, tokens: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values = self._forward(tokens, mask, None, None)
        return values[-1].clone(), values

    def interchange(self, tokens: torch.Tensor, mask: torch.Tensor, source_values: torch.Tensor,
                    select: torch.Tensor) -> torch.Tensor:
        return self._forward(tokens, mask, source_values, select)[-1]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlantedTask:
    """A hand-written causal model with its task and low-level architecture: a siit HighLevelTask."""

    case: Case
    """The task: id (the planted name), vocabulary, lengths, sampler; it has no RASP program."""
    encoding: Encoding
    """Token ids <-> values (BOS, the values, PAD)."""
    model: CausalModel
    """The high-level causal model."""
    n_layers: int
    """Layers of the low-level model."""
    n_heads: int
    """Heads per layer of the low-level model."""
    d_head: int = 4
    """Width of a low-level head (d_model = n_heads * d_head, d_mlp = 4 * d_model)."""
    reference: Callable[[tuple[Any, ...]], list[Any]]
    """The label function: output values of one input sequence, written independently of `model`."""
    last_position_weight: float = 1.0
    """Weight of the last input position in the IIT and SIIT losses, every other labelled position
    weighing 1 (siit.losses.output_loss); InterpBench's IOI model up-weights its answer token x10."""
    lr: float | None = None
    """Initial learning rate `zoo train` uses when given no --lr (None: siit.config.TrainConfig's);
    deep models need a smaller one (CAUSAL-BENCH 10x10 diverged twice at 0.01, met at 0.005)."""
    failure_mode: str | None = None
    """The failure-mode family it belongs to (planted.failure_modes.FAMILIES), or None for a model that
    reproduces a paper's planted circuit (CAUSAL-BENCH, IOI)."""
    strict_edges: bool | None = None
    """Edge-level strictness when the command line says neither --strict-edges nor --no-strict-edges
    (None: siit.config.TrainConfig's default); the failure-mode models train edge-exact."""
    epochs: int | None = None
    """Step budget in epochs `zoo train` uses when given no --epochs (None: TrainConfig's); a
    multi-task bundle has a task per n_tasks rows and needs more steps."""
    n_train: int | None = None
    """Training sequences `zoo train` draws when given no --n-train (None: TrainConfig's); a multi-task
    bundle's rare combinations (a rare task's firing input beside another task's node) need more."""
    fixed_placement: bool = False
    """Node names are the low-level components themselves (a multi-task bundle places its tasks side
    by side, planted.multi_task); False: each head goes to a seeded random head of its layer."""
    bundle: Any = None
    """A multi-task view's planted.multi_task.Bundle: its weights are the bundle's, trained on every
    task's rows (Bundle.task()); None: trained on its own rows."""
    view_tasks: Callable[[], tuple[Any, ...]] | None = None
    """A multi-task bundle's training task: its views, each judged during training on its own rows
    (siit.train_setup.Setup.views); None for every other task."""
    logit_template: float | None = None
    """Train the logits to a template instead of cross-entropy (siit.losses.template_loss, this margin):
    every logit is then a function of the answer, so what leaves the answer alone leaves the logits
    alone. None: cross-entropy."""
    lean_activations: bool = False
    """Train with siit's wide-model step (TrainConfig.lean_activations) unless the command line says
    otherwise: a wide model (planted.large_circuit's 49 heads a layer) trains 2.4x faster a step."""
    distractor_positions: Literal["every", "one"] = "every"
    """Where a busy head's distractor target varies (siit.distractors.DistractorPositions): "one" for a
    model whose circuit heads each fire at one position (planted.large_circuit), so that busy heads can
    be as loud as its circuit heads by both of the looks that measure loudness."""
    training: tuple[tuple[str, Any], ...] = ()
    """TrainConfig fields that no command-line option sets, as this task trains them ((name, value) pairs,
    applied by zoo.train_entry.with_task_defaults): a case bundle's training task's (planted.case_bundles:
    view_phase, strict_all, stall_tolerance); none for every other."""
    distractor_profile: float | None = None
    """The task's own TrainConfig.distractor_profile (how unevenly busy targets vary over positions),
    or None: the default."""

    def __post_init__(self) -> None:
        if not self.last_position_weight > 0:
            raise ValueError(f"{self.case.id}: last_position_weight must be positive, got {self.last_position_weight}")
        if self.lr is not None and not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"{self.case.id}: lr must be a positive number, got {self.lr}")
        if self.distractor_positions not in ("every", "one"):
            raise ValueError(f"{self.case.id}: distractor_positions must be 'every' or 'one', got {self.distractor_positions!r}")
        if self.logit_template is not None and not (self.logit_template > 0 and math.isfinite(self.logit_template)):
            raise ValueError(f"{self.case.id}: logit_template must be a positive number, got {self.logit_template}")
        for node in self.model.nodes:
            parsed = parse_node(node)
            if parsed.layer >= self.n_layers or (parsed.kind == "head" and parsed.head >= self.n_heads):
                raise ValueError(f"{self.case.id}: node {node} does not fit {self.n_layers}L/{self.n_heads}H")

    @property
    def graph(self) -> Circuit:
        return self.model.graph()

    @property
    def high_layout(self) -> dict[str, int]:
        """Layers and heads per layer the node names span (siit.correspondence's hl config keys)."""
        parsed = [parse_node(n) for n in self.model.nodes]
        return {"n_layers": 1 + max(p.layer for p in parsed),
                "n_heads": 1 + max((p.head for p in parsed if p.kind == "head"), default=0)}

    @property
    def covers_model(self) -> bool:
        """Whether the circuit holds every component of the low-level model (a multi-task bundle's
        training task): no node is left for a distractor task."""
        return set(self.graph.nodes) == set(NodeLayout(self.n_layers, self.n_heads).nodes)

    @property
    def layout(self) -> NodeLayout:
        """high_layout as a NodeLayout (as siit.high_level.TracrTask.layout)."""
        return NodeLayout(self.high_layout["n_layers"], self.high_layout["n_heads"])

    def high_level(self) -> CausalModel:
        return self.model

    def low_level_config(self, arch: ArchConfig) -> dict[str, Any]:
        n_layers, n_heads = arch.n_layers or self.n_layers, arch.n_heads or self.n_heads
        if n_layers < self.high_layout["n_layers"] or n_heads < self.high_layout["n_heads"]:
            raise ConfigError(f"{self.case.id}: the circuit needs {self.high_layout['n_layers']} layers and "
                              f"{self.high_layout['n_heads']} heads per layer")
        d_head = arch.d_head or self.d_head
        d_model = n_heads * d_head
        return hooked_config(
            n_layers=n_layers, d_model=d_model, n_heads=n_heads, d_head=d_head, d_mlp=arch.d_mlp or 4 * d_model,
            d_vocab=len(self.encoding.input_vocab), d_vocab_out=self.model.n_values,
            n_ctx=self.encoding.n_ctx, causal=self.case.causal, act_fn=arch.act_fn)

    def correspondence(self, low_config: Mapping[str, Any], seed: int) -> Correspondence:
        if self.fixed_placement:
            low = NodeLayout(low_config["n_layers"], low_config["n_heads"])
            corr = Correspondence(mapping={n: (n,) for n in self.graph.nodes}, high=self.layout, low=low)
        else:
            corr = make_correspondence(self.graph, self.high_layout, low_config, seed)
        return dataclasses.replace(corr, joint=self.model.joint)

    def labels(self, seqs: list[tuple[Any, ...]]) -> torch.Tensor:
        """long [N, n_ctx]: the reference's outputs as class ids (0 at BOS and PAD)."""
        out = torch.zeros(len(seqs), self.encoding.n_ctx, dtype=torch.long)
        vocab = self.encoding.output_vocab
        assert vocab is not None
        for row, seq in enumerate(seqs):
            for pos, value in enumerate(self.reference(seq)):
                out[row, pos + 1] = vocab.index(value)
        return out
