"""A trained model -> the same function with each head's weights rescaled (a reparametrisation).

Attention is invariant to W_Q -> c W_Q, W_K -> W_K / c (scores unchanged) and to W_V -> e W_V,
W_O -> W_O / e (head output unchanged), biases with their matrices. Training leaves these factors
arbitrary, so a head's weight norm reflects the optimiser's path, not what the head does. We set
the factors from draws per head, reproducibly, over the span of the model's node weight norms:
every head, in the circuit or not, gets its size from the same draw, so weight size says nothing
about circuit membership. Node outputs, logits and every hook downstream of the heads are unchanged (up
to float rounding); q, k, v and z are rescaled.
"""

from __future__ import annotations

import math
from collections.abc import Collection

import numpy as np
import torch

from siit.correspondence import NodeLayout
from siit.distractors import CIRCUIT_BAND, stratified
from siit.transformer import Transformer


def _sq(*tensors: torch.Tensor) -> float:
    return float(sum((t.double() ** 2).sum() for t in tensors))


def _place(names: list[str], circuit: Collection[str], spread: float, rng: np.random.Generator) -> np.ndarray:
    """Stratified factors for the heads `names` (the MLPs' value at a quantile drawn from
    CIRCUIT_BAND); circuit heads take strata whose rank lies inside the band, the others the rest."""
    factors = np.sort(stratified(len(names), spread, rng, rng.uniform(*CIRCUIT_BAND)))
    n = len(names)
    inside = [i for i in range(n) if CIRCUIT_BAND[0] <= (i + 0.5) / n <= CIRCUIT_BAND[1]]
    is_circuit = [name in circuit for name in names]
    picks = list(rng.permutation(inside))[: sum(is_circuit)] if inside else []
    rest = list(rng.permutation([i for i in range(n) if i not in picks]))
    out = np.empty(n)
    for j, member in enumerate(is_circuit):
        out[j] = factors[picks.pop() if member and picks else rest.pop()]
    return out


@torch.no_grad()
def rescale_heads(model: Transformer, layout: NodeLayout, *, seed: int, circuit: Collection[str] = (),
                  spread: float = 1.5) -> dict[str, list[float]]:
    """Rescale every head in place; returns {head: [qk factor, vo factor]}.

    Two draws per head, each stratified over a span of spread² around the median over MLPs (whose
    weights have no such symmetry; where the median falls is drawn from CIRCUIT_BAND), circuit heads
    on strata inside the band: the norm of W_O (times the MLPs' W_out norm) fixes the V/O
    factor; the head's total norm (times the MLPs' total norm) then fixes the Q/K factor where it
    can (a head whose V/O part already exceeds its draw keeps balanced Q/K)."""
    heads, parts = [], []
    for layer, block in enumerate(model.blocks):
        a = block.attn
        for h in range(layout.n_heads):
            heads.append((layer, h))
            parts.append((_sq(a.W_Q[h], a.b_Q[h]), _sq(a.W_K[h], a.b_K[h]), _sq(a.W_V[h], a.b_V[h]), _sq(a.W_O[h])))
    mlp_norms = [math.sqrt(_sq(b.mlp.W_in, b.mlp.b_in, b.mlp.W_out, b.mlp.b_out)) for b in model.blocks]
    mlp_out = [math.sqrt(_sq(b.mlp.W_out)) for b in model.blocks]
    rng = np.random.default_rng([seed, 0x5CA1E])
    names = [layout.name(layer, h) for layer, h in heads]
    # stratified around the MLPs' norms (MLPs, often in the circuit, rank inside the band among
    # heads), circuit heads on strata inside the band
    out_targets = float(np.median(mlp_out)) * _place(names, circuit, spread, rng)
    totals = float(np.median(mlp_norms)) * _place(names, circuit, spread, rng)
    factors: dict[str, list[float]] = {}
    for (layer, h), (q, k, v, o), out_target, total in zip(heads, parts, out_targets, totals):
        a = model.blocks[layer].attn
        # V/O: with ||W_O / e|| = w the pair's norm² is w² + ov / w²; the total draw comes first, so
        # w moves towards the balanced (smallest) pair until the pair fits under the total
        e = 1.0
        if o > 0 and v > 0:
            room = total * total - 2 * math.sqrt(q * k)
            w2 = float(out_target) ** 2
            if w2 + o * v / w2 > room:
                if room <= 2 * math.sqrt(o * v):
                    w2 = math.sqrt(o * v)  # balanced
                else:
                    roots = ((room - math.sqrt(room * room - 4 * o * v)) / 2, (room + math.sqrt(room * room - 4 * o * v)) / 2)
                    w2 = min(roots, key=lambda r: abs(math.log(r / w2)))
            e = math.sqrt(o / w2)
        vo = e * e * v + o / (e * e)
        # Q/K: stretch t of the balanced pair, norm² sqrt(qk)(t² + 1/t²) = total² - vo, if reachable
        c = 1.0
        if q > 0 and k > 0:
            x = max((total * total - vo) / (2 * math.sqrt(q * k)), 1.0)
            c = (k / q) ** 0.25 * math.sqrt(x + math.sqrt(x * x - 1.0))
        a.W_Q[h] *= c
        a.b_Q[h] *= c
        a.W_K[h] /= c
        a.b_K[h] /= c
        a.W_V[h] *= e
        a.b_V[h] *= e
        a.W_O[h] /= e
        factors[layout.name(layer, h)] = [round(c, 6), round(e, 6)]
    return factors
