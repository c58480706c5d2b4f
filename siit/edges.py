"""A model's shape + its labelled circuit -> the edges SIIT's edge-level strictness patches.

Node-level strictness ablates a node for every reader at once, so a busy node whose writes later
components cancel, or a circuit node that also writes along a path the high-level graph lacks,
passes it while single edges move the output (issue 36). Edge-level strictness patches single
edges: reader r of a row reads sender u's source-run output instead of its own run's, and the
output must not change unless (u, r) is a circuit edge.

Senders are indexed input, a0.h0, ..., a0.h{H-1}, m0, a1.h0, ... (U = 1 + L·(H+1)); readers per
layer l are the heads' q inputs, then k, then v, then m{l} (3H + 1 per layer), and last `logits`
(R = L·(3H+1) + 1). Names are eval.core.graph's q/k/v-granularity names, so the edges that training
patches are the ones `zoo.edge_exactness` measures.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import torch

from eval.core.circuit import INPUT, LOGITS, head_node, mlp_node, promote
from siit.correspondence import NodeLayout


@dataclasses.dataclass(frozen=True)
class EdgeLayout(NodeLayout):
    """Sender and reader indices of a model with `n_layers` blocks of `n_heads` heads."""

    @property
    def senders(self) -> tuple[str, ...]:
        return (INPUT,) + self.nodes

    @property
    def readers(self) -> tuple[str, ...]:
        out: list[str] = []
        for layer in range(self.n_layers):
            out += [head_node(layer, h, c) for c in ("q", "k", "v") for h in range(self.n_heads)]
            out.append(mlp_node(layer))
        return tuple(out) + (LOGITS,)

    @property
    def shape(self) -> tuple[int, int]:
        """(U, R): senders x readers, the last two axes of Patch.edges."""
        return 1 + self.n_layers * (self.n_heads + 1), self.n_layers * (3 * self.n_heads + 1) + 1

    def first_reader(self, layer: int) -> int:
        """Index of layer `layer`'s first reader (its head 0's q input); its MLP is 3H later."""
        return layer * (3 * self.n_heads + 1)

    def senders_before(self, layer: int, mlp: bool = False) -> int:
        """How many senders a head of block `layer` (or its MLP, which also reads the block's
        heads) can read: the input and every earlier node."""
        return 1 + layer * (self.n_heads + 1) + (self.n_heads if mlp else 0)

    def valid(self) -> torch.Tensor:
        """bool [U, R]: sender u precedes reader r (an edge of the model's graph)."""
        U, R = self.shape
        out = torch.zeros(U, R, dtype=torch.bool)
        for layer in range(self.n_layers):
            r0 = self.first_reader(layer)
            out[: self.senders_before(layer), r0 : r0 + 3 * self.n_heads] = True
            out[: self.senders_before(layer, mlp=True), r0 + 3 * self.n_heads] = True
        out[:, R - 1] = True
        return out

    def non_circuit(self, labelled: Iterable[tuple[str, str]]) -> torch.Tensor:
        """bool [U, R]: the model's edges outside the circuit; a circuit edge into a whole head
        (head granularity, as circuit.json labels) labels its q, k and v edges."""
        labelled = {(s, promote(d)) for s, d in labelled}
        out = self.valid()
        for u, s in enumerate(self.senders):
            for r, d in enumerate(self.readers):
                if (s, promote(d)) in labelled:
                    out[u, r] = False
        return out

    def names(self, mask: torch.Tensor) -> list[tuple[str, str]]:
        """The (sender, reader) names of the set entries of a bool [U, R] mask, sender-major."""
        return [(self.senders[u], self.readers[r]) for u, r in mask.nonzero().tolist()]


def edge_weights(layout: EdgeLayout, non_circuit: torch.Tensor | None,
                 metrics: dict | None) -> torch.Tensor | None:
    """float [E]: draw probabilities of the non-circuit edges (non_circuit's nonzero order) from
    the SIIA of the lagging ones at the last check that measured them (metrics["edges_below_1"],
    name -> SIIA): half uniform, half in proportion to each edge's shortfall (1 - SIIA), as IIT's
    node emphasis (siit.adaptation.node_weights); None (uniform) when no edge lags.

    A fixed extra weight per unit of shortfall (1 + 100 x shortfall, the first version) left an
    edge at SIIA 0.93 among ~100 with 7% of the one-edge rows: case 20's a0.h1->m0 stayed at
    0.90-0.97 from step 1200 to 8000. In proportion, the lagging edges share half the rows."""
    below = (metrics or {}).get("edges_below_1")
    if non_circuit is None or not below:
        return None
    names = [f"{s}->{r}" for s, r in layout.names(non_circuit)]
    shortfall = torch.tensor([1.0 - min(max(below.get(n, 1.0), 0.0), 1.0) for n in names], dtype=torch.float64)
    if float(shortfall.sum()) == 0.0:
        return None
    return (0.5 / len(names) + 0.5 * shortfall / shortfall.sum()).float()


MANY_EDGES = 131
"""At most this many edges, on average, in a "half" row: each edge is drawn w.p.
min(0.5, MANY_EDGES / E). Half of causal-bench-4x4's 479 edges at once collapsed its training
(accuracy 1.0 -> 0.47 within 100 steps, from step 425 on); the main cases (110 and 262 edges)
keep 0.5."""


def sample_edges(non_circuit: torch.Tensor, batch: int, sampling: str, gen: torch.Generator,
                 weights: torch.Tensor | None = None) -> torch.Tensor:
    """bool [B, U, R]: the non-circuit edges each strictness row patches: "one" edge (uniformly,
    or by `weights` [E] over non_circuit's nonzero entries), "half" (each edge w.p. 0.5, or
    MANY_EDGES / E when that is less), or "mixed" (half the rows each way)."""
    if not non_circuit.any():
        return non_circuit.expand(batch, *non_circuit.shape).clone()
    flat = non_circuit.flatten().nonzero().flatten()
    if sampling == "one":  # only what it needs from the generator
        return _one_hot(flat[_draw(flat.numel(), batch, gen, weights)], batch, non_circuit.shape)
    p = min(0.5, MANY_EDGES / flat.numel())
    half = (torch.rand(batch, *non_circuit.shape, generator=gen) < p) & non_circuit
    pick = flat[_draw(flat.numel(), batch, gen, weights)]
    if sampling == "half":
        return half
    rows = (torch.rand(batch, generator=gen) < 0.5)[:, None, None]
    return torch.where(rows, half, _one_hot(pick, batch, non_circuit.shape))


def _draw(n: int, batch: int, gen: torch.Generator, weights: torch.Tensor | None) -> torch.Tensor:
    if weights is None:
        return torch.randint(0, n, (batch,), generator=gen)
    return torch.multinomial(weights, batch, replacement=True, generator=gen)


def _one_hot(flat_index: torch.Tensor, batch: int, shape: torch.Size) -> torch.Tensor:
    out = torch.zeros(batch, shape.numel(), dtype=torch.bool)
    out[torch.arange(batch), flat_index] = True
    return out.reshape(batch, *shape)
