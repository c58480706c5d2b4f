"""Several planted tasks -> one multi-task causal model whose tasks share a vocabulary, an
unembedding and the low-level model's components (issue 32, item 1).

A language model answers many tasks with one vocabulary, and every component works for some task
that other components read. A `Bundle` reproduces that: each `Part` is a task with its own causal
model (planted.causal_model), placed on components of one shared low-level model so that every
component belongs to some task's circuit. Its busy components are other tasks' circuits: they
carry those tasks' values (more than one scalar), later components of their task read them, and
their output nodes write towards the shared unembedding.

How the model knows the task: every task has its own tokens (task "r" writes value 3 as "r3"), as
text of one domain uses words of that domain. Each position then knows its task from its own
token, so an MLP, which sees one position, can be a task's output node. A task token after BOS
was the alternative: every MLP would then need a head to bring the task to its position, and that
head would be in every task's circuit. One value has one meaning in every task: a node computes
its function on the values of whatever task's row it sees (every node is busy on every input),
and a value moved by an interchange from another task's row is read as a value. (An input that mixes
tasks' tokens, which the sampler never draws, is the first token's task, each token read as its
number; the ground truth is claimed for the sampler's inputs.)

Each task answers with its own output classes ("r3" is rare-feature's answer 3), as a language model
answers different questions with different words. With one set of classes for every task the
ground truth cannot be trained: an output node must write its answer wherever it is patched into
its task's rows, so its activation on another task's row writes an answer too, and strictness asks
that it change nothing there. With classes of its own, a task's tokens can raise its own classes
above every other task's (the direct path), and another task's answer, however loud, stays out of
the argmax.

The direct path (input -> logits) is an edge of every task's circuit: a task's tokens raise its own
classes. It cannot be left out: strictness on a task's rows must hold against any activation of
another task's output node, including the loud one it has on its own rows, and no output node can
outvote every other task's; only the base row's own tokens, read by the direct path, can.

Ground truth per task (a `view`): on the rows of task T the output is T's output node, computed
from T's nodes only; no node of another task is a parent of T's nodes. Interchange training on
the bundle (every node of every task, sources from any task) therefore trains strictness per
task: patching another task's node with any source must leave T's output alone. A view is a
PlantedTask on T's rows with T's circuit, trained as the bundle (same weights for every view of a
bundle and seed) and validated on its own rows like any entry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import torch

from eval.core.circuit import INPUT, LOGITS, Circuit, node_sort_key
from planted.causal_model import CausalModel, Node, NoProgram, PlantedTask
from rasp_programs.case import BOS, PAD, Case, CaseError
from rasp_programs.encoding import Encoding


@dataclasses.dataclass(frozen=True, kw_only=True)
class Part:
    """One task of a bundle."""

    key: str
    """Its name in the bundle (the view is `<bundle>.<key>`)."""
    prefix: str
    """Token prefix: value v of this task is the token f"{prefix}{v}"."""
    model: CausalModel
    """Its causal model, node names as in a model of its own."""
    placement: Mapping[str, str]
    """Its node -> the component of the shared model that computes it."""
    reference: Callable[[tuple[int, ...]], list[int]]
    """Label function of one input (values, not tokens), written apart from `model`."""
    n_values: int
    """Input values 0 .. n_values - 1."""
    description: str
    """What the task computes."""
    share: float = 1.0
    """Relative frequency of its rows in the training and pooled validation inputs (the sampler draws a
    part with probability share / the sum of shares): IIT trains a node on its own task's rows only, so a
    task of many nodes gives each of them fewer rows than a one-node task gives its node."""

    def __post_init__(self) -> None:
        if not self.share > 0:
            raise ValueError(f"part {self.key}: share must be positive")
        if set(self.placement) != set(self.model.nodes):
            raise ValueError(f"part {self.key}: placement must name exactly its nodes {list(self.model.nodes)}")
        if len(set(self.placement.values())) != len(self.placement):
            raise ValueError(f"part {self.key}: two nodes placed on one component")

    def tokens(self) -> tuple[str, ...]:
        return tuple(f"{self.prefix}{v}" for v in range(self.n_values))


@dataclasses.dataclass(frozen=True)
class LocalDigits:
    """A part's node function on the shared model's digits: each row's values are read as values,
    whatever task's tokens carry them (BOS reads -1 and PAD reads n_values, as in a model of its own)."""

    fn: Callable[..., torch.Tensor]
    offsets: tuple[int, ...]
    """First shared digit of each part's tokens."""
    n_values: int

    def __call__(self, digits: torch.Tensor, real: torch.Tensor, *parents: torch.Tensor) -> torch.Tensor:
        return self.fn(local_values(digits, real, self.offsets, self.n_values), real, *parents)


