"""Failure-mode families (issue 36, item 2) -> PlantedTasks whose circuit holds a phenomenon that a
known class of circuit methods mishandles, each with the prediction, stated before any method ran.

Every model is a hand-written causal model trained by SIIT like the CAUSAL-BENCH ones (2 layers, 4
heads, d_model 16; causal attention; lengths 3-6; the sixth family, large-circuit, is planted.large_circuit's
wider model), so its ground truth is exact in the same sense:
IIA and SIIA 1.0, out-of-circuit nodes inert at every length; and, since `zoo train planted NAME`
trains these with edge-level strictness unless told `--no-strict-edges`, every out-of-circuit edge too.

rare-feature (family `rare-feature`; values 0-7):

    trigger  a0.h0  t_i = 1 if i >= 2 and x_1 = x_2 = 0, else 0     (fires on 1/64 = 1.6% of inputs)
    answer   m0     y_i = (x_i + 5) mod 8 if t_i, else (x_i + 1) mod 8

  The trigger head changes the output only where the base or the counterfactual fires: about 3% of
  resampled pairs, every labelled position from 2 on. Prediction (sample-size limits; Conmy et al.
  2023 §5 and Syed et al. 2023 on attribution patching's first-order error): methods that estimate
  an edge's effect from a mean over n pairs see the trigger edges on about n x 3% pairs; gradient
  methods (eap, eap_ig_*, gradient_attribution) read a gradient at inputs where the trigger is far
  from firing, so the trigger edges rank near the out-of-circuit noise; exact patching ranks them in
  whenever one firing pair is drawn.

cancellation (family `cancellation`; values 0-4, answers 0-1):

    carry    a0.h0  c_i = parity of x_1
    offset   m0     d_i = (parity of x_i) XOR c_i
    sum      m1     y_i = c_i XOR d_i (= parity of x_i)

  The carry head reaches the output by two paths that cancel exactly: interchanging it changes c and
  d together and never the output (total effect 0; validation lists it as an inert circuit node, and
  its input edge is inert too), while patching either of its outgoing edges alone (a0.h0 -> m1,
  a0.h0 -> m0) changes the output whenever the counterfactual's x_1 has the other parity (48% of
  pairs). Prediction (McGrath et al. 2023, "The Hydra effect"; Kramár et al. 2024 on cancellation in
  AtP): methods that score a component by its total effect (activation_patching, ablation_scan,
  greedy, node_sp, gradient_attribution) put a0.h0 with the out-of-circuit nodes; methods that score
  edges (edge_patching, eap, eap_ig_*, acdc, edge_sp) find its edges. (A first version in mod-5
  arithmetic, c = x_1, d = x_i - c, y = c + d, did not train edge-exact at d_model 16 or 32.)

saturation (family `saturation`; values 0-4):

    duplicate  a0.h0  u_i = 1 if x_i occurs among x_1 .. x_{i-1}, else 0
    answer     m0     y_i = (x_i + 3) mod 5 if u_i, else (x_i + 1) mod 5

  The duplicate head must find a matching token by content: its query and key read the input.
  Training saturates it (siit.saturation): at every query the scores of its earlier matches (or of
  BOS, where x_i is new) exceed every other key's by a margin of 8, as a sharp match would; SIIT
  alone trained a head that found the match with a soft pattern (q/k gradients as large as exact
  patching's). Prediction (Kramár et al. 2024, AtP*, §3.1: attribution patching
  underestimates query and key edges of saturated attention, because the softmax's gradient vanishes
  where patching moves the pattern from one key to another): at q/k/v level, eap and
  gradient_attribution rank the head's q and k edges low while exact edge patching ranks them in;
  integrated gradients (eap_ig_*) recover part of it. At head level the head's v edge hides this
  (a head edge takes its largest part).

redundancy (family `redundancy`; values 0-4):

    copies   a0.h0, a0.h1, a0.h2   v = x_1 (three heads, the same value)
    answer   m0                    y_i = (x_i + majority of the three copies) mod 5

  Backup in its plainest form: two of the three copies are enough. Interchanging one copy never
  changes the output (the other two outvote it; validation lists each as an inert circuit node),
  interchanging any two changes it whenever the counterfactual's x_1 differs (80% of pairs). SIIT
  trains this with joint interchanges (CausalModel.joint: each pair and all three, drawn and judged
  like nodes), and the logits to a template of the answer instead of cross-entropy
  (PlantedTask.logit_template): with cross-entropy m0 summed the votes, and one copy moved the
  answer's logit by 44% of two copies' without changing the answer, so the backup was redundant for
  the answer but not for the logits methods read; with the template one copy moves it by about 4%.
  Prediction (Wang et al. 2023 on IOI's backup name movers; McGrath et al. 2023, "The Hydra
  effect"; Conmy et al. 2023 §4 on ACDC's greedy order): methods that score one component or
  edge at a time against the full model (activation_patching, ablation_scan, edge_patching, eap,
  eap_ig_*, gradient_attribution) see no copy matter; methods that remove components cumulatively
  (acdc: once one copy's edge is pruned the other two become necessary) or optimise a mask jointly
  (edge_sp, node_sp) keep at least two copies.

distribution-shift (family `distribution-shift`; values 0-4; methods' counterfactuals: `token:1`):

    second  a0.h0  s_i = x_2 from position 2 on, else 0     (attends to position 2, or BOS)
    third   a0.h1  t_i = x_3 from position 3 on, else 0     (attends to position 3, or BOS)
    answer  m0     y_i = (x_i + s_i + t_i) mod 5

  SIIT trains it with resampled interchanges, like every entry; its methods are given another
  corruption: minimal pairs that replace x_1 alone (`Case.corruption`; MIB's counterfactuals change
  one token, and symmetric token replacement is Zhang & Nanda 2024's recommended corruption). The
  two heads never read x_1, so under that corruption they carry the same values in both runs while
  each is necessary under resampling. Prediction (Heimersheim & Nanda 2024, "How to use and
  interpret activation patching": patching finds only what differs between the clean and the
  corrupted input): every method that contrasts the two runs (all but ifr, which reads the clean
  run alone, and random) ranks the two heads' edges with the out-of-circuit noise; each loses at
  least 0.15 edge AUROC beside its own score under resampled counterfactuals, while ifr loses none.
"""

