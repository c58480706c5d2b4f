"""Which generated programs are kept, and why the others are not; the generation loop.

A draw is kept only if, in this order (the first failure is its reject reason):
`no_program` the sampler found a program of the requested shape; `tracr_unsupported` Tracr's
static and dynamic validation accept it on every checked input; `compile_error` it compiles;
`layers` / `too_wide` the compiled model has a layer count in range and at most `width` heads per
layer; `no_head` the circuit has an attention head (a chain of MLPs alone is no test of circuit
discovery); `mismatch` the compiled model equals rasp.evaluate on every input (all of them when there
are at most EXHAUSTIVE_LIMIT, else VERIFY_SAMPLES drawn), padded to n_ctx, unpadded and with one
PAD (bidirectional attention reads PAD keys); `whole_model` some head or MLP of the compiled model
lies outside the circuit; `inert_node` every circuit node changes the output under the pairing
training will use (siit.data.inert_high_nodes, as tests/test_siit/test_pairing.py checks built-ins).
Compilation here is rasp_programs.quick_compile: the weights of compile_case without haiku.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

from rasp_programs.case import Case, CaseError
from rasp_programs.generate import GeneratorConfig, case_name, generated_case, parse_name

RejectReason = Literal["no_program", "tracr_unsupported", "compile_error", "layers", "too_wide",
                       "no_head", "mismatch", "whole_model", "inert_node"]
REJECT_REASONS: tuple[RejectReason, ...] = ("no_program", "tracr_unsupported", "compile_error", "layers",
                                            "too_wide", "no_head", "mismatch", "whole_model", "inert_node")
EXHAUSTIVE_LIMIT = 2000
"""Check every input when the input space is at most this large (4 tokens, lengths 1-5: 1364)."""
VERIFY_SAMPLES = 1000
REGRESSION_ATOL = 1e-4
INERT_SAMPLES = 2048
"""Inputs of the inert check: TrainConfig's n_train, drawn with the seed `zoo train` uses."""


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The outcome of checking one draw."""

    name: str
    kept: bool
    reason: RejectReason | None
    """None when kept."""
    detail: str
    """One line: what failed, or the kept case's shape."""
    shape: dict[str, Any]
    """task kind, layers, heads, d_model, circuit nodes / components, once compiled."""
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def check_name(name: str) -> Verdict:
    """Draw the program a generated name stands for and decide whether it is kept."""
    start = time.perf_counter()
    _, _, config = parse_name(name)  # a malformed name is a CaseError, not a verdict
    try:
        case = generated_case(name)
    except CaseError as exc:
        return Verdict(name, False, "no_program", str(exc), {}, time.perf_counter() - start)
    return check_case(case, config, start)


def check_case(case: Case, config: GeneratorConfig, start: float | None = None) -> Verdict:
    """Keep or reject a generated case (module doc), with the first reason it fails."""
    import torch

    from rasp_programs.compile import CompileError
    from rasp_programs.quick_compile import quick_compile
    from siit.transformer import Transformer

    start = time.perf_counter() if start is None else start
    shape: dict[str, Any] = {"task_kind": case.task_kind}
    verdict = lambda reason, detail: Verdict(case.id, reason is None, reason, detail, shape,  # noqa: E731
                                             time.perf_counter() - start)
    program = case.program
    seqs = verification_inputs(case)
    expected, unsupported = _evaluate_all(program, seqs)
    if unsupported:
        return verdict("tracr_unsupported", unsupported)
    try:
        compiled = quick_compile(case)
    except CompileError as exc:
        return verdict("compile_error", str(exc).splitlines()[0][:200])
    cfg = compiled.config
    n_components = cfg["n_layers"] * (cfg["n_heads"] + 1)
    shape.update(layers=cfg["n_layers"], heads=cfg["n_heads"], d_model=cfg["d_model"],
                 nodes=len(compiled.graph.nodes), components=n_components, edges=len(compiled.graph.edges))
    lo, hi = config.layers
    if not lo <= cfg["n_layers"] <= hi:
        return verdict("layers", f"compiled to {cfg['n_layers']} layers, not {lo}-{hi}")
    if cfg["n_heads"] > config.width:
        return verdict("too_wide", f"{cfg['n_heads']} heads in a layer, more than width {config.width}")
    if not any(n.startswith("a") for n in compiled.graph.nodes):  # MLPs only: no attention to find
        return verdict("no_head", "the circuit has no attention head")
    with torch.no_grad():
        high = Transformer.from_state_dict(cfg, compiled.state_dict)
        wrong = _first_mismatch(compiled, high, seqs, expected)
        if wrong:
            return verdict("mismatch", wrong)
        if len(compiled.graph.nodes) >= n_components:
            return verdict("whole_model", f"all {n_components} heads and MLPs are in the circuit")
        inert = inert_nodes(compiled, high)
    if inert:
        return verdict("inert_node", f"circuit nodes {', '.join(inert)} never change the output")
    return verdict(None, f"{cfg['n_layers']} layers, {cfg['n_heads']} heads, "
                         f"{len(compiled.graph.nodes)}/{n_components} nodes in the circuit, {case.task_kind}")