def row_tasks(digits: torch.Tensor, offsets: tuple[int, ...]) -> torch.Tensor:
    """long [N]: the part each row belongs to, from its first input token (every input has one)."""
    return torch.bucketize(digits[:, 1].contiguous(), torch.tensor(offsets[1:], dtype=digits.dtype), right=True)


def local_values(digits: torch.Tensor, real: torch.Tensor, offsets: tuple[int, ...], n_pad: int) -> torch.Tensor:
    """[N, T] each token's value (its number: "s3" is 3, whichever task's row it is in); -1 at BOS,
    n_pad at PAD."""
    bounds = torch.tensor(offsets, dtype=digits.dtype)
    offset = bounds[torch.bucketize(digits.contiguous(), bounds[1:], right=True)]
    position = torch.arange(digits.shape[1])[None, :]
    return torch.where(position == 0, -1, torch.where(real, digits - offset, n_pad))


@dataclasses.dataclass(frozen=True, kw_only=True)
class MultiTaskModel(CausalModel):
    """Every part's nodes on their components; each row's labels are its task's output node. With
    `view` set, the nodes (and values, and interchange's select) are that part's only."""

    outputs: tuple[str, ...]
    """Each part's output node (shared names)."""
    offsets: tuple[int, ...]
    """First shared digit of each part's tokens."""
    out_offsets: tuple[int, ...]
    """First output class of each part (its answers are classes out_offset .. + its n_values)."""
    part_nodes: tuple[tuple[str, ...], ...]
    """Each part's nodes (shared names)."""
    part_edges: tuple[tuple[tuple[str, str], ...], ...]
    """Each part's high-level edges (shared names; input -> ..., output -> logits)."""
    part_labels: Mapping[str, str]
    """What each node computes, prefixed by its task."""
    view: int | None = None
    """The part whose nodes this model exposes (None: every part)."""

    @property
    def all_nodes(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.node_list)

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.all_nodes if self.view is None else self.part_nodes[self.view]

    def graph(self) -> Circuit:
        parts = range(len(self.part_nodes)) if self.view is None else (self.view,)
        edges = [e for k in parts for e in self.part_edges[k]]
        return Circuit.build(self.nodes, edges, {n: self.part_labels[n] for n in self.nodes})

    def _labels(self, tokens: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        task = self.row_task_index(tokens)
        index = {n: i for i, n in enumerate(self.all_nodes)}
        out_rows = torch.tensor([index[n] for n in self.outputs])[task]  # [N]
        return values[out_rows, torch.arange(tokens.shape[0])] + torch.tensor(self.out_offsets)[task][:, None]

    def row_task_index(self, tokens: torch.Tensor) -> torch.Tensor:
        """long [N]: the part (view) each row belongs to; siit.train_step draws each row's IIT node,
        strictness nodes and edges from its view (Setup.views)."""
        return row_tasks(tokens - self.first_value_id, self.offsets)

    def _visible(self) -> torch.Tensor:
        index = {n: i for i, n in enumerate(self.all_nodes)}
        return torch.tensor([index[n] for n in self.nodes])

    def run(self, tokens: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values = self._forward(tokens, mask, None, None)  # [all nodes, N, T]
        return self._labels(tokens, values), values[self._visible()]

    def interchange(self, tokens: torch.Tensor, mask: torch.Tensor, source_values: torch.Tensor,
                    select: torch.Tensor) -> torch.Tensor:
        visible, n_all = self._visible(), len(self.all_nodes)
        full_select = torch.zeros(*select.shape[:-1], n_all, dtype=torch.bool)
        full_select[..., visible] = select
        full_source = source_values.new_zeros(n_all, *source_values.shape[1:])
        full_source[visible] = source_values
        return self._labels(tokens, self._forward(tokens, mask, full_source, full_select))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Bundle:
    """Parts on one low-level model: the training task (every part's rows) and a view per part."""

    name: str
    """The training task's id; its views are `<name>.<part key>`."""
    parts: tuple[Part, ...]
    """The tasks; the first is the main one (the bundle's headline entry)."""
    n_layers: int
    """Layers of the shared low-level model."""
    n_heads: int
    """Heads per layer of the shared low-level model."""
    d_head: int
    """Width of a head (d_model = n_heads * d_head)."""
    min_len: int
    """Shortest input the sampler draws (every task)."""
    max_len: int
    """Longest input (every task; n_ctx = max_len + 1)."""
    description: str
    """What the bundle holds, for `zoo show planted`."""
    lr: float | None = None
    """Initial learning rate `zoo train` uses when given no --lr (PlantedTask.lr)."""
    epochs: int | None = None
    """Step budget `zoo train` uses when given no --epochs (PlantedTask.epochs)."""
    strict_edges: bool = True
    """Edge-level strictness when the command line says neither --strict-edges nor --no-strict-edges
    (PlantedTask.strict_edges); False: node-level, each view's edge labels measured and reported."""
    n_train: int | None = None
    """Training sequences `zoo train` draws when given no --n-train (PlantedTask.n_train)."""

    def __post_init__(self) -> None:
        keys = [p.key for p in self.parts]
        if len(set(keys)) != len(keys) or len({p.prefix for p in self.parts}) != len(self.parts):
            raise ValueError(f"bundle {self.name}: part keys and token prefixes must be distinct")
        placed = [c for p in self.parts for c in p.placement.values()]
        if len(set(placed)) != len(placed):
            raise ValueError(f"bundle {self.name}: two parts placed on one component")

    @property
    def view_names(self) -> tuple[str, ...]:
        return tuple(f"{self.name}.{p.key}" for p in self.parts)

    def _offsets(self, sizes: list[int]) -> tuple[int, ...]:
        return tuple(sum(sizes[:k]) for k in range(len(sizes)))

    def model(self, view: int | None = None) -> MultiTaskModel:
        offsets = self._offsets([p.n_values for p in self.parts])
        nodes, part_nodes, part_edges, labels = [], [], [], {}
        for part in self.parts:
            place = part.placement
            for node in part.model.node_list:
                nodes.append(Node(name=place[node.name], parents=tuple(place[p] for p in node.parents),
                                  fn=LocalDigits(node.fn, offsets, part.n_values), label=node.label,
                                  reads_input=node.reads_input))
                labels[place[node.name]] = f"{part.key}: {node.label}"
            part_nodes.append(tuple(sorted((place[n] for n in part.model.nodes), key=node_sort_key)))
            lift = {INPUT: INPUT, LOGITS: LOGITS, **place}
            # the direct path raises the task's own answer classes (its tokens' block): in every
            # task's circuit, since no output node can outvote another task's on its rows
            part_edges.append(tuple((lift[a], lift[b]) for a, b in part.model.graph().edges) + ((INPUT, LOGITS),))
        nodes.sort(key=lambda n: node_sort_key(n.name))
        return MultiTaskModel(node_list=tuple(nodes), first_value_id=1,
                              n_values=sum(p.model.n_values for p in self.parts),
                              outputs=tuple(p.placement[p.model.nodes[-1]] for p in self.parts),
                              offsets=offsets, out_offsets=self._offsets([p.model.n_values for p in self.parts]),
                              part_nodes=tuple(part_nodes), part_edges=tuple(part_edges),
                              part_labels=labels, view=view)

    def encoding(self) -> Encoding:
        tokens = tuple(t for p in self.parts for t in p.tokens())
        answers = tuple(f"{p.prefix}{v}" for p in self.parts for v in range(p.model.n_values))
        return Encoding(input_vocab=(BOS, *tokens, PAD), output_vocab=answers,
                        max_seq_len=self.max_len, task_kind="classification")

    def task(self, view: int | None = None) -> PlantedTask:
        """The training task (view None: rows of every part) or part `view`'s benchmark task."""
        parts = self.parts if view is None else (self.parts[view],)
        name = self.name if view is None else self.view_names[view]
        description = (self.description if view is None else
                       f"{self.parts[view].description} One task of the multi-task bundle {self.name}: "
                       f"{self.description}")
        case = Case(id=name, name=name.replace("-", "_").replace(".", "_"), family="planted",
                    description=description, task_kind="classification",
                    vocab=tuple(t for p in self.parts for t in p.tokens()), max_seq_len=self.max_len,
                    min_seq_len=self.min_len, causal=True, build_program=NoProgram(name),
                    sampler=PartSampler(parts, self.min_len, self.max_len),
                    notes=f"Multi-task planted model (planted.multi_task); see `zoo show planted {name}`.")
        return PlantedTask(case=case, encoding=self.encoding(), model=self.model(view), n_layers=self.n_layers,
                           n_heads=self.n_heads, d_head=self.d_head, reference=Reference(self.parts), lr=self.lr,
                           epochs=self.epochs, n_train=self.n_train,
                           fixed_placement=True, strict_edges=self.strict_edges, bundle=None if view is None else self,
                           view_tasks=self.views if view is None else None)

    def views(self) -> tuple[PlantedTask, ...]:
        """Every part's view (the training task judges each: siit.train_setup.Setup.views)."""
        return tuple(self.task(k) for k in range(len(self.parts)))


@dataclasses.dataclass(frozen=True)
class PartSampler:
    """Each row: a part drawn by its share (Part.share), a length uniform in [min, max], values uniform."""

    parts: tuple[Part, ...]
    min_len: int
    max_len: int

    def __call__(self, rng: Any, n: int) -> list[tuple[str, ...]]:
        shares = [p.share for p in self.parts]
        if len(set(shares)) == 1:  # uniform: the draw every bundle made before shares existed (same inputs)
            which = rng.integers(0, len(self.parts), size=n)
        else:
            which = rng.choice(len(self.parts), size=n, p=[w / sum(shares) for w in shares])
        lengths = rng.integers(self.min_len, self.max_len + 1, size=n)
        out = []
        for k, length in zip(which, lengths):
            part = self.parts[int(k)]
            out.append(tuple(f"{part.prefix}{int(v)}" for v in rng.integers(0, part.n_values, size=int(length))))
        return out


@dataclasses.dataclass(frozen=True)
class Reference:
    """The label function of a bundle's inputs: the part named by the tokens' prefix, on the values."""

    parts: tuple[Part, ...]

    def __call__(self, seq: tuple[str, ...]) -> list[str]:
        """The answers of the first token's task, every token read as its number (an input that
        mixes tasks' tokens, which the sampler never draws, is the first token's task's)."""
        parts = {p.prefix: p for p in self.parts}
        prefix = seq[0].rstrip("0123456789")
        if prefix not in parts or any(t.rstrip("0123456789") not in parts for t in seq):
            raise CaseError(f"input {seq!r} has tokens of no task")
        values = parts[prefix].reference(tuple(int(t[len(t.rstrip("0123456789")):]) for t in seq))
        return [f"{prefix}{v}" for v in values]