from __future__ import annotations

from typing import Any

import torch

from planted import large_circuit as large
from planted.causal_model import CausalModel, NoProgram, Node, PlantedTask
from rasp_programs.case import BOS, PAD, Case
from rasp_programs.encoding import Encoding

MIN_LEN, MAX_LEN = 3, 6
COPIES = ("a0.h0", "a0.h1", "a0.h2")
"""redundancy's three copy heads."""
SHIFT_CORRUPTION = "token:1"
"""distribution-shift's counterfactuals (eval.core.corruption): x_1 replaced, which its heads never read."""
FAMILIES: dict[str, dict[str, Any]] = {
    "rare-feature": {"models": ("rare-feature",),
                     "prediction": "gradient methods (eap, eap_ig_inputs, eap_ig_activations, gradient_attribution) "
                                   "rank the trigger head's edges near out-of-circuit noise: the head matters on ~3% "
                                   "of pairs, and the gradient is read where it does not fire",
                     "weak": ("eap", "eap_ig_inputs", "eap_ig_activations", "gradient_attribution")},
    "cancellation": {"models": ("cancellation",),
                     "prediction": "methods that score a component by its total effect (activation_patching, "
                                   "ablation_scan, greedy, node_sp, gradient_attribution) miss the carry head, "
                                   "whose two paths cancel; edge methods find its edges",
                     "weak": ("activation_patching", "ablation_scan", "greedy", "node_sp", "gradient_attribution"),
                     "inert_alone": ("a0.h0",)},
    "saturation": {"models": ("saturation",),
                   "prediction": "at q/k/v level, eap and gradient_attribution rank the duplicate head's query "
                                 "and key edges low (the saturated softmax has a vanishing gradient), while exact "
                                 "edge patching ranks them in; at head level the v edge hides it",
                   "weak": ("eap", "gradient_attribution"), "level": "qkv_edge"},
    "redundancy": {"models": ("redundancy",),
                   "prediction": "methods that score one component or edge at a time against the full model "
                                 "(activation_patching, ablation_scan, edge_patching, eap, eap_ig_inputs, "
                                 "eap_ig_activations, gradient_attribution) rank the three copy heads and their "
                                 "edges near out-of-circuit noise, since no single copy moves the output; methods "
                                 "that remove components cumulatively or jointly (acdc, edge_sp, node_sp) keep at "
                                 "least two of them",
                   "weak": ("activation_patching", "ablation_scan", "edge_patching", "eap", "eap_ig_inputs",
                            "eap_ig_activations", "gradient_attribution"),
                   "inert_alone": COPIES},
    "distribution-shift": {"models": ("distribution-shift",),
                           "prediction": "with minimal pairs that replace x_1 (token:1), every method that contrasts "
                                         "clean and corrupted runs ranks the two heads' edges (they never read x_1) "
                                         "with out-of-circuit noise and loses at least 0.15 edge AUROC beside its "
                                         "score under resampled counterfactuals; ifr, which reads the clean run "
                                         "alone, loses none",
                           "weak": ("activation_patching", "gradient_attribution", "ablation_scan", "greedy",
                                    "edge_patching", "eap", "eap_ig_inputs", "eap_ig_activations", "acdc", "node_sp",
                                    "edge_sp", "ensemble"),
                           "corruption": SHIFT_CORRUPTION},
    "large-circuit": {"models": ("large-circuit",), "prediction": large.PREDICTION, "weak": large.WEAK},
}
"""Family -> its planted models, the prediction in words, the methods predicted to fail, the
high-level nodes whose interchange alone never changes the output by design (`inert_alone`:
cancellation's carry, whose two paths cancel; redundancy's copies, which the other two outvote), and
the level the prediction is about (`level`: `edge`, the default, or `qkv_edge`), and the corruption its
methods are given (`corruption`, the entry's `Case.corruption`; its prediction compares each method with
itself under `resample`)."""


