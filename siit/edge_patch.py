"""One forward pass's edge patching (siit.transformer.Patch.edges): reader r reads sender u's replacement
instead of what u wrote in this run, every other reader of u what u wrote.

What a reader adds to the residual stream it reads is the difference replacement - written of every
patched sender (the projections are linear, so siit.transformer projects only the differences).
Readers no row patches add nothing and cost nothing. (Validation's single edges, siit.edge_bounds,
compute one reader from its block on instead: Transformer.read_once.)
"""

from __future__ import annotations

from typing import Any

import torch

from siit.edges import EdgeLayout


class EdgePatch:
    """The patched senders' differences so far, and each reader's input with them added (reader r
    reads x + sum over patched u of (replacement_u - written_u)).

    Rows that patch one edge each (the checks' single edges, siit.metrics.Evaluator.edge_siia) keep only
    their own sender's difference (`picked`, [rows, T, d]) and place it at their reader; other rows
    keep every sender's difference and sum them through a batched matmul. The two give the same
    values (a one-hot sum is exact).

    `summed` (a run that sums its heads from z, Transformer.forward(sum_heads=True), with rows that
    patch several edges): a block's heads are kept as their z and replacements (`wrote_heads`,
    _HeadDiffs), never as per-head differences [rows, T, H, d_model], which on a wide model are H
    times the residual stream; the same values to float rounding."""

    def __init__(self, patch: Any, x: torch.Tensor, first: int, n_layers: int, n_heads: int,
                 summed: bool = False) -> None:
        if first != 0 or patch.input_values is None:
            raise ValueError("edge patching runs from the embedding and needs the input's replacement")
        self.layout = EdgeLayout(n_layers, n_heads)
        self.n = x.shape[0]
        self.a, self.b = patch.edge_rows or (0, self.n)
        self.n_readers = patch.edges.shape[2]
        self.active = patch.edges.any(dim=0).any(dim=0).tolist()  # per reader: does any row patch it?
        where = patch.edges.nonzero()  # [k, 3]: row, sender, reader (row-major)
        self.single = where.shape[0] == patch.edges.shape[0] and bool((where[:, 0] == torch.arange(
            where.shape[0], device=where.device)).all())
        # differences carry no gradient: edge strictness teaches readers to ignore what they must
        # not read, not senders to stop varying (through them it flattened case 29's busy nodes,
        # distractor R² stuck at 0.78); node strictness still reaches the senders
        own_input = x[self.a : self.b]
        if self.single:
            self.sender, self.reader = where[:, 1], where[:, 2]
            self.picked = torch.zeros(self.b - self.a, *x.shape[1:], dtype=x.dtype, device=x.device)
            self.written = 0
            self._keep(patch.input_values[:, :, None], own_input[:, :, None])
        else:
            self.edges = patch.edges.to(x.dtype)  # [b - a, U, R]
            # per sender [b - a, T, d]; summed, a block's heads are one _HeadDiffs
            self.diffs: list[Any] = [(self._rows(patch.input_values) - own_input).detach()]
        self.summed = summed and not self.single

    def _rows(self, values: torch.Tensor) -> torch.Tensor:
        """The replacement values of the edge rows (Patch.values' row r mod b rule)."""
        b = values.shape[0]
        if self.b - self.a == b and self.a % b == 0:  # the edge rows are one whole copy: no repeat
            return values
        return repeat_rows_to(values, self.n)[self.a : self.b]

    def _keep(self, values: torch.Tensor, own: torch.Tensor) -> None:
        """Single mode: the next values.shape[2] senders were written (values [b, T, n, d] their
        replacements under the row r mod b rule, own [b - a, T, n, d] what the edge rows wrote):
        each row whose sender is one of them keeps its difference."""
        k = values.shape[2]
        rows = ((self.sender >= self.written) & (self.sender < self.written + k)).nonzero().flatten()
        if rows.numel():
            slot, at = self.sender[rows] - self.written, rows + self.a
            self.picked[rows] = (values[at % values.shape[0], :, slot] - own[rows, :, slot]).detach()
        self.written += k

    def wrote_heads(self, values: torch.Tensor, z: torch.Tensor, patched: torch.Tensor, W_O: torch.Tensor) -> None:
        """Summed: a block's heads were just written, values [b, T, H, d] their replacements, z
        [B, H, T, k] and patched bool [B, H] (node patching: such a head wrote its replacement)."""
        rows = slice(self.a, self.b)
        self.diffs.append(_HeadDiffs(self._rows(values).detach(), z[rows].detach(),
                                     (~patched[rows]).to(z.dtype), W_O.detach()))

    def wrote(self, values: torch.Tensor, out: torch.Tensor) -> None:
        """Senders of one kind just written: values [b, T, n, d] (replacements), out [B, T, n, d]."""
        if self.single:
            self._keep(values, out[self.a : self.b])
        else:
            self.diffs += list((self._rows(values) - out[self.a : self.b]).detach().unbind(2))

    def _delta(self, readers: slice) -> torch.Tensor | None:
        """[rows, T, r, d]: what each reader of `readers` adds to the residual stream it reads; None
        where no row patches any of them."""
        if not any(self.active[readers]):
            return None
        lo, hi = readers.start, readers.stop if readers.stop is not None else self.n_readers
        if self.single:
            out = self.picked.new_zeros(self.picked.shape[0], self.picked.shape[1], hi - lo, self.picked.shape[2])
            rows = ((self.reader >= lo) & (self.reader < hi)).nonzero().flatten()
            out[rows, :, self.reader[rows] - lo] = self.picked[rows]
            return out
        if self.summed:
            return self._summed_delta(lo, hi)
        diffs = torch.stack(self.diffs, dim=2)  # [rows, T, u, d]
        return torch.einsum("bur,btud->btrd", self.edges[:, : diffs.shape[2], lo:hi], diffs)

    def _parts(self, lo: int, hi: int):
        """Summed: (part, w [rows, count, r]) of each kept sender part (a single difference [rows, T, d]
        or a block's _HeadDiffs) that some row patches into readers lo..hi-1."""
        u = 0
        for part in self.diffs:
            count = part.count if isinstance(part, _HeadDiffs) else 1
            w = self.edges[:, u : u + count, lo:hi]
            u += count
            if bool(w.any()):
                yield part, w

    def _summed_delta(self, lo: int, hi: int) -> torch.Tensor:
        """_delta over senders kept as single differences and as blocks of heads (_HeadDiffs)."""
        out = None
        for part, w in self._parts(lo, hi):
            c = part.delta(w) if isinstance(part, _HeadDiffs) else w[:, 0, None, :, None] * part[:, :, None]
            out = c if out is None else out + c
        if out is None:  # patched readers whose senders are all still to come (none, in forward order)
            first = self.diffs[0]
            return first.new_zeros(first.shape[0], first.shape[1], hi - lo, first.shape[2])
        return out

    def head_deltas(self, layer: int, attn: Any = None) -> tuple[tuple[int, int], Any] | None:
        """((a, b), delta [b - a, T, 3H, d]) what block `layer`'s q, k and v readers add to x; summed
        and given the block's weights (attn), the differences of q, k and v themselves, a tuple of
        three [b - a, H, T, k], made without the [b - a, T, 3H, d] one (3H times the residual)."""
        r0, H = self.layout.first_reader(layer), self.layout.n_heads
        if self.summed and attn is not None:
            delta = self._projected(r0, H, attn) if any(self.active[r0 : r0 + 3 * H]) else None
        else:
            delta = self._delta(slice(r0, r0 + 3 * H))
        return None if delta is None else ((self.a, self.b), delta)

    def _projected(self, r0: int, H: int, attn: Any) -> tuple[torch.Tensor, ...] | None:
        """Summed: the q, k, v differences of the 3H head readers from r0 on, each [rows, H, T, k]:
        a single sender's difference is projected once per head and weighted per row; a block of
        heads (readers in a later block) sums its differences first (_HeadDiffs.delta)."""
        Ws = (attn.W_Q, attn.W_K, attn.W_V)
        out = [None, None, None]
        for part, w in self._parts(r0, r0 + 3 * H):  # w [rows, count, 3H]
            full = part.delta(w) if isinstance(part, _HeadDiffs) else None  # [rows, T, 3H, d]
            for i, W in enumerate(Ws):
                if full is None:  # one sender: (diff @ W_h) times each row's weight for reader h
                    p = torch.einsum("btd,hdk->bhtk", part, W) * w[:, 0, i * H : (i + 1) * H, None, None]
                else:
                    p = torch.einsum("bthd,hdk->bhtk", full[:, :, i * H : (i + 1) * H], W)
                out[i] = p if out[i] is None else out[i] + p
        return None if out[0] is None else tuple(out)  # every part computes all three, or none does

    def mlp_input(self, x: torch.Tensor, layer: int) -> torch.Tensor:
        r = self.layout.first_reader(layer) + 3 * self.layout.n_heads
        delta = self._delta(slice(r, r + 1))
        return x if delta is None else add_rows(x, self.a, self.b, delta[:, :, 0])

    def logits_input(self, x: torch.Tensor) -> torch.Tensor:
        delta = self._delta(slice(self.n_readers - 1, None))
        return x if delta is None else add_rows(x, self.a, self.b, delta[:, :, 0])


