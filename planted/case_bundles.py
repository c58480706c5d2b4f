"""A RASP case + side tasks on the rest of its low-level model -> a multi-task bundle whose main task is
the case (issue 32, item 1): one trained model, the case's circuit its ground truth, every other
component some side task's circuit, read by later components and writing towards the shared unembedding.

`mt-case-33` holds InterpBench's case 33 (its compiled Tracr model is the main task's high-level model,
on the components InterpBench's correspondence rule gives it) and the side tasks planted.side_tasks
lays out on every other component. Its views are `mt-case-33.case-33` (the case's ground truth) and one
per side task (`mt-case-33.lag2`, ...), each a benchmark entry with the same weights, trained once with
`zoo train planted mt-case-33.case-33 --all-views`.

How the tasks share inputs (planted.multi_task's design, one change): every row is an input of the
case, drawn by its own sampler, and written either in the case's own tokens (a row of the main task)
or in one side task's tokens: token `lag2:3` is digit 3, the case's vocab[3] in that task's script. So
each token's task is in the token itself (a position knows what to answer), every node computes its
function on the digits of whatever row it sees, and every row is a valid input of the case: the
compiled model's values on a side task's row are its values on the same digits in the case's tokens,
exact, so an interchange from any row into any row has a label. Side tasks therefore take as many
values as the case has tokens.

The case's circuit, its edges and its output classes are read from the shipped catalogue
(rasp_programs.summary): listing bundles compiles nothing; the compiled model (from the shared compile
cache, rasp_programs.compile.shared_cache_dir) is checked against them when first used.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from eval.core.circuit import INPUT, LOGITS, Circuit, node_sort_key, parse_node
from planted.causal_model import NoProgram, Node, PlantedTask
from planted.multi_task import LocalDigits, Part, local_values, row_tasks
from planted.side_tasks import fill
from rasp_programs.case import BOS, PAD, Case, CaseError
from rasp_programs.encoding import Encoding
from siit.correspondence import NodeLayout, make_correspondence

PREFIX = "mt-case-"
"""A case bundle's name: `mt-case-<case id>`."""
MAIN_CASES = ("8", "11", "13", "18", "19", "20", "21", "26", "29", "33", "34", "35", "36", "37")
"""The main cases (InterpBench's 16) that get a bundle: the classification ones (3 and 4 are regression,
and a bundle's tasks answer with classes of one shared unembedding)."""
D_HEAD = 16
"""Head width of a bundle's model (d_model 64): every component works for some task, up to eight of them; at
d_head 8 mt-case-33's views lagged longer under SIIA "all" (docs/results.md, "Case bundles")."""
TRAINING = (("view_phase", True), ("strict_all", 0.25), ("stall_tolerance", 1e-4))
"""How a case bundle trains beyond the planted bundles (PlantedTask.training; docs/training.md): its views
count in the stall test (TrainConfig.view_phase), a quarter of the strictness rows ablate every other task's
node at once (strict_all: views missed their criterion under SIIA "all" alone), and a view gaining one
position of its ~1500 counts as progress (stall_tolerance 1e-4: at 1e-3 the last positions of three views
were never a new best, and restarts took the lr to its floor)."""


class CompiledMain:
    """The compiled case behind a bundle's main task, compiled (or read from the shared compile cache)
    on first use and checked against the shipped graph and output classes."""

    def __init__(self, case: Case, graph: Circuit, output_vocab: tuple[Any, ...], compiled: Any = None) -> None:
        """compiled: the case's rasp_programs.compile.CompiledCase if the caller has it (checked all the same)."""
        self.case, self.graph, self.output_vocab = case, graph, output_vocab
        self._given, self._compiled, self._high = compiled, None, None

    def compiled(self) -> Any:
        if self._compiled is None:
            from rasp_programs.compile import compile_case, shared_cache_dir

            compiled = self._given or compile_case(self.case, None, shared_cache=shared_cache_dir())
            if (compiled.graph.nodes, compiled.graph.edges) != (self.graph.nodes, self.graph.edges) or \
                    tuple(compiled.encoding.output_vocab or ()) != self.output_vocab:
                raise CaseError(f"case {self.case.id}: its compiled graph or output classes differ from the "
                                "shipped catalogue (run `python -m rasp_programs.summary`)")
            self._compiled = compiled
        return self._compiled

    def high(self) -> Any:
        """The compiled model as a siit HighLevelModel (siit.high_level.TracrHighLevel)."""
        if self._high is None:
            from siit.high_level import TracrTask

            self._high = TracrTask(self.compiled()).high_level()
        return self._high

    def token_ids(self, vocab: tuple[Any, ...], n_digits: int) -> torch.Tensor:
        """long [len(vocab)]: the compiled model's token id of each bundle token (a side task's digit d
        is the case's vocab[d]; BOS and PAD themselves)."""
        ids = {v: i for i, v in enumerate(self.compiled().encoding.input_vocab)}
        main = self.case.vocab
        return torch.tensor([ids[t] if t in (BOS, PAD) else ids[main[(k - 1) % n_digits]] for k, t in enumerate(vocab)])