def _case(name: str, values: tuple[int, ...], description: str, corruption: str = "resample") -> Case:
    return Case(id=name, name=name.replace("-", "_"), family="planted", description=description,
                task_kind="classification", vocab=values, max_seq_len=MAX_LEN, min_seq_len=MIN_LEN, causal=True,
                build_program=NoProgram(name), corruption=corruption,
                notes=f"Failure-mode family planted model (planted.failure_modes); see `zoo show planted {name}`.")


def _task(name: str, values: tuple[int, ...], description: str, model: CausalModel, reference: Any,
          logit_template: float | None = None, corruption: str = "resample") -> PlantedTask:
    encoding = Encoding(input_vocab=(BOS, *values, PAD), output_vocab=tuple(range(model.n_values)),
                        max_seq_len=MAX_LEN, task_kind="classification")
    # edge-level strictness by default: a family's edge labels are what its methods are judged on. Flat
    # busy targets: the families' phenomena and predictions were measured with them, and with profiles
    # distribution-shift's hidden edges moved the logits under token:1 by 0.24-0.38 of their resampled
    # effect (flat: at most 0.17; docs/results.md)
    return PlantedTask(case=_case(name, values, description, corruption), encoding=encoding, model=model, n_layers=2,
                       n_heads=4, reference=reference, failure_mode=name, strict_edges=True,
                       logit_template=logit_template, distractor_profile=0.0)


# rare-feature ---------------------------------------------------------------------------------

RARE_VALUES = 8