class _HeadDiffs:
    """A block's heads as senders of a summed run: each head's replacement minus what it wrote,
    z_h W_O[h], kept as z (d_head wide) and the replacements, so a reader's sum over the heads is two
    products instead of H differences of d_model each."""

    FEW_READERS = 4
    """Up to this many readers (an MLP, the logits) the heads' writes are summed per reader from z;
    more (the next block's q, k and v) make the per-head outputs once."""

    def __init__(self, values: torch.Tensor, z: torch.Tensor, keep: torch.Tensor, W_O: torch.Tensor) -> None:
        self.values, self.z, self.keep, self.W_O = values, z, keep, W_O  # [rows, T, H, d], [rows, H, T, k], [rows, H]
        self.count = z.shape[1]

    def delta(self, w: torch.Tensor) -> torch.Tensor:
        """[rows, T, r, d]: sum over heads h of w[:, h, r] (replacement_h - written_h); w [rows, H, r]."""
        w = w * self.keep[:, :, None]  # a node-patched head wrote its replacement: no difference
        replaced = torch.einsum("btud,bur->btrd", self.values, w)
        if w.shape[2] <= self.FEW_READERS:
            written = torch.stack([torch.einsum("bhtk,hkd->btd", self.z * w[:, :, r, None, None], self.W_O)
                                   for r in range(w.shape[2])], dim=2)
        else:
            written = torch.einsum("bur,btud->btrd", w, torch.einsum("bhtk,hkd->bthd", self.z, self.W_O))
        return replaced - written


def add_rows(x: torch.Tensor, a: int, b: int, delta: torch.Tensor) -> torch.Tensor:
    """x with delta added to rows a..b-1 (out of place, for autograd)."""
    if (a, b) == (0, x.shape[0]):
        return x + delta
    return torch.cat([x[:a], x[a:b] + delta, x[b:]])


def repeat_rows_to(x: torch.Tensor, batch: int) -> torch.Tensor:
    """[b, ...] -> [batch, ...], b = batch or a divisor of it (row r takes row r mod b)."""
    b = x.shape[0]
    if b == batch:
        return x
    if batch % b:
        raise ValueError(f"a start state of {b} rows does not divide the batch of {batch}")
    return x.repeat(batch // b, *([1] * (x.dim() - 1)))
