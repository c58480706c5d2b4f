"""The free components of a model -> side tasks that occupy them (planted.case_bundles, issue 32 item 1).

A RASP case's circuit fills a few components of its low-level model; in a language model the others
would be doing work of their own that later components read and that reaches the unembedding. The side
tasks are that work: small causal models (planted.causal_model) over the same input digits as the case,
each placed on free components, each answering with classes of its own (planted.multi_task).

No two nodes may carry the same value at any position, or the trained model may answer one task through
the other's node, and no training separates them: a first layout with copies by absolute position (x_1,
x_2, ...) beside copies by offset (x_(i-1), x_(i-2), ...) never met its criterion, because x_(i-4) is x_1
at position 5, x_2 is x_(i-1) at position 3, and so on; with every other task's node patched at once,
the views of those copies moved 1-4% of their answers (SIIA .96-.998 after 5000 steps). So heads copy by
offset only (each (position, source) pair has one copy), and the others select their source by content,
from position 3 on (at position 2 the one earlier token is x_(i-1)). On digits x_1 .. x_n (position i
holds x_i; a head's value is 0 where it has no source):

    back k     y_i = x_(i-k)                                                     a head
    high, low  y_i = the latest earlier x_j in the upper / lower half of 0 .. V-1   a head (from position 3 on)
    even, odd  y_i = the latest earlier x_j that is even / odd                   a head (from position 3 on)
    lag        y_i = p_(i-1), p a head of an earlier layer                       a head reading a head
    plus       y_i = (x_i + h_i) mod V, h a `high` head                          an MLP reading a head below
    shift      y_i = (x_i + 1) mod V                                             an MLP alone (no head below)

Layout (`fill`), so that as many components as possible are read by another: each free MLP answers a
`plus` task over the lowest free head at or below its layer; then one chain of lag heads over
consecutive layers (`back 1`, x_(i-2), x_(i-3), ...: each head read by the next); then every remaining
head of layer 0 selects by content and every head above copies by offset, and once those run out it
stacks a lag head on a content task (`low-lag1`: y_i = the latest low digit before x_(i-1), a layer-0
head selecting and a later one carrying it a position on). Content selection stays in layer 0, where no
other task's write reaches a head's query and keys: a layer-1 head that selected the latest odd (or the
smallest) earlier digit kept missing a few rare inputs (four 5s before a 1) when every other task's node
was patched at once (SIIA "all" .9987-.9993 for thousands of steps), while every view with no such head
met. And content selection is by a property and recency, not by comparing digits: heads that took the
largest or smallest earlier digit missed rare inputs (three 0s before a 5, with bidirectional attention).
A head no function or lag is left for stays free: the bundle gives it a distractor (busy work no task
reads), as planted.bundles' mt-4x4 does; in the main cases' layouts none is left.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

import torch

from eval.core.circuit import head_node, mlp_node, node_sort_key, parse_node
from planted.causal_model import CausalModel, Node
from planted.multi_task import Part

Rule = Literal["high", "low", "even", "odd"]
CONTENT_FROM = 3
"""First position a content-selected head answers at (at position 2 its only source is x_(i-1))."""


@dataclasses.dataclass(frozen=True)
class Copy:
    """y_i = x_(i - back) where that is an input position, else 0."""

    back: int

    def __call__(self, values: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(values)
        out[:, self.back + 1:] = values[:, 1:values.shape[1] - self.back]
        return out

    def keys(self, values: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """bool [N, query, key]: x_(i-k) where it exists, else BOS (what a sharp head attends to)."""
        T = values.shape[1]
        pos = torch.arange(T)
        src = torch.where(pos > self.back, pos - self.back, 0)
        return (pos[None, :] == src[:, None])[None].expand(values.shape[0], -1, -1)

    @property
    def key(self) -> str:
        return f"back{self.back}"

    @property
    def label(self) -> str:
        return f"y = x_(i-{self.back}) from position {self.back + 1} on (0 before)"

    def reference(self, seq: Sequence[int]) -> list[int]:
        return [seq[i - self.back - 1] if i > self.back else 0 for i in range(1, len(seq) + 1)]


@dataclasses.dataclass(frozen=True)
class Select:
    """y_i = the latest earlier digit with a property (even, odd, in the upper half or in the lower half of
    0 .. n_values - 1; the halves overlap at the middle digit of an odd count), from position CONTENT_FROM
    on; 0 before and where none has it."""

    rule: Rule
    n_values: int

    def matches(self, x: torch.Tensor) -> torch.Tensor:
        """bool: which digits have the property."""
        return {"even": torch.remainder(x, 2) == 0, "odd": torch.remainder(x, 2) == 1,
                "high": x >= self.n_values // 2, "low": x <= (self.n_values - 1) // 2}[self.rule]

    def __call__(self, values: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        out, sources = self._select(values, real)
        return torch.where(sources.any(-1), out, torch.zeros_like(out))

    def keys(self, values: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """bool [N, query, key]: the selected earlier position, else BOS (what a sharp head attends to)."""
        _, sources = self._select(values, real)
        bos = torch.zeros_like(sources)
        bos[..., 0] = True
        return torch.where(sources.any(-1, keepdim=True), sources, bos)

    def _select(self, values: torch.Tensor, real: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(long [N, i] the selected digit, bool [N, i, j] the position j holding it), from position
        CONTENT_FROM on (no position before)."""
        T = values.shape[1]
        pos = torch.arange(T)
        earlier = (pos[None, :] < pos[:, None]) & (pos[None, :] >= 1) & (pos[:, None] >= CONTENT_FROM)
        hits = earlier[None] & real[:, None, :] & self.matches(values)[:, None, :]  # [N, i, j]: 1 <= j < i
        latest = torch.where(hits, pos[None, None, :], torch.full_like(hits, -1, dtype=torch.long)).amax(-1)
        return values.gather(1, latest.clamp(min=0)), hits & (pos[None, None, :] == latest[..., None])

    @property
    def key(self) -> str:
        return self.rule

    @property
    def label(self) -> str:
        what = {"even": "even", "odd": "odd", "high": f">= {self.n_values // 2}",
                "low": f"<= {(self.n_values - 1) // 2}"}[self.rule]
        return f"y = the latest of x_1 .. x_(i-1) that is {what}, from position {CONTENT_FROM} on (0 before or if none)"

    def reference(self, seq: Sequence[int]) -> list[int]:
        has = {x: bool(self.matches(torch.tensor(x))) for x in set(seq)}
        return [next((x for x in reversed(seq[: i - 1]) if has[x]), 0) if i >= CONTENT_FROM else 0
                for i in range(1, len(seq) + 1)]


