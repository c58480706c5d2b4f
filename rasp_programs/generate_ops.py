"""The program sampler behind rasp_programs.generate: typed RASP operations that Tracr compiles
exactly, grown as a spine that reaches a target layer count, with side branches for width.

Every SOp carries the sublayer where Tracr can first compute it (2l: attention of layer l, 2l+1:
its MLP; inputs -1): a Map or SequenceMap is an MLP after its inputs, an Aggregate a head after
them, a SelectorWidth a head and the MLP after it. The spine grows from the inputs until its head
reaches the last layer of the target; other operands come from earlier SOps or fresh side
branches over tokens and indices. The compiled model's real layer and head counts are checked
afterwards (rasp_programs.generate_check); these estimates only steer the draw.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
from tracr.rasp import rasp

OpKind = Literal["map", "sequence_map", "aggregate", "numerical_aggregate", "selector_width",
                 "linear_sequence_map"]
OP_KINDS: tuple[OpKind, ...] = ("map", "sequence_map", "aggregate", "numerical_aggregate",
                                "selector_width", "linear_sequence_map")
_SPINE_KINDS: tuple[OpKind, ...] = ("map", "sequence_map", "aggregate", "selector_width")
_COMPARISONS = (rasp.Comparison.EQ, rasp.Comparison.NEQ, rasp.Comparison.LT, rasp.Comparison.LEQ,
                rasp.Comparison.GT, rasp.Comparison.GEQ, rasp.Comparison.TRUE)
_COMPARISON_P = np.array([3, 1, 2, 2, 2, 2, 1], dtype=float) / 13
_MAX_TABLE = 48  # largest SequenceMap input product: Tracr's MLP has one hidden unit per pair
_SIDE_P = 0.35  # chance that an extra operand is a fresh side branch rather than an earlier SOp


class GenerationFailed(ValueError):
    """The draw found no program with the requested shape (a reject reason, not a bug)."""


@dataclasses.dataclass(frozen=True)
class Table:
    """A Map / SequenceMap function given by its table (total on the input's value set)."""

    pairs: tuple[tuple[Any, Any], ...]
    _lookup: dict = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_lookup", dict(self.pairs))

    def __call__(self, *args: Any) -> Any:
        return self._lookup[args[0] if len(args) == 1 else args]


@dataclasses.dataclass(frozen=True)
class Indicator:
    """1 for members, else 0: the 0/1 values a numerical Aggregate may average."""

    members: frozenset

    def __call__(self, x: Any) -> int:
        return 1 if x in self.members else 0


@dataclasses.dataclass(frozen=True)
class IndexPick:
    """Select predicate key == target(query) over indices with 0 <= target(q) <= q: every query
    selects exactly one key on any input, so a categorical Aggregate copies and is never empty."""

    kind: Literal["back", "first", "half"]
    offset: int = 0

    @property
    def name(self) -> str:  # shown by describe_program
        return {"back": f"k==max(q-{self.offset},0)", "first": "k==0", "half": "k==q//2"}[self.kind]

    def __call__(self, key: int, query: int) -> bool:
        target = {"back": max(query - self.offset, 0), "first": 0, "half": query // 2}[self.kind]
        return key == target


_PICKS = (IndexPick("back", 1), IndexPick("back", 2), IndexPick("first"), IndexPick("half"))


@dataclasses.dataclass(frozen=True)
class Node:
    """A SOp of the draw with what the sampler needs to type the next operation."""

    expr: Any
    kind: str
    values: tuple[Any, ...]
    """Possible values (categorical); () for numerical SOps."""
    sub: int
    """Sublayer where Tracr can compute it: -1 inputs, 2l attention of layer l, 2l+1 its MLP."""
    vtype: str
    """"str" or "int" (categorical; selectors compare like with like) or "num"."""
    token_dep: bool
    """Depends on the tokens (not only on positions and length)."""

    @property
    def numerical(self) -> bool:
        return self.vtype == "num"


@dataclasses.dataclass(frozen=True)
class Sampled:
    """One draw: the program and what the case description says about it."""

    program: Any
    numerical: bool
    n_ops: int
    target_layers: int
    summary: str


def _attn_after(sub: int) -> int:
    return sub + 1 if sub % 2 else sub + 2


def _mlp_after(sub: int) -> int:
    return sub + 2 if sub % 2 else sub + 1


class _Draw:
    """The state of one draw (local to sample_program): the pool of SOps and head counts."""

    def __init__(self, rng: np.random.Generator, vocab: Sequence[Any], max_seq_len: int,
                 weights: dict[str, int], width: int) -> None:
        self.rng, self.max_seq_len, self.weights, self.width = rng, max_seq_len, weights, width
        vtype = "str" if isinstance(vocab[0], str) else "int"
        self.tokens = Node(rasp.tokens, "input", tuple(vocab), -1, vtype, True)
        self.indices = Node(rasp.indices, "input", tuple(range(max_seq_len)), -1, "int", False)
        self.pool: list[Node] = [self.tokens, self.indices]
        self.heads: Counter[int] = Counter()
        self.count = 0

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def add(self, node: Node | None) -> Node | None:
        if node is not None:
            self.pool.append(node)
        return node

    def head_room(self, sub: int) -> bool:
        return self.heads[sub] < self.width

    # --- operations: each returns the new Node, or None where the operands do not fit ---

    def map(self, x: Node) -> Node | None:
        if x.numerical or len(x.values) < 2:
            return None
        k = int(self.rng.integers(2, min(len(x.values), 4) + 1))
        order = self.rng.permutation(len(x.values))
        outs = [int(i) for i in range(k)] + [int(v) for v in self.rng.integers(0, k, len(x.values) - k)]
        table = Table(tuple((x.values[j], outs[n]) for n, j in enumerate(order)))
        expr = rasp.categorical(rasp.Map(table, x.expr, simplify=False)).named(self.name("map"))
        return Node(expr, "map", tuple(range(k)), _mlp_after(x.sub), "int", x.token_dep)

    def sequence_map(self, x: Node, y: Node) -> Node | None:
        if x is y or x.numerical or y.numerical or len(x.values) * len(y.values) > _MAX_TABLE:
            return None
        pairs = [(a, b) for a in x.values for b in y.values]
        for _ in range(8):  # a table that uses both inputs and at least two outputs
            k = int(self.rng.integers(2, 5))
            outs = self.rng.integers(0, k, len(pairs))
            table = Table(tuple((p, int(o)) for p, o in zip(pairs, outs)))
            if _depends_on_both(table, x.values, y.values):
                break
        else:
            return None
        expr = rasp.categorical(rasp.SequenceMap(table, x.expr, y.expr)).named(self.name("seqmap"))
        values = tuple(sorted({int(o) for o in outs}))
        return Node(expr, "sequence_map", values, _mlp_after(max(x.sub, y.sub)), "int",
                    x.token_dep or y.token_dep)

    def aggregate(self, x: Node) -> Node | None:
        sub = _attn_after(x.sub)
        if x.numerical or not self.head_room(sub):
            return None
        picks = [p for p in _PICKS if x.token_dep or p.kind != "first"]  # first of a position-only SOp: constant
        pick = picks[int(self.rng.integers(len(picks)))]
        select = rasp.Select(rasp.indices, rasp.indices, pick).named(self.name("pick"))
        expr = rasp.categorical(rasp.Aggregate(select, x.expr)).named(self.name("copy"))
        self.heads[sub] += 1
        return Node(expr, "aggregate", x.values, sub, x.vtype, x.token_dep)

    def selector_width(self, keys: Node, queries: Node) -> Node | None:
        sub = _attn_after(max(keys.sub, queries.sub))
        if keys.vtype != queries.vtype or keys.numerical or not self.head_room(sub):
            return None
        cmp = self._comparison()
        select = rasp.Select(keys.expr, queries.expr, cmp).named(self.name("select"))
        expr = rasp.categorical(rasp.SelectorWidth(select)).named(self.name("width"))
        self.heads[sub] += 1
        return Node(expr, "selector_width", tuple(range(self.max_seq_len + 1)), sub + 1, "int",
                    cmp is not rasp.Comparison.TRUE and (keys.token_dep or queries.token_dep))

    def numerical_aggregate(self, x: Node, keys: Node, queries: Node) -> Node | None:
        flag_sub = _mlp_after(x.sub)
        sub = _attn_after(max(flag_sub, keys.sub, queries.sub))
        if x.numerical or len(x.values) < 2 or keys.vtype != queries.vtype or keys.numerical \
                or not self.head_room(sub):
            return None
        n_in = int(self.rng.integers(1, len(x.values)))
        members = frozenset(x.values[i] for i in self.rng.permutation(len(x.values))[:n_in])
        flag = rasp.numerical(rasp.Map(Indicator(members), x.expr, simplify=False)).named(self.name("flag"))
        cmp = self._comparison()
        select = rasp.Select(keys.expr, queries.expr, cmp).named(self.name("select"))
        expr = rasp.numerical(rasp.Aggregate(select, flag, default=0)).named(self.name("mean"))
        self.heads[sub] += 1
        return Node(expr, "numerical_aggregate", (), sub, "num", x.token_dep or (
            cmp is not rasp.Comparison.TRUE and (keys.token_dep or queries.token_dep)))

    def linear_sequence_map(self, x: Node, y: Node) -> Node | None:
        if x is y or not (x.numerical and y.numerical):
            return None
        a, b = [(1, -1), (1, 1), (0.5, 0.5), (1, 0.5)][int(self.rng.integers(4))]
        expr = rasp.numerical(rasp.LinearSequenceMap(x.expr, y.expr, a, b)).named(self.name("linear"))
        return Node(expr, "linear_sequence_map", (), _mlp_after(max(x.sub, y.sub)), "num",
                    x.token_dep or y.token_dep)

    def _comparison(self) -> Any:
        return _COMPARISONS[int(self.rng.choice(len(_COMPARISONS), p=_COMPARISON_P))]

    # --- operands ---

    def other(self, like: Node | None = None, exclude: Node | None = None) -> Node:
        """A categorical operand: a fresh side branch, or an earlier SOp (of like's value type)."""
        if self.rng.random() < _SIDE_P:
            side = self.side()
            if side is not None and (like is None or side.vtype == like.vtype) and side is not exclude:
                return side
        fits = [n for n in self.pool if not n.numerical and n is not exclude
                and (like is None or n.vtype == like.vtype)]
        return fits[int(self.rng.integers(len(fits)))] if fits else (like or self.tokens)

    def side(self) -> Node | None:
        """A one-operation branch over the inputs (adds width, not depth)."""
        kind = self.pick_kind(("map", "aggregate", "selector_width"))
        src = self.tokens if self.rng.random() < 0.7 else self.indices
        if kind == "map":
            return self.add(self.map(src))
        if kind == "aggregate":
            return self.add(self.aggregate(src))
        if kind == "selector_width":
            return self.add(self.selector_width(src, src))
        return None

    def pick_kind(self, kinds: Sequence[str]) -> str | None:
        w = np.array([self.weights.get(k, 0) for k in kinds], dtype=float)
        return None if w.sum() == 0 else kinds[int(self.rng.choice(len(kinds), p=w / w.sum()))]

    def kinds_in_order(self, kinds: Sequence[str]) -> list[str]:
        """The kinds with non-zero weight in a random order drawn by weight."""
        w = np.array([self.weights.get(k, 0) for k in kinds], dtype=float)
        live = [i for i in range(len(kinds)) if w[i] > 0]
        if not live:
            return []
        order = self.rng.choice(len(live), size=len(live), replace=False, p=w[live] / w[live].sum())
        return [kinds[live[i]] for i in order]

    # --- spine ---

    def grow(self, head: Node | None, limit: int) -> Node | None:
        """One spine operation on `head` (or on an input) whose sublayer is at most `limit`."""
        x = head or (self.tokens if self.rng.random() < 0.8 else self.indices)
        builders: dict[str, Callable[[], Node | None]] = {
            "map": lambda: self.map(x),
            "sequence_map": lambda: self.sequence_map(*self._ordered(x, self.other(exclude=x))),
            "aggregate": lambda: self.aggregate(x),
            "selector_width": lambda: self.selector_width(
                *self._ordered(x, x if self.rng.random() < 0.4 else self.other(like=x))),
        }
        for kind in self.kinds_in_order(_SPINE_KINDS):
            node = builders[kind]()
            if node is not None and node.sub <= limit:
                return self.add(node)
        return None

    def numerical_final(self, head: Node | None, bottom: int) -> Node | None:
        """A numerical Aggregate using `head` that lands at sublayer `bottom` (the last layer's
        attention), optionally averaged with a second one by a LinearSequenceMap."""
        head = head or self.tokens
        roles = ["value", "keys", "queries"]
        self.rng.shuffle(roles)
        for role in roles:
            if role == "value":
                keys = self.other()
                node = self.numerical_aggregate(head, keys, self.other(like=keys))
            else:
                other = self.other(like=head)
                value_src = self.other()
                k, q = (head, other) if role == "keys" else (other, head)
                node = self.numerical_aggregate(value_src, k, q)
            if node is not None and node.sub == bottom and node.token_dep:
                return self.add(node)
        return None

    def with_linear(self, final: Node, bottom: int) -> Node:
        """final, or final combined with a second numerical Aggregate (the mix decides)."""
        w_lin, w_agg = self.weights.get("linear_sequence_map", 0), self.weights.get("numerical_aggregate", 0)
        if w_lin == 0 or self.rng.random() >= w_lin / (w_lin + w_agg):
            return final
        keys = self.other()
        second = self.numerical_aggregate(self.other(), keys, self.other(like=keys))
        if second is None or second.sub > bottom:
            return final
        return self.add(self.linear_sequence_map(final, self.add(second))) or final

    def _ordered(self, a: Node, b: Node) -> tuple[Node, Node]:
        """The two operands in a random order (the spine may enter either side)."""
        return (a, b) if self.rng.random() < 0.5 else (b, a)


def _depends_on_both(table: Table, xs: Sequence[Any], ys: Sequence[Any]) -> bool:
    outs = {table(a, b) for a in xs for b in ys}
    on_x = any(len({table(a, b) for a in xs}) > 1 for b in ys)
    on_y = any(len({table(a, b) for b in ys}) > 1 for a in xs)
    return len(outs) > 1 and on_x and on_y


def sample_program(rng: np.random.Generator, *, layers: tuple[int, int], width: int,
                   weights: dict[str, int], vocab: Sequence[Any], max_seq_len: int,
                   output: str) -> Sampled:
    """One random program aimed at a layer count drawn from `layers` (GenerationFailed if none)."""
    draw = _Draw(rng, vocab, max_seq_len, weights, width)
    target = int(rng.integers(layers[0], layers[1] + 1))
    top, bottom = 2 * target - 1, 2 * target - 2
    numeric = weights.get("numerical_aggregate", 0) + weights.get("linear_sequence_map", 0)
    total = sum(weights.values())
    regression = target >= 2 and weights.get("numerical_aggregate", 0) > 0 and (
        output == "regression" or (output == "any" and rng.random() < numeric / total))
    head: Node | None = None
    for _ in range(4 * target + 4):
        if regression:
            final = draw.numerical_final(head, bottom)
            if final is not None:
                return _finish(draw.with_linear(final, bottom), target)
        elif head is not None and head.sub >= bottom and head.token_dep:
            return _finish(head, target)
        head = draw.grow(head, bottom - 1 if regression else top)
        if head is None:
            break
    raise GenerationFailed(f"no {'regression' if regression else 'classification'} program "
                           f"reached {target} layers")


def _finish(out: Node, target: int) -> Sampled:
    """The program ending in `out`, with its operation counts."""
    kinds: Counter[str] = Counter()
    seen, stack = set(), [out.expr]
    while stack:
        expr = stack.pop()
        if id(expr) in seen:
            continue
        seen.add(id(expr))
        stack.extend(expr.children)
        if isinstance(expr, rasp.SOp) and expr.children:
            kind = type(expr).__name__
            kinds[kind] += 1
    summary = "Operations: " + ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items())) + "."
    return Sampled(program=out.expr, numerical=out.numerical, n_ops=sum(kinds.values()),
                   target_layers=target, summary=summary)