@dataclasses.dataclass(frozen=True, kw_only=True)
class CaseBundleModel:
    """The compiled case on its components beside the side tasks' causal nodes: a siit HighLevelModel.
    Values [1, N, T, F]: the compiled model's node activations flattened, then each side node's value."""

    main: CompiledMain
    placement: Mapping[str, str]
    """The case's high-level node -> its component."""
    sides: tuple[Node, ...]
    """Every side task's nodes, named for their components, in forward order (fn reads local digits)."""
    offsets: tuple[int, ...]
    """First digit of each part's tokens (part 0: the case)."""
    n_digits: int
    """Values of every task's tokens (the case's vocabulary size)."""
    outputs: tuple[str, ...]
    """Each side task's output node."""
    out_offsets: tuple[int, ...]
    """First output class of each part."""
    part_nodes: tuple[tuple[str, ...], ...]
    part_edges: tuple[tuple[tuple[str, str], ...], ...]
    part_labels: Mapping[str, str]
    n_values: int
    """Output classes of the bundle (every part's)."""
    vocab: tuple[Any, ...]
    """The bundle's input vocabulary (token id order)."""
    view: int | None = None
    first_value_id: int = 1
    joint: tuple[tuple[str, ...], ...] = ()

    @property
    def task_kind(self) -> str:
        return "classification"

    @property
    def all_nodes(self) -> tuple[str, ...]:
        return tuple(sorted([*self.placement.values(), *(n.name for n in self.sides)], key=node_sort_key))

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.all_nodes if self.view is None else self.part_nodes[self.view]

    def graph(self) -> Circuit:
        parts = range(len(self.part_nodes)) if self.view is None else (self.view,)
        return Circuit.build(self.nodes, [e for k in parts for e in self.part_edges[k]],
                             {n: self.part_labels[n] for n in self.nodes})

    def row_task_index(self, tokens: torch.Tensor) -> torch.Tensor:
        """long [N]: the part each row belongs to (0: the case)."""
        return row_tasks(tokens - self.first_value_id, self.offsets)

    def _main_order(self) -> list[int]:
        """Index in all_nodes of each of the compiled model's nodes, in its own node order."""
        index = {n: i for i, n in enumerate(self.all_nodes)}
        return [index[self.placement[n]] for n in self.main.graph.nodes]

    def _side_order(self) -> list[int]:
        index = {n: i for i, n in enumerate(self.all_nodes)}
        return [index[n.name] for n in self.sides]

    def _side_values(self, tokens: torch.Tensor, mask: torch.Tensor, source: torch.Tensor | None = None,
                     select: torch.Tensor | None = None) -> torch.Tensor:
        """long [n_side, N, T]: every side node's value, the selected ones taken from `source`."""
        digits, real = tokens - self.first_value_id, mask.bool()
        values: dict[str, torch.Tensor] = {}
        for i, node in enumerate(self.sides):
            out = node.fn(digits, real, *(values[p] for p in node.parents))
            if select is not None and source is not None:
                take = select[..., i]
                out = torch.where(take.reshape(-1, 1) if take.dim() else take, source[i], out)
            values[node.name] = out
        return torch.stack([values[n.name] for n in self.sides]) if self.sides else \
            torch.zeros(0, *tokens.shape, dtype=torch.long)

    def _labels(self, tokens: torch.Tensor, main_labels: torch.Tensor, side: torch.Tensor) -> torch.Tensor:
        """long [N, T]: each row's answer, its own task's classes."""
        task = self.row_task_index(tokens)
        out = main_labels.long() + self.out_offsets[0]
        names = [n.name for n in self.sides]
        for k, node in enumerate(self.outputs, start=1):
            rows = task == k
            out[rows] = side[names.index(node)][rows] + self.out_offsets[k]
        return out

    def _pack(self, main_acts: torch.Tensor, side: torch.Tensor) -> torch.Tensor:
        """[1, N, T, F]: main_acts [hl L, N, T, S, d] flattened per position, then side [n_side, N, T]."""
        N, T = main_acts.shape[1:3]
        flat = main_acts.permute(1, 2, 0, 3, 4).reshape(N, T, -1)
        return torch.cat([flat.float(), side.permute(1, 2, 0).float()], dim=-1)[None]

    def _unpack(self, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the compiled model's activations [hl L, N, T, S, d], side values long [n_side, N, T]) of _pack's values."""
        config = self.main.compiled().config
        L, S, d = config["n_layers"], config["n_heads"] + 1, config["d_model"]
        width = L * S * d
        rows, T = values.shape[1], values.shape[2]
        main = values[0, :, :, :width].reshape(rows, T, L, S, d).permute(2, 0, 1, 3, 4)
        return main, values[0, :, :, width:].permute(2, 0, 1).round().long()

    def run(self, tokens: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        high = self.main.high()
        main_labels, main_acts = high.run(self.main_tokens(tokens), mask)
        side = self._side_values(tokens, mask)
        return self._labels(tokens, main_labels, side), self._pack(main_acts, side)

    @property
    def sharp_heads(self) -> tuple[str, ...]:
        """The side tasks' heads (of this view), each trained to attend sharply to the keys its function
        reads (siit.train_setup: the attention margin, training only)."""
        return tuple(n.name for n in self.sides if parse_node(n.name).kind == "head" and n.name in self.nodes)

    def sharp_keys(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """bool [n sharp heads, N, query, key]: the keys each side head's function reads on these rows
        (planted.side_tasks: Copy, Select, Lag keys, on each row's digits)."""
        real = mask.bool()
        digits = local_values(tokens - self.first_value_id, real, self.offsets, self.n_digits)
        fns = {n.name: n.fn.fn for n in self.sides}  # n.fn: LocalDigits around the side function
        return torch.stack([fns[h].keys(digits, real) for h in self.sharp_heads])

    def main_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """The rows as the compiled model reads them (every token's digit in the case's own tokens)."""
        return self.main.token_ids(self.vocab, self.n_digits)[tokens]

    def interchange(self, tokens: torch.Tensor, mask: torch.Tensor, source_values: torch.Tensor,
                    select: torch.Tensor) -> torch.Tensor:
        visible = [self.all_nodes.index(n) for n in self.nodes]
        full = torch.zeros(*select.shape[:-1], len(self.all_nodes), dtype=torch.bool)
        full[..., visible] = select
        main_src, side_src = self._unpack(source_values)
        main_labels = self.main.high().interchange(self.main_tokens(tokens), mask, main_src,
                                                   full[..., self._main_order()])
        side = self._side_values(tokens, mask, side_src, full[..., self._side_order()])
        return self._labels(tokens, main_labels, side)


@dataclasses.dataclass(frozen=True)
class BundleSampler:
    """The case's own inputs, each row written in the tokens of a part drawn by its share (Part.share;
    the case's share is its number of nodes); `only`: every row in that part's tokens."""

    case: Case
    prefixes: tuple[str | None, ...]
    """Each part's token prefix (None: the case's own tokens)."""
    shares: tuple[float, ...]
    only: int | None = None

    def __call__(self, rng: np.random.Generator, n: int) -> list[tuple[Any, ...]]:
        seqs = self.case.sample(n, int(rng.integers(0, 2**31 - 1)))
        if self.only is not None:
            which = np.full(n, self.only)
        else:
            which = rng.choice(len(self.shares), size=n, p=[w / sum(self.shares) for w in self.shares])
        digit = {v: d for d, v in enumerate(self.case.vocab)}
        return [seq if self.prefixes[k] is None else tuple(f"{self.prefixes[k]}{digit[v]}" for v in seq)
                for seq, k in zip(seqs, which)]


@dataclasses.dataclass(frozen=True)
class BundleReference:
    """The label function of a bundle's inputs, written apart from the model: the case's own program
    (rasp.evaluate) on rows in its tokens, a side task's reference on its digits."""

    case: Case
    parts: tuple[Part, ...]

    def __call__(self, seq: tuple[Any, ...]) -> list[Any]:
        if all(t in self.case.vocab for t in seq):
            return self.case.evaluate(seq)
        for part in self.parts:
            if all(isinstance(t, str) and t.startswith(part.prefix) for t in seq):
                return [f"{part.prefix}{v}" for v in part.reference(tuple(int(t[len(part.prefix):]) for t in seq))]
        raise CaseError(f"input {seq!r} has tokens of no task of the bundle")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CaseBundle:
    """A compiled case and its side tasks on one low-level model: the training task and a view per task
    (the same interface as planted.multi_task.Bundle, which zoo.multi_task_entry reads)."""

    name: str
    case: Case
    graph: Circuit
    """The case's high-level graph (its own node names), as shipped."""
    hl_layers: int
    hl_heads: int
    output_vocab: tuple[Any, ...]
    """The compiled model's output classes, as shipped."""
    n_layers: int
    n_heads: int
    d_head: int = D_HEAD
    lr: float | None = 0.003
    epochs: int | None = 750
    n_train: int | None = 8192
    strict_edges: bool = False
    """Node-level strictness, each view's edge labels measured and reported (as planted.bundles'
    bundles: with edge-level strictness their cross-task edges never met)."""
    compiled: CompiledMain = dataclasses.field(compare=False, repr=False, default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.compiled is None:
            object.__setattr__(self, "compiled", CompiledMain(self.case, self.graph, self.output_vocab))

    @property
    def placement(self) -> dict[str, str]:
        """The case's nodes on their components: InterpBench's rule (same layer, a head on a head drawn with
        the bundle's own seed), as a single-task entry's correspondence."""
        corr = make_correspondence(self.graph, {"n_layers": self.hl_layers, "n_heads": self.hl_heads},
                                   {"n_layers": self.n_layers, "n_heads": self.n_heads},
                                   zlib.crc32(self.name.encode()))
        return {hl: lls[0] for hl, lls in corr.mapping.items()}

    @property
    def parts(self) -> tuple[Part, ...]:
        """The side tasks (planted.side_tasks.fill) on the components the case leaves."""
        return fill(self.n_layers, self.n_heads, set(self.placement.values()), len(self.case.vocab),
                    self.case.max_seq_len)

    @property
    def main_key(self) -> str:
        return f"case-{self.case.id}"

    @property
    def view_names(self) -> tuple[str, ...]:
        return (f"{self.name}.{self.main_key}", *(f"{self.name}.{p.key}" for p in self.parts))

    def model(self, view: int | None = None) -> CaseBundleModel:
        parts, place = self.parts, self.placement
        V = len(self.case.vocab)
        offsets = tuple(V * k for k in range(len(parts) + 1))
        sides = sorted((Node(name=n.name, parents=n.parents, fn=LocalDigits(n.fn, offsets, V), label=n.label,
                             reads_input=n.reads_input) for p in parts for n in p.model.node_list),
                       key=lambda n: node_sort_key(n.name))
        lift = {INPUT: INPUT, LOGITS: LOGITS, **place}
        main_edges = tuple((lift[a], lift[b]) for a, b in self.graph.edges) + ((INPUT, LOGITS),)
        part_edges = (main_edges, *(tuple(p.model.graph().edges) + ((INPUT, LOGITS),) for p in parts))
        part_nodes = (tuple(sorted(place.values(), key=node_sort_key)),
                      *(tuple(p.model.nodes) for p in parts))
        labels = {place[n]: f"{self.main_key}: {self.graph.labels.get(n, n)}" for n in self.graph.nodes}
        labels.update({n.name: f"{p.key}: {n.label}" for p in parts for n in p.model.node_list})
        sizes = [len(self.output_vocab), *(p.model.n_values for p in parts)]
        return CaseBundleModel(main=self.compiled, placement=place, sides=tuple(sides), offsets=offsets, n_digits=V,
                               outputs=tuple(p.model.nodes[-1] for p in parts),
                               out_offsets=tuple(sum(sizes[:k]) for k in range(len(sizes))),
                               part_nodes=part_nodes, part_edges=part_edges, part_labels=labels,
                               n_values=sum(sizes), vocab=self.encoding().input_vocab, view=view)

    def encoding(self) -> Encoding:
        tokens = (*self.case.vocab, *(t for p in self.parts for t in p.tokens()))
        answers = (*self.output_vocab, *(f"{p.prefix}{v}" for p in self.parts for v in range(p.model.n_values)))
        if len(set(tokens) | {BOS, PAD}) != len(tokens) + 2 or len(set(answers)) != len(answers):
            raise CaseError(f"bundle {self.name}: a side task's tokens or answers collide with the case's")
        return Encoding(input_vocab=(BOS, *tokens, PAD), output_vocab=answers, max_seq_len=self.case.max_seq_len,
                        task_kind="classification")

    def task(self, view: int | None = None) -> PlantedTask:
        """The training task (view None: rows of every task) or view `view`'s benchmark task."""
        parts = self.parts
        prefixes = (None, *(p.prefix for p in parts))
        shares = (float(len(self.graph.nodes)), *(p.share for p in parts))
        name = self.name if view is None else self.view_names[view]
        what = self.case.description if view in (None, 0) else parts[view - 1].description
        description = (f"{what} One task of the multi-task bundle {self.name}: InterpBench's case {self.case.id} "
                       f"beside {len(parts)} side tasks on the other components (planted.case_bundles).")
        case = Case(id=name, name=name.replace("-", "_").replace(".", "_"), family="planted", description=description,
                    task_kind="classification", vocab=self.encoding().input_vocab[1:-1],
                    max_seq_len=self.case.max_seq_len, min_seq_len=self.case.min_seq_len, causal=self.case.causal,
                    build_program=NoProgram(name), sampler=BundleSampler(self.case, prefixes, shares, view),
                    notes=f"Multi-task planted model around case {self.case.id} (planted.case_bundles); "
                          f"see `zoo show planted {name}`.")
        return PlantedTask(case=case, encoding=self.encoding(), model=self.model(view), n_layers=self.n_layers,
                           n_heads=self.n_heads, d_head=self.d_head, reference=BundleReference(self.case, parts),
                           lr=self.lr, epochs=self.epochs, n_train=self.n_train, fixed_placement=True,
                           strict_edges=self.strict_edges, bundle=None if view is None else self,
                           view_tasks=self.views if view is None else None,
                           training=TRAINING if view is None else ())

    def views(self) -> tuple[PlantedTask, ...]:
        return tuple(self.task(k) for k in range(len(self.view_names)))


def case_bundle(case_id: str, compiled: Any = None) -> CaseBundle:
    """The bundle around built-in case `case_id` (`mt-case-<id>`), from the shipped catalogue; `compiled`:
    the case's CompiledCase if the caller has it (else compiled on first use)."""
    from rasp_programs.lookup import get_case
    from rasp_programs.summary import shipped_row

    row = shipped_row(case_id)
    case = get_case(case_id)
    if row is None or case.task_kind != "classification":
        raise CaseError(f"case {case_id}: a case bundle needs a built-in classification case")
    graph = Circuit.build(row["graph"]["nodes"], [tuple(e) for e in row["graph"]["edges"]], row["graph"]["labels"])
    layout = NodeLayout(max(2, row["n_layers"]), max(4, row["n_heads"]))  # InterpBench's rule (siit.correspondence)
    output_vocab = tuple(row["output_vocab"])
    return CaseBundle(name=f"{PREFIX}{case_id}", case=case, graph=graph, hl_layers=row["n_layers"],
                      hl_heads=row["n_heads"], output_vocab=output_vocab, n_layers=layout.n_layers,
                      n_heads=layout.n_heads, compiled=CompiledMain(case, graph, output_vocab, compiled))
