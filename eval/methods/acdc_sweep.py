"""ACDC's reverse topological sweep over the q/k/v edges, every τ of a grid at once -> the edges
each τ removes. Private to eval.methods.acdc, split off to keep each module readable.

One forward pass per edge decides it for every τ: the pass stacks one row block per distinct
circuit (τ whose removed sets are equal share one; τ for which the edge's reader is already cut off
from the logits remove the edge without a pass), each block patching its τ's removed edges plus
the edge on trial. What makes that pass cheap:

- It starts at the block of the edge's reader from the clean run's state (eval.patching.hooks.Start):
  nothing before that block is patched yet, since every removed edge goes into a later reader.
- A removed edge whose writer lies before the start block moves its reader's input by
  reference - clean, the same in every pass from that block: these moves are summed once per τ
  (eval.patching.hooks.Offsets, updated as edges are removed, and as the start block moves down a layer
  its writers' moves are taken back out because they become live). Only the removed edges from
  writers the pass itself recomputes are summed in it, through dense 0/1 weights per reader group
  on a layout made once per start block (eval.patching.hooks.GroupLayout), with no per-edge Python.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import torch

from eval.core.circuit import INPUT, LOGITS, mlp_node, promote
from eval.methods.edge_patching import reader_layer
from eval.patching import bare
from eval.patching.hooks import QKV, GroupKey, GroupLayout, GroupWeights, Offsets, feeds, order

Edge = tuple[str, str]
Metric = Callable[[torch.Tensor], torch.Tensor]
"""Logits of k row blocks [k, n, pos, d_vocab_out] -> the metric of each [k] (and of one block
[n, pos, d_vocab_out] -> a scalar): eval.methods.acdc.acdc_metric."""


class Sweep:
    """The state of one sweep: per τ, the removed edges as dense 0/1 weights per reader group, the
    summed moves of those whose writer lies before the current start block, and the metric."""

    def __init__(self, ctx: Any, edges: Sequence[Edge], taus: Sequence[float], metric: Metric, *,
                 max_rows: int) -> None:
        a, task = ctx.adapter, ctx.task
        self.ctx, self.a, self.taus, self.metric = ctx, a, tuple(taus), metric
        self.max_rows = max_rows  # rows per pass: max_rows // n circuits
        self.L, self.H, self.n = a.n_layers, a.n_heads, task.n
        T = len(taus)
        self.writers = (INPUT, *ctx.graph.components)  # forward order
        self.col = {w: i for i, w in enumerate(self.writers)}
        with torch.no_grad():
            clean = a.outputs(task.tokens, task.mask, self.writers)
            full = ctx.forward()
        # [writers, n, pos, d_model]: how far each writer's reference is from its clean output
        self.D = torch.stack([ctx.reference[w].expand_as(clean[w]) - clean[w] for w in self.writers])
        self.W_qkv = {l: torch.cat([a.attn[f"W_{x.upper()}"][l] for x in QKV]).to(self.D.dtype)
                      for l in range(self.L)}  # [3H, d_model, d_head]
        S, (n, p, d), dh = len(self.writers), self.D.shape[1:], int(a.attn["W_Q"].shape[-1])
        self.keys: list[GroupKey] = [("logits", 0)] + [(k, l) for l in range(self.L) for k in ("a", "m")]
        self.rem = {key: self.D.new_zeros(T, 3 * self.H if key[0] == "a" else 1, S) for key in self.keys}
        self.off_qkv = {l: self.D.new_zeros(T, n, p, 3, self.H, dh) for l in range(self.L)}
        self.off_resid = {r: self.D.new_zeros(T, n, p, d) for r in (LOGITS, *(mlp_node(l) for l in range(self.L)))}
        # Passes run written out (eval.patching.bare) where the model allows it, else through hooks.
        self.bare = ctx.bare
        if self.bare is not None:
            self.allowed = bare.key_mask(self.bare, task.mask, n, p, self.D.device)
        self.off_used: set[int | str] = set()  # offsets not all zero
        self.removed: list[set[Edge]] = [set() for _ in taus]
        outgoing: dict[str, int] = {}
        for src, _ in edges:
            outgoing[src] = outgoing.get(src, 0) + 1
        self.kept_out = [dict(outgoing) for _ in taus]  # node -> its outgoing edges not removed
        rng = random.Random(0)
        self.hash = {e: rng.getrandbits(64) for e in edges}  # a removed set's signature: XOR of these
        self.sig = [0] * T
        self.current = [float(metric(full))] * T
        self.start = self.L - 1
        self.layout = self._layout()

    # ---- the sweep ----

    def decide(self, edge: Edge) -> None:
        """Remove the edge for every τ whose metric grows by at most τ without it."""
        src, reader = edge
        start = min(reader_layer(reader, self.L), self.L - 1)
        while self.start > start:
            self._move_start(self.start - 1)
        key, row = bare.slot(reader, self.H)
        move = self._move(src, key, row)
        node, live = promote(reader), []
        for t in range(len(self.taus)):
            if node == LOGITS or self.kept_out[t][node] > 0:
                live.append(t)
            else:  # cut off from the logits: its input changes nothing
                self._remove(edge, t, move)
        if not live:
            return
        if not bool(move.any()):  # the edge moves nothing (say a query that reads none of the writer's
            for t in live:        # subspace, as in compiled models): removing it changes no metric
                self._remove(edge, t, move)
            return
        by_sig: dict[int, list[int]] = {}  # equal removed sets (by signature) -> one circuit, one block
        for t in live:
            by_sig.setdefault(self.sig[t], []).append(t)
        circuits = list(by_sig.values())
        per = max(1, self.max_rows // self.n)
        for i in range(0, len(circuits), per):
            batch = circuits[i:i + per]
            values = self._metrics(edge, move, [ts[0] for ts in batch])
            for ts, value in zip(batch, values):
                for t in ts:
                    if value - self.current[t] <= self.taus[t]:
                        self._remove(edge, t, move)
                        self.current[t] = value

    def _metrics(self, edge: Edge, move: torch.Tensor, taus: list[int]) -> list[float]:
        """The metric of each of these τ's circuits with the edge (moving its reader's input by
        `move`) removed as well: one pass."""
        _, reader = edge
        k, n, s = len(taus), self.n, self.start
        idx = torch.tensor(taus, device=self.D.device)
        qkv = {l: self.off_qkv[l].index_select(0, idx) for l in range(s, self.L) if l in self.off_used}
        resid = {r: self.off_resid[r].index_select(0, idx) for r in self.off_resid
                 if r in self.off_used and reader_layer(r, self.L) >= s}
        key, row = bare.slot(reader, self.H)
        if key[0] == "a":
            base = qkv.get(key[1], self.off_qkv[key[1]].new_zeros(k, *self.off_qkv[key[1]].shape[1:]))
            base[:, :, :, row // self.H, row % self.H] += move
            qkv[key[1]] = base
        else:
            r = _resid_reader(key)
            resid[r] = resid.get(r, self.off_resid[r].new_zeros(k, *self.off_resid[r].shape[1:])) + move
        used = [g for g in self.live_w if any(self.live_any[g][t] for t in taus)]
        # Written out, head groups come packed (cached): only the residual readers' rows are picked.
        weights = {g: self.live_w[g].index_select(0, idx) for g in used if self.bare is None or g[0] != "a"}
        with torch.no_grad():
            if self.bare is not None:
                packed = {g: self._packed(g, tuple(taus)) for g in used if g[0] == "a"}
                patches = bare.Patches(start=s, resid=self.ctx.starts[s].resid, reference=self.live_ref,
                                       weights=weights, packed=packed, qkv_offsets=qkv,
                                       resid_offsets={bare.slot(r, self.H)[0]: o for r, o in resid.items()})
                logits = bare.run(self.bare, patches, k, self.allowed)
            else:
                logits = self._hooked(k, weights, qkv, resid)
        return self.metric(logits.view(k, n, *logits.shape[1:])).cpu().tolist()  # [k]: every block at once

    def _rows(self, key: GroupKey, t: int) -> bare.Rows:
        """τ t's live weights of a head group, compacted (bare.compact): they change only when an
        edge into the group is removed, which for a head group after the start block is never."""
        if (key, t) not in self.rows_cache:
            self.rows_cache[(key, t)] = bare.compact(self.live_w[key][t])
        return self.rows_cache[(key, t)]

    def _packed(self, key: GroupKey, taus: tuple[int, ...]) -> bare.Packed | None:
        """The live weights of these τ's circuits in a head group, packed for one pass (bare.pack):
        kept while the group's weights stay (passes from one start block mostly repeat their τ)."""
        cache = self.pack_cache.setdefault(key, {})
        if taus not in cache:
            cache[taus] = bare.pack([self._rows(key, t) for t in taus], 3 * self.H)
        return cache[taus]

    def _hooked(self, k: int, weights: dict[GroupKey, torch.Tensor], qkv: dict[int, torch.Tensor],
                resid: dict[str, torch.Tensor]) -> torch.Tensor:
        """A pass's logits through eval.patching.hooks (models bare does not write out)."""
        ctx, task = self.ctx, self.ctx.task
        run = self.a.run(task.tokens.repeat(k, 1), task.mask.repeat(k, 1), reference=ctx.reference,
                         groups=GroupWeights(layout=self.layout, weights=weights),
                         offsets=Offsets(qkv={l: o.flatten(0, 1) for l, o in qkv.items()},
                                         resid={r: o.flatten(0, 1) for r, o in resid.items()}),
                         start=ctx.starts[self.start])
        return run.logits

    # ---- state updates ----

    def _move(self, writer: str, key: GroupKey, row: int) -> torch.Tensor:
        """How the edge writer -> (group, row) moves its reader's input when patched from the clean
        run: [n, pos, d_head] through W_Q/K/V for a head's input, [n, pos, d_model] otherwise."""
        D = self.D[self.col[writer]]
        return D @ self.W_qkv[key[1]][row] if key[0] == "a" else D

    def _remove(self, edge: Edge, t: int, move: torch.Tensor) -> None:
        """Remove the edge from τ t's circuit; `move` is what it adds to its reader's input (_move)."""
        src, reader = edge
        self.removed[t].add(edge)
        self.sig[t] ^= self.hash[edge]
        self.kept_out[t][src] -= 1
        key, row = bare.slot(reader, self.H)
        self.rem[key][t, row, self.col[src]] = 1.0
        if key in self.live_w and src in self.live_at:  # a live edge: also in the pass weights
            self.live_w[key][t, row, self.live_at[src]] = 1.0
            self.live_any[key][t] = True
            self.rows_cache.pop((key, t), None)
            self.pack_cache.pop(key, None)
        if order(src)[0] < self.start:  # its move is the same in every pass from here: add it once
            self._add(key, row, t, move)

    def _add(self, key: GroupKey, row: int, t: int, move: torch.Tensor) -> None:
        if key[0] == "a":
            self.off_qkv[key[1]][t, :, :, row // self.H, row % self.H] += move
            self.off_used.add(key[1])
        else:
            r = _resid_reader(key)
            self.off_resid[r][t] += move
            self.off_used.add(r)

    def _move_start(self, start: int) -> None:
        """Passes now start at block `start`: its writers' removed edges stop being fixed moves
        (the pass recomputes those writers), so their sums leave the offsets."""
        cols = torch.tensor([i for i, w in enumerate(self.writers) if order(w)[0] == start], device=self.D.device)
        D = self.D.index_select(0, cols).flatten(1)  # [writers of the block, n·pos·d_model]
        n, p, d = self.D.shape[1:]
        for key in self.keys:
            if key[0] != "logits" and key[1] <= start:
                continue  # read in the block or before: nothing removed into it yet
            w = self.rem[key].index_select(2, cols)  # [T, readers, writers of the block]
            if not bool(w.any()):
                continue
            moved = (w @ D).view(w.shape[0], w.shape[1], n, p, d)
            if key[0] == "a":
                T, H = w.shape[0], self.H
                proj = torch.matmul(moved.flatten(2, 3), self.W_qkv[key[1]].unsqueeze(0))  # [T, 3H, n·pos, d_head]
                self.off_qkv[key[1]] -= proj.view(T, 3, H, n, p, -1).permute(0, 3, 4, 1, 2, 5)
            else:
                self.off_resid[_resid_reader(key)] -= moved[:, 0]
        self.start = start
        self.layout = self._layout()

    def _layout(self) -> GroupLayout:
        """The groups a pass from the current start can patch live, with the writers it recomputes."""
        live = [w for w in self.writers if order(w)[0] >= self.start]
        sources = {}
        for key in self.keys:
            if key[0] != "logits" and key[1] < self.start:
                continue
            mine = tuple(w for w in live if feeds(w, key))
            if mine:
                sources[key] = mine
        dev = self.D.device
        # The removed live edges of each group, [T, readers, its live writers], kept up to date by
        # _remove: a pass selects its τ's rows instead of gathering them from rem every time.
        self.live_w = {key: self.rem[key].index_select(2, torch.tensor([self.col[w] for w in names], device=dev))
                       for key, names in sources.items()}
        self.live_any = {key: w.flatten(1).any(1).cpu().tolist() for key, w in self.live_w.items()}
        self.live_at = {w: i for i, w in enumerate(live)}  # a group's live writers are a prefix of live
        self.rows_cache: dict[tuple[GroupKey, int], bare.Rows] = {}
        self.pack_cache: dict[GroupKey, dict[tuple[int, ...], bare.Packed | None]] = {}
        if self.bare is not None:  # its groups read prefixes of the live writers (bare.Patches)
            assert all(names == tuple(live[:bare.prefix(self.bare, self.start, key)]) for key, names in sources.items())
            ref = self.ctx.reference
            self.live_ref = torch.stack([ref[w].expand(self.D.shape[1:]) for w in live])
        return GroupLayout.make(sources, self.L, device=dev)


def _resid_reader(key: GroupKey) -> str:
    """The reader of a group that reads the residual stream itself: `m{l}` or `logits`."""
    return LOGITS if key[0] == "logits" else mlp_node(key[1])

