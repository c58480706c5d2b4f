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
    values (a one-hot sum is exact)."""

    def __init__(self, patch: Any, x: torch.Tensor, first: int, n_layers: int, n_heads: int) -> None:
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
            self.diffs = [(self._rows(patch.input_values) - own_input).detach()]  # per sender [b - a, T, d]

    def _rows(self, values: torch.Tensor) -> torch.Tensor:
        """The replacement values of the edge rows (Patch.values' row r mod b rule)."""
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
        diffs = torch.stack(self.diffs, dim=2)  # [rows, T, u, d]
        return torch.einsum("bur,btud->btrd", self.edges[:, : diffs.shape[2], lo:hi], diffs)

    def head_deltas(self, layer: int) -> tuple[tuple[int, int], torch.Tensor] | None:
        r0, H = self.layout.first_reader(layer), self.layout.n_heads
        delta = self._delta(slice(r0, r0 + 3 * H))
        return None if delta is None else ((self.a, self.b), delta)

    def mlp_input(self, x: torch.Tensor, layer: int) -> torch.Tensor:
        r = self.layout.first_reader(layer) + 3 * self.layout.n_heads
        delta = self._delta(slice(r, r + 1))
        return x if delta is None else add_rows(x, self.a, self.b, delta[:, :, 0])

    def logits_input(self, x: torch.Tensor) -> torch.Tensor:
        delta = self._delta(slice(self.n_readers - 1, None))
        return x if delta is None else add_rows(x, self.a, self.b, delta[:, :, 0])


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