HeadFn = Copy | Select


@dataclasses.dataclass(frozen=True)
class Lag:
    """y_i = p_(i-1) (0 at position 1): a head that reads the head p of an earlier layer one position back."""

    def __call__(self, values: torch.Tensor, real: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(p)
        out[:, 2:] = p[:, 1:-1]
        return out

    def keys(self, values: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """bool [N, query, key]: position i - 1 from position 2 on, else BOS."""
        return Copy(back=1).keys(values, real)


@dataclasses.dataclass(frozen=True)
class Plus:
    """y_i = (x_i + h_i) mod V (h_i: a parent's value; none: 1)."""

    n_values: int

    def __call__(self, values: torch.Tensor, real: torch.Tensor, *parents: torch.Tensor) -> torch.Tensor:
        h = parents[0] if parents else torch.ones_like(values)
        return torch.remainder(values + h, self.n_values)


@dataclasses.dataclass(frozen=True)
class SideReference:
    """Reference labels of a side task, written without its causal model (planted.multi_task.Part.reference):
    its head function's values (or those `lag` positions back), or (x_i + those values, or 1) mod V."""

    head: HeadFn | None
    plus: int = 0
    """V for a plus / shift task (the answer adds the head's value, or 1, to x_i mod V); 0: the head's value."""
    lag: int = 0
    """The answer is the head's value this many positions back (0 where there is none)."""

    def __call__(self, seq: tuple[int, ...]) -> list[int]:
        if not self.plus:
            assert self.head is not None
            h = self.head.reference(seq)
            return [0] * min(self.lag, len(h)) + h[: len(h) - self.lag] if self.lag else h
        h = self.head.reference(seq) if self.head is not None else [1] * len(seq)
        return [(x + v) % self.plus for x, v in zip(seq, h)]


def _part(key: str, nodes: list[Node], reference: SideReference, n_values: int, description: str) -> Part:
    """A side task on the components its nodes are named for (placement: each node on itself); its rows are
    drawn in proportion to its nodes (Part.share), since IIT trains a node on its own task's rows."""
    model = CausalModel(node_list=tuple(sorted(nodes, key=lambda n: node_sort_key(n.name))), first_value_id=1,
                        n_values=n_values)
    return Part(key=key, prefix=f"{key}:", model=model, placement={n.name: n.name for n in nodes},
                reference=reference, n_values=n_values, description=description, share=float(len(nodes)))


def head_functions(max_len: int, n_values: int) -> list[HeadFn]:
    """Every function a side head may compute on inputs of up to max_len tokens, in the order they are given
    out: the copies by offset (each fires at some position), then the content-selected ones (high first:
    the plus task takes it)."""
    return [Copy(back=k) for k in range(1, max_len)] + [Select(r, n_values) for r in ("high", "low", "even", "odd")]


@dataclasses.dataclass
class _Free:
    """What `fill` has left to give out: free heads per layer and head functions."""

    heads: dict[int, list[str]]
    functions: list[HeadFn]

    def take_head(self, most: int) -> str | None:
        """The lowest free head at layer <= most."""
        return next((self.heads[l].pop(0) for l in range(most + 1) if self.heads[l]), None)

    def put_back(self, head: str) -> None:
        self.heads[parse_node(head).layer].insert(0, head)

    def take_function(self, kind: type) -> HeadFn | None:
        fn = next((f for f in self.functions if isinstance(f, kind)), None)
        if fn is not None:
            self.functions.remove(fn)
        return fn


def fill(n_layers: int, n_heads: int, occupied: set[str], n_values: int, max_len: int) -> tuple[Part, ...]:
    """Side tasks on every component of an n_layers x n_heads model outside `occupied` that a function is
    left for (see the module docstring); each task's values are digits 0 .. n_values - 1."""
    free = _Free(heads={l: [head_node(l, h) for h in range(n_heads) if head_node(l, h) not in occupied]
                        for l in range(n_layers)}, functions=head_functions(max_len, n_values))
    parts = [_mlp_task(mlp, free, n_values) for l in range(n_layers) if (mlp := mlp_node(l)) not in occupied]
    chain = _lag_chain(free, n_layers, max_len)
    if chain:
        k = len(chain)
        free.functions = [f for f in free.functions if not (isinstance(f, Copy) and f.back <= k)]
        parts.append(_part(f"lag{k}", chain, SideReference(Copy(back=k)), n_values,
                           f"y_i = x_(i-{k}) from position {k + 1} on (0 before), by {k} heads in series, "
                           "each reading the one below one position back."))
    content: list[list[Node]] = []  # single content-selected heads, then each with the lag heads stacked on it
    for l in range(n_layers):
        for head in free.heads[l]:
            # a head that selects by content sits in layer 0, where no other task's write reaches its query
            # and keys; above, copies by offset or lag heads (attention by position alone)
            fn = (free.take_function(Select) or free.take_function(Copy)) if l == 0 else free.take_function(Copy)
            if fn is not None and isinstance(fn, Select):
                content.append([Node(name=head, parents=(), fn=fn, reads_input=True, label=fn.label)])
            elif fn is not None:
                parts.append(_part(fn.key, [Node(name=head, parents=(), fn=fn, reads_input=True, label=fn.label)],
                                   SideReference(fn), n_values, f"{fn.label[0].upper()}{fn.label[1:]}, by one head."))
            else:  # stack a lag head on the content task whose top is lowest (and below this layer)
                below = [c for c in content if parse_node(c[-1].name).layer < l]
                if not below:
                    continue  # no function left: the bundle's distractor keeps the head busy
                task = min(below, key=lambda c: (parse_node(c[-1].name).layer, len(c)))
                task.append(Node(name=head, parents=(task[-1].name,), fn=Lag(),
                                 label=f"y = {task[-1].name}_(i-1) (0 at 1)"))
    parts += [_content_part(task, n_values) for task in content]
    return tuple(parts)


def _content_part(nodes: list[Node], n_values: int) -> Part:
    """A content-selected head's task, with the k lag heads stacked on it: y_i = its value k positions back."""
    fn, k = nodes[0].fn, len(nodes) - 1
    assert isinstance(fn, Select)
    if not k:
        return _part(fn.key, nodes, SideReference(fn), n_values, f"{fn.label[0].upper()}{fn.label[1:]}, by one head.")
    return _part(f"{fn.key}-lag{k}", nodes, SideReference(fn, lag=k), n_values,
                 f"y_i = h_(i-{k}), h_i {fn.label[4:]}: a head selects h, {k} head(s) in series carry it "
                 f"one position back each.")


def _mlp_task(mlp: str, free: _Free, n_values: int) -> Part:
    """A free MLP's task: it adds a content-selected head's value (the lowest free head at or below its
    layer) to the current digit; `shift` alone where no head or function is left."""
    head = free.take_head(parse_node(mlp).layer)
    fn = free.take_function(Select) if head is not None else None
    if head is None or fn is None:
        if head is not None:
            free.put_back(head)
        return _part(f"shift-{mlp}", [Node(name=mlp, parents=(), fn=Plus(n_values), reads_input=True,
                                           label=f"y = (x_i + 1) mod {n_values}")],
                     SideReference(None, n_values), n_values, f"y_i = (x_i + 1) mod {n_values}, by one MLP.")
    nodes = [Node(name=head, parents=(), fn=fn, reads_input=True, label=fn.label),
             Node(name=mlp, parents=(head,), fn=Plus(n_values), reads_input=True,
                  label=f"y = (x_i + {head}) mod {n_values}")]
    return _part(f"plus-{fn.key}", nodes, SideReference(fn, n_values), n_values,
                 f"y_i = (x_i + h_i) mod {n_values}, h_i {fn.label[4:]}: a head selects h, an MLP adds it.")


def _lag_chain(free: _Free, n_layers: int, max_len: int) -> list[Node]:
    """One chain of lag heads over consecutive layers from the lowest layer with a free head (`back 1`,
    then each head the one below one position back), or none where fewer than two layers have a head."""
    start = next((l for l in range(n_layers) if free.heads[l]), n_layers)
    chain: list[Node] = []
    for l in range(start, n_layers):
        if not free.heads[l] or len(chain) >= max_len - 1:
            break
        head = free.heads[l].pop(0)
        if not chain:
            chain.append(Node(name=head, parents=(), fn=Copy(back=1), reads_input=True, label=Copy(back=1).label))
        else:
            chain.append(Node(name=head, parents=(chain[-1].name,), fn=Lag(),
                              label=f"y = {chain[-1].name}_(i-1) = x_(i-{len(chain) + 1}) (0 before)"))
    if len(chain) == 1:  # no head above it: the head copies on its own below
        free.put_back(chain[0].name)
        return []
    return chain