def verification_inputs(case: Case) -> list[tuple]:
    """Every valid input if there are at most EXHAUSTIVE_LIMIT, else VERIFY_SAMPLES seeded draws."""
    v, lo, hi = len(case.vocab), case.min_seq_len, case.max_seq_len
    if sum(v**n for n in range(lo, hi + 1)) <= EXHAUSTIVE_LIMIT:
        return [s for n in range(lo, hi + 1) for s in itertools.product(case.vocab, repeat=n)]
    return case.sample(VERIFY_SAMPLES, seed=12345)


def _evaluate_all(program: Any, seqs: list[tuple]) -> tuple[list[list[Any]], str]:
    """rasp.evaluate on every input (memoised per input) and the first Tracr-unsupported use."""
    from tracr.compiler import validating

    class Evaluator(validating.DynamicValidationEvaluator):
        """Tracr's dynamic validation, evaluating each shared sub-expression once per input."""

        def __init__(self) -> None:
            super().__init__()
            self.memo: dict[int, Any] = {}

        def evaluate(self, expr: Any, xs: Any) -> Any:
            if id(expr) not in self.memo:
                self.memo[id(expr)] = super().evaluate(expr, xs)
            return self.memo[id(expr)]

    outputs = []
    for seq in seqs:
        ev = Evaluator()
        out = ev.evaluate(program, list(seq))
        if ev.unsupported_exprs:
            u = ev.unsupported_exprs[0]
            return [], f"{u.expr.name} on {list(seq)}: {u.reason}"
        if any(v is None for v in out):
            return [], f"output None on {list(seq)}"
        outputs.append(list(out))
    return outputs, ""


def _first_mismatch(compiled: Any, high: Any, seqs: list[tuple], expected: list[list[Any]]) -> str:
    """'' if the compiled model equals `expected` padded, unpadded and with one PAD, else the first
    difference."""
    import torch

    from siit.data import present_mask

    tokens, mask = compiled.encoding.encode(seqs)
    lengths = mask.sum(1) - 1
    n_pad = compiled.encoding.n_ctx - 1 - lengths
    regression = compiled.case.task_kind == "regression"
    for shape, pads in (("padded", n_pad), ("unpadded", torch.zeros_like(n_pad)), ("one PAD", n_pad.clamp(max=1))):
        logits, _ = high(tokens, mask, present=present_mask(lengths, tokens.shape[1], pads))
        got = compiled.encoding.decode(logits, lengths.tolist())
        for seq, g, e in zip(seqs, got, expected):
            same = all(math.isclose(a, b, abs_tol=REGRESSION_ATOL) for a, b in zip(g, e)) if regression else g == e
            if not same:
                return f"{shape} input {list(seq)}: model {g} != RASP {e}"
    return ""


def inert_nodes(compiled: Any, high: Any) -> list[str]:
    """Circuit nodes whose interchange never changes the output under the pairing `zoo train`
    resolves (TrainConfig.pairing "auto"), on its default training inputs."""
    import torch

    from siit.correspondence import NodeLayout
    from siit.data import inert_high_nodes, make_dataset, pair_sources, resolve_pairing, step_generator

    data = make_dataset(compiled, high, INERT_SAMPLES, seed=1)
    layout = NodeLayout(compiled.config["n_layers"], compiled.config["n_heads"])
    names = list(compiled.graph.nodes)
    masks = torch.stack([layout.mask([n]) for n in names])
    task = compiled.case.task_kind
    pairing = resolve_pairing("auto", data, high, masks, names, task, seed=0)
    sources = pair_sources(data.lengths, torch.arange(len(data)), pairing, step_generator(0, -3))
    return inert_high_nodes(data, high, masks, names, sources, task)


def checked_case(name: str) -> Case:
    """The case of a generated name if the generator keeps it, else a one-line CaseError
    (get_case resolves `gen-` names here)."""
    verdict = check_name(name)
    if not verdict.kept:
        raise CaseError(f"generated case {name} is not kept ({verdict.reason}: {verdict.detail}); "
                        "`zoo generate` lists kept names")
    return generated_case(name)


def generate(config: GeneratorConfig, seed: int, count: int, *, start: int = 0,
             max_draws: int | None = None,
             on_verdict: Callable[[Verdict], None] | None = None) -> list[Verdict]:
    """Draw start, start+1, ... of stream `seed` until `count` are kept or `max_draws` are drawn
    (default 50 per wanted case); every verdict, kept or not, in draw order."""
    limit = max_draws if max_draws is not None else 50 * count
    verdicts: list[Verdict] = []
    kept = 0
    for index in itertools.islice(itertools.count(start), limit):
        if kept >= count:
            break
        verdict = check_name(case_name(seed, index, config))
        verdicts.append(verdict)
        kept += verdict.kept
        if on_verdict is not None:
            on_verdict(verdict)
    return verdicts


def reject_counts(verdicts: list[Verdict]) -> dict[str, int]:
    """How many draws each reason rejected (every reason listed, zeros included)."""
    counts = dict.fromkeys(REJECT_REASONS, 0)
    for v in verdicts:
        if v.reason is not None:
            counts[v.reason] += 1
    return counts


def kept_names(verdicts: list[Verdict]) -> Iterator[str]:
    return (v.name for v in verdicts if v.kept)

