"""InterpBench's simplified IOI circuit (paper 001, §4, Figure 4) on a synthetic IOI dataset ->
the PlantedTask `ioi`.

Data: six names and a few template words; each sentence names two people, then repeats one of
them (the subject S) and ends on "to": the answer is the other one, the indirect object IO.
ABBA templates put IO first ("IO and S ... S gave to"), BABA templates S first. Three templates
place the names at different positions, so no head can find them by position alone.

High-level nodes (every position is labelled; the answer at the last position is the IO):

    duplicate  a0.h0  d_i = the first earlier position holding token x_i if x_i is a name seen
                      before, else -1                          (duplicate-token head)
    inhibit    a1.h0  s_i = the name at d_j for the latest j <= i with d_j >= 0, else none (6)
                                                                (S-inhibition head)
    mover      a2.h0  y_i = the first name among x_1..x_i that is not s_i (x_1 if none)
                                                                (name-mover head)

From S2 on, y_i is the IO; before S2 it is the first name. Each node changes the output under some
interchange: the duplicate position of another template points at the other name, another
inhibited name frees the other name, and y is the mover's own value. As in the paper, the last
token's IIT and SIIT losses weigh x10 (PlantedTask.last_position_weight). Unlike it, the other
positions keep IIT and SIIT losses of weight 1 (the paper trains them on cross-entropy alone): the
high-level model labels every position, so the circuit is exact there too. The paper maps each node
to a whole layer of a 6-layer, 4-head, d_model 64 model; here each node is one head of a 4-layer,
4-head, d_model 32 model.
"""

from __future__ import annotations

from typing import Any

import torch

from planted.causal_model import CausalModel, NoProgram, Node, PlantedTask
from rasp_programs.case import BOS, PAD, Case

NAMES = ("Ann", "Bob", "Cat", "Dan", "Eve", "Fay")
WORDS = ("and", "went", "then", "said", "gave", "it", "to")
TEMPLATES = (
    ("{A}", "and", "{B}", "went", "then", "{S}", "gave", "it", "to"),
    ("{A}", "and", "{B}", "said", "{S}", "gave", "to"),
    ("then", "{A}", "and", "{B}", "went", "{S}", "said", "to"),
)
"""{A} and {B} are the first two names; {S} repeats the subject: {B} in ABBA, {A} in BABA."""
NONE = len(NAMES)  # s_i when nothing is inhibited


def sample(rng: Any, n: int) -> list[tuple[str, ...]]:
    """n sentences: a template, ABBA or BABA, two distinct names, each uniform."""
    out = []
    for _ in range(n):
        template = TEMPLATES[int(rng.integers(len(TEMPLATES)))]
        io, s = (NAMES[int(i)] for i in rng.choice(len(NAMES), size=2, replace=False))
        a, b = (io, s) if rng.integers(2) == 0 else (s, io)  # ABBA: IO first; BABA: S first
        out.append(tuple(w.format(A=a, B=b, S=s) for w in template))
    return out


def reference(seq: tuple[str, ...]) -> list[str]:
    """The label function from the task's definition: the IO from the repeated name on, before it
    the first name."""
    out, seen, inhibited = [], [], None
    for word in seq:
        if word in NAMES:
            if word in seen:
                inhibited = word
            seen.append(word)
        free = [w for w in seen if w != inhibited]
        out.append(free[0] if free else seen[0] if seen else NAMES[0])
    return out


def _is_name(digits: torch.Tensor) -> torch.Tensor:
    return (digits >= 0) & (digits < len(NAMES))


def _duplicate(digits: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    t = digits.shape[1]
    pos = torch.arange(t)
    same = (digits[:, :, None] == digits[:, None, :]) & _is_name(digits)[:, :, None]  # [N, query, key]
    earlier = same & (pos[None, None, :] < pos[None, :, None])
    first = torch.where(earlier, pos[None, None, :], t).min(dim=-1).values
    return torch.where(first < t, first, -1)


def _inhibit(digits: torch.Tensor, real: torch.Tensor, dup: torch.Tensor) -> torch.Tensor:
    t = digits.shape[1]
    pos = torch.arange(t)
    name_at = digits.gather(1, dup.clamp(min=0))  # [N, T]: the name at each duplicate's first position
    latest = torch.where(dup >= 0, pos, -1).cummax(dim=1).values  # latest j <= i with d_j >= 0
    found = name_at.gather(1, latest.clamp(min=0))
    return torch.where(latest >= 0, found, NONE)


def _mover(digits: torch.Tensor, real: torch.Tensor, inhibited: torch.Tensor) -> torch.Tensor:
    t = digits.shape[1]
    pos = torch.arange(t)
    visible = pos[None, None, :] <= pos[None, :, None]  # [1, query, key]
    free = _is_name(digits)[:, None, :] & visible & (digits[:, None, :] != inhibited[:, :, None])
    first = torch.where(free, pos[None, None, :], t).min(dim=-1).values  # [N, T]
    any_name = _is_name(digits)[:, None, :] & visible
    fallback = torch.where(any_name, pos[None, None, :], t).min(dim=-1).values
    chosen = torch.where(first < t, first, fallback)
    return torch.where(chosen < t, digits.gather(1, chosen.clamp(max=t - 1)), 0)


def ioi() -> PlantedTask:
    nodes = (
        Node(name="a0.h0", parents=(), fn=_duplicate, reads_input=True,
             label="duplicate token: first earlier position of x_i if it is a repeated name, else -1"),
        Node(name="a1.h0", parents=("a0.h0",), fn=_inhibit, reads_input=True,
             label="S-inhibition: the repeated name (S), once it has been repeated"),
        Node(name="a2.h0", parents=("a1.h0",), fn=_mover, reads_input=True,
             label="name mover: the first name that is not inhibited (the IO at the end)"),
    )
    model = CausalModel(node_list=nodes, first_value_id=1, n_values=len(NAMES))
    vocab = NAMES + WORDS
    case = Case(
        id="ioi", name="ioi", family="planted", task_kind="classification", vocab=vocab,
        description="Indirect object identification on synthetic sentences (ABBA and BABA templates over six "
                    "names): from the repeated subject on, output the indirect object.",
        max_seq_len=max(map(len, TEMPLATES)), min_seq_len=min(map(len, TEMPLATES)), causal=True,
        build_program=NoProgram("ioi"), sampler=sample,
        notes="Hand-written high-level model after InterpBench's Figure 4 (planted.ioi).",
    )
    from rasp_programs.encoding import Encoding

    encoding = Encoding(input_vocab=(BOS, *vocab, PAD), output_vocab=NAMES, max_seq_len=case.max_seq_len,
                        task_kind="classification")
    return PlantedTask(case=case, encoding=encoding, model=model, n_layers=4, n_heads=4, d_head=8,
                       reference=reference, last_position_weight=10.0)