def _trigger(digits: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    fired = (digits[:, 1:2] == 0) & (digits[:, 2:3] == 0)  # [N, 1]
    return (fired & (torch.arange(digits.shape[1]) >= 2)).long()


def _rare_answer(digits: torch.Tensor, real: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return (digits + torch.where(t == 1, 5, 1)) % RARE_VALUES


def rare_reference(seq: tuple[int, ...]) -> list[int]:
    """The label function, from the task's definition."""
    fired = seq[0] == 0 and seq[1] == 0
    return [(x + (5 if fired and i >= 2 else 1)) % RARE_VALUES for i, x in enumerate(seq, start=1)]


def rare_feature() -> PlantedTask:
    nodes = (Node(name="a0.h0", parents=(), fn=_trigger, reads_input=True,
                  label="trigger: t = 1 from position 2 on if x_1 = x_2 = 0"),
             Node(name="m0", parents=("a0.h0",), fn=_rare_answer, reads_input=True,
                  label="answer: y = x_i + 5 if t else x_i + 1 (mod 8)"))
    model = CausalModel(node_list=nodes, first_value_id=1, n_values=RARE_VALUES)
    return _task("rare-feature", tuple(range(RARE_VALUES)),
                 "Rare feature: y_i = (x_i + 1) mod 8, or (x_i + 5) mod 8 from position 2 on when x_1 = x_2 = 0 "
                 "(1.6% of inputs); the trigger head matters on about 3% of resampled pairs.", model, rare_reference)


# cancellation ---------------------------------------------------------------------------------

CANCEL_VALUES = 5


def _carry(digits: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    return (digits[:, 1:2] % 2).expand_as(digits).clone()


def _offset(digits: torch.Tensor, real: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return (digits % 2) ^ c


def _sum(digits: torch.Tensor, real: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    return c ^ d


def cancel_reference(seq: tuple[int, ...]) -> list[int]:
    """The label function: the two paths cancel, so the output is the input token's parity."""
    return [x % 2 for x in seq]


def cancellation() -> PlantedTask:
    nodes = (Node(name="a0.h0", parents=(), fn=_carry, reads_input=True, label="carry: c = parity of x_1"),
             Node(name="m0", parents=("a0.h0",), fn=_offset, reads_input=True,
                  label="offset: d = parity of x_i XOR c"),
             Node(name="m1", parents=("a0.h0", "m0"), fn=_sum, label="sum: y = c XOR d"))
    model = CausalModel(node_list=nodes, first_value_id=1, n_values=2)
    return _task("cancellation", tuple(range(CANCEL_VALUES)),
                 "Cancellation: y_i = c XOR d with c = parity of x_1 (a head) and d = parity of x_i XOR c (an MLP): "
                 "the head's two paths cancel, so its total effect is 0 while each of its outgoing edges matters.",
                 model, cancel_reference)


# saturation -----------------------------------------------------------------------------------

SATURATION_VALUES = 5


def _matches(digits: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """bool [N, query, key]: earlier input positions holding the query's value (no BOS, no PAD)."""
    T = digits.shape[1]
    same = digits[:, :, None] == digits[:, None, :]  # [N, query, key]
    earlier = torch.ones(T, T, dtype=torch.bool).tril(-1) & (torch.arange(T) >= 1)[None, :]  # key < query, no BOS
    return same & earlier & real[:, None, :]


def _duplicate(digits: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    return _matches(digits, real).any(-1).long()


def _duplicate_keys(digits: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """bool [N, query, key]: the duplicate head's keys, its earlier matches, or BOS where it has none
    (the sink a real model's heads use for "nothing here")."""
    matches = _matches(digits, real)
    bos = torch.zeros_like(matches)
    bos[..., 0] = True
    return torch.where(matches.any(-1, keepdim=True), matches, bos)


def _saturation_answer(digits: torch.Tensor, real: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    return (digits + torch.where(u == 1, 3, 1)) % SATURATION_VALUES


def saturation_reference(seq: tuple[int, ...]) -> list[int]:
    """The label function, from the task's definition."""
    return [(x + (3 if x in seq[: i - 1] else 1)) % SATURATION_VALUES for i, x in enumerate(seq, start=1)]


def saturation() -> PlantedTask:
    nodes = (Node(name="a0.h0", parents=(), fn=_duplicate, reads_input=True,
                  label="duplicate: u = 1 if x_i occurred before", saturated_on=_duplicate_keys),
             Node(name="m0", parents=("a0.h0",), fn=_saturation_answer, reads_input=True,
                  label="answer: y = x_i + 3 if u else x_i + 1 (mod 5)"))
    model = CausalModel(node_list=nodes, first_value_id=1, n_values=SATURATION_VALUES)
    return _task("saturation", tuple(range(SATURATION_VALUES)),
                 "Attention saturation: y_i = (x_i + 3) mod 5 if x_i occurred earlier in the input, else (x_i + 1) "
                 "mod 5; a head finds the earlier match by content (query and key read the input).", model,
                 saturation_reference)


# redundancy -----------------------------------------------------------------------------------

REDUNDANT_VALUES = 5
REDUNDANT_TEMPLATE = 5.0
"""redundancy's logits are trained to a template of this margin (PlantedTask.logit_template): with
cross-entropy one copy moved the answer's logit by 44% of two copies' without changing the answer."""


def _copy_first(digits: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    return digits[:, 1:2].expand_as(digits).clone()


def _majority(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """The value two of the three copies hold (a where all three differ, which no interchange from
    one source makes)."""
    return torch.where((a == b) | (a == c), a, torch.where(b == c, b, a))


def _redundant_answer(digits: torch.Tensor, real: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                      c: torch.Tensor) -> torch.Tensor:
    return (digits + _majority(a, b, c)) % REDUNDANT_VALUES


def redundant_reference(seq: tuple[int, ...]) -> list[int]:
    """The label function: every copy holds x_1, so the majority is x_1."""
    return [(x + seq[0]) % REDUNDANT_VALUES for x in seq]


def redundancy() -> PlantedTask:
    copies = tuple(Node(name=name, parents=(), fn=_copy_first, reads_input=True, label=f"copy {k + 1} of 3: v = x_1")
                   for k, name in enumerate(COPIES))
    answer = Node(name="m0", parents=COPIES, fn=_redundant_answer, reads_input=True,
                  label="answer: y = x_i + majority of the three copies (mod 5)")
    pairs = tuple((a, b) for i, a in enumerate(COPIES) for b in COPIES[i + 1:])
    model = CausalModel(node_list=(*copies, answer), first_value_id=1, n_values=REDUNDANT_VALUES,
                        joint=(*pairs, COPIES))
    return _task("redundancy", tuple(range(REDUNDANT_VALUES)),
                 "Redundancy: y_i = (x_i + x_1) mod 5, x_1 carried by three heads and read by majority: "
                 "interchanging one copy never changes the output, any two change it whenever the "
                 "counterfactual's x_1 differs.", model, redundant_reference, logit_template=REDUNDANT_TEMPLATE)


# distribution-shift ---------------------------------------------------------------------------

SHIFT_VALUES = 5


def _from_position(digits: torch.Tensor, k: int) -> torch.Tensor:
    """x_k from position k on, 0 before (a causal head attending to position k, or to BOS)."""
    return torch.where(torch.arange(digits.shape[1]) >= k, digits[:, k:k + 1], torch.zeros_like(digits))


def _second(digits: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    return _from_position(digits, 2)


def _third(digits: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    return _from_position(digits, 3)


def _shift_answer(digits: torch.Tensor, real: torch.Tensor, s: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return (digits + s + t) % SHIFT_VALUES


def shift_reference(seq: tuple[int, ...]) -> list[int]:
    """The label function, from the task's definition."""
    return [(x + (seq[1] if i >= 2 else 0) + (seq[2] if i >= 3 else 0)) % SHIFT_VALUES
            for i, x in enumerate(seq, start=1)]


def distribution_shift() -> PlantedTask:
    nodes = (Node(name="a0.h0", parents=(), fn=_second, reads_input=True,
                  label="second: s = x_2 from position 2 on, else 0"),
             Node(name="a0.h1", parents=(), fn=_third, reads_input=True,
                  label="third: t = x_3 from position 3 on, else 0"),
             Node(name="m0", parents=("a0.h0", "a0.h1"), fn=_shift_answer, reads_input=True,
                  label="answer: y = x_i + s + t (mod 5)"))
    model = CausalModel(node_list=nodes, first_value_id=1, n_values=SHIFT_VALUES)
    return _task("distribution-shift", tuple(range(SHIFT_VALUES)),
                 "Distribution shift: y_i = (x_i + x_2 + x_3) mod 5, x_2 counted from position 2 on and x_3 from "
                 "3 on, each carried by a head; trained on resampled interchanges, its methods get minimal pairs "
                 "that replace x_1 alone (token:1), which never change what the two heads carry.", model,
                 shift_reference, corruption=SHIFT_CORRUPTION)


PLANTED = {"rare-feature": rare_feature, "cancellation": cancellation, "saturation": saturation,
           "redundancy": redundancy, "distribution-shift": distribution_shift, "large-circuit": large.large_circuit}
"""Planted model name -> its builder."""

