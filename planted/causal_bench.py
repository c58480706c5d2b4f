"""CAUSAL-BENCH's planted circuit (paper 004, §2.2) -> PlantedTasks at six scales.

The paper plants five components: two layer-0 heads attending to the operands, a layer-1 MLP
computing the function, a layer-2 head routing the result, a layer-3 MLP formatting the output,
and leaves the task open. Ours (values 0..4, inputs x_1..x_n of length 3 to 6, causal attention):

    operand_a  a0.h0  a_i = x_1                              (attends to position 1)
    operand_b  a0.h1  b_i = x_2, or x_1 at position 1        (attends to position 2, the latest of 1, 2)
    compute    m1     c_i = f(a_i, b_i) = (a*b + a + 2b) mod 5
    route      a2.h0  r_i = c_2, or c_1 at position 1        (moves the result computed at position 2)
    format     m3     y_i = (r_i + x_i) mod 5                (the output at every position)

Every node changes the output under some interchange: f depends on both operands, the format
step reads only the routed value (so interchanging the head that routes it changes y even though
the MLP at position i could compute c_i itself), and y reads r. The rest of the model (all other
heads and MLPs; every layer above 3) is out of the circuit and gets distractor tasks (siit).

`causal-bench-2x2` compresses the same five nodes into two layers (the paper does not say how):
operand heads a0.h0 / a0.h1, compute in m0 (the MLP reads its own layer's heads), route in a1.h0,
format in m1; a1.h1 is the one component outside the circuit.
"""

from __future__ import annotations

from typing import Any

import torch

from planted.causal_model import CausalModel, NoProgram, Node, PlantedTask
from rasp_programs.case import BOS, PAD, Case, CaseError
from rasp_programs.encoding import Encoding

N_VALUES = 5
MIN_LEN, MAX_LEN = 3, 6
SCALES = {"causal-bench-2x2": 2, "causal-bench-4x4": 4, "causal-bench-6x6": 6, "causal-bench-8x8": 8,
          "causal-bench-10x10": 10, "causal-bench-12x12": 12}
"""Name -> layers = heads per layer (the paper's Table 2 configurations)."""
DEEP_LR = 0.005
"""Default initial learning rate of the 10- and 12-layer models (PlantedTask.lr): 10x10 at the
trainer's 0.01 collapsed twice (accuracy 1.0 -> 0.36 within 50 steps) and met its criterion at 0.005.
12x12 takes it too, untested."""


def combine(a: Any, b: Any) -> Any:
    """The function the compute MLP implements (nonlinear: a product)."""
    return (a * b + a + 2 * b) % N_VALUES


def reference(seq: tuple[int, ...]) -> list[int]:
    """The label function, read off the task's definition (independent of the node code)."""
    out = []
    for i, x in enumerate(seq, start=1):
        routed = combine(seq[0], seq[1] if i >= 2 else seq[0])
        out.append((routed + x) % N_VALUES)
    return out


def _operand_a(digits: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    return digits[:, 1:2].expand_as(digits).clone()


def _operand_b(digits: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.arange(digits.shape[1]) >= 2, digits[:, 2:3], digits[:, 1:2])


def _compute(digits: torch.Tensor, real: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return combine(a, b)


def _route(digits: torch.Tensor, real: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    # a causal head attending to position 2 sees it from there on; before, its own position
    return torch.where(torch.arange(c.shape[1]) >= 2, c[:, 2:3], c)


def _format(digits: torch.Tensor, real: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    return (r + digits) % N_VALUES


def causal_model(layers: int) -> CausalModel:
    """The five nodes, in layers 0-3 (layers >= 4) or compressed into layers 0-1 (2 layers)."""
    compute, route, fmt = ("m1", "a2.h0", "m3") if layers >= 4 else ("m0", "a1.h0", "m1")
    nodes = (
        Node(name="a0.h0", parents=(), fn=_operand_a, reads_input=True, label="operand_a: a = x_1"),
        Node(name="a0.h1", parents=(), fn=_operand_b, reads_input=True,
             label="operand_b: b = x_2 (x_1 at position 1)"),
        Node(name=compute, parents=("a0.h0", "a0.h1"), fn=_compute, label="compute: c = (a*b + a + 2b) mod 5"),
        Node(name=route, parents=(compute,), fn=_route, label="route: r = c_2 (c_1 at position 1)"),
        Node(name=fmt, parents=(route,), fn=_format, reads_input=True, label="format: y = (r + x_i) mod 5"),
    )
    return CausalModel(node_list=nodes, first_value_id=1, n_values=N_VALUES)


def causal_bench(name: str) -> PlantedTask:
    """The planted task `name` (a key of SCALES)."""
    if name not in SCALES:
        raise CaseError(f"unknown planted model {name!r}; known: {', '.join(SCALES)}")
    layers = SCALES[name]
    values = tuple(range(N_VALUES))
    case = Case(
        id=name, name=name.replace("-", "_"), family="planted",
        description=(f"CAUSAL-BENCH's planted circuit in a {layers}-layer, {layers}-head transformer: y_i = "
                     "((x_1*b + x_1 + 2b) mod 5 + x_i) mod 5 with b = x_2 (x_1 at position 1), values 0-4."),
        task_kind="classification", vocab=values, max_seq_len=MAX_LEN, min_seq_len=MIN_LEN, causal=True,
        build_program=NoProgram(name),
        notes="Hand-written high-level model (planted.causal_bench); circuit: operand heads in layer 0, "
              "compute MLP, routing head, format MLP (see the module docstring).",
    )
    encoding = Encoding(input_vocab=(BOS, *values, PAD), output_vocab=values, max_seq_len=MAX_LEN,
                        task_kind="classification")
    return PlantedTask(case=case, encoding=encoding, model=causal_model(layers), n_layers=layers,
                       n_heads=layers, reference=reference, lr=DEEP_LR if layers >= 10 else None)
