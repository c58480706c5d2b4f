"""`zoo generate`: draw random RASP programs and list those kept as cases (gen-SEED-INDEX)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

HELP = """\
Draw random RASP programs from a seed and keep those that compile with Tracr, equal rasp.evaluate
on every input (padded, unpadded and with one PAD), have no inert circuit node and leave some head
or MLP of the compiled model out of the circuit. Kept cases are printed by name: `gen-SEED-INDEX`
is draw INDEX of stream SEED, rebuilt from the name alone, so `zoo show case gen-0-3`, `zoo compile
case gen-0-3` and `zoo train case gen-0-3` work like a built-in case (a rejected draw's name is
refused with its reason). Settings other than the defaults are part of the name, as codes in a
fixed order: `gen-7-12.L3-4.V6` is draw 12 of seed 7 with --layers 3-4 --vocab-size 6 (L layers,
W width, M mix digits, V vocab size, T tokens l/d, S lengths, O output a/c/r).
Exit 1 if fewer than --count programs were kept within --max-draws."""

OP_KINDS = ("map", "sequence_map", "aggregate", "numerical_aggregate", "selector_width",
            "linear_sequence_map")  # rasp_programs.generate_ops.OP_KINDS (kept here: --help stays light)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="draw random RASP programs; list the verified ones as cases",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=_natural, default=0, help="stream of draws (default 0)")
    p.add_argument("--count", type=_positive, default=10, help="how many cases to keep (default 10)")
    p.add_argument("--start", type=_natural, default=0, help="first draw index (default 0)")
    p.add_argument("--max-draws", type=_positive, metavar="N",
                   help="give up after N draws (default 50 per wanted case)")
    p.add_argument("--layers", type=_range, default=(2, 4), metavar="LO-HI",
                   help="compiled layers, a range within 1-8 (default 2-4)")
    p.add_argument("--width", type=_positive, default=2,
                   help="most attention heads in one layer of the compiled model (default 2)")
    p.add_argument("--mix", type=_mix, metavar="KIND=W,...",
                   help="weights 0-9 of operation kinds, others keep their default: "
                   + ", ".join(OP_KINDS) + " (default map=3,sequence_map=2,aggregate=2,"
                   "numerical_aggregate=1,selector_width=2,linear_sequence_map=1)")
    p.add_argument("--vocab-size", type=_positive, default=4, help="number of input tokens (default 4)")
    p.add_argument("--tokens", choices=("letters", "digits"), default="letters",
                   help="input tokens a, b, ... or 0, 1, ... (default letters)")
    p.add_argument("--lengths", type=_range, default=(1, 5), metavar="MIN-MAX",
                   help="input lengths, a range within 1-10; MAX is the model's max_seq_len (default 1-5)")
    p.add_argument("--output", choices=("any", "classification", "regression"), default="any",
                   help="task kind of the program's output (default any)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")
    p.add_argument("--debug", dest="sub_debug", action="store_true", help="show full tracebacks")
    p.set_defaults(func=run_generate)


def _natural(text: str) -> int:
    if not text.isdigit() or len(text) > 10:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def _positive(text: str) -> int:
    value = _natural(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def _range(text: str) -> tuple[int, int]:
    lo, sep, hi = text.partition("-")
    if not (lo.isdigit() and (not sep or hi.isdigit())) or len(text) > 6:
        raise argparse.ArgumentTypeError(f"expected LO-HI (e.g. 2-4) or one number, got {text!r}")
    return int(lo), int(hi or lo)


def _mix(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in text.split(","):
        kind, sep, weight = part.partition("=")
        if not sep or kind not in OP_KINDS or not (weight.isdigit() and len(weight) == 1):
            raise argparse.ArgumentTypeError(
                f"expected KIND=W with W 0-9 and KIND one of {', '.join(OP_KINDS)}; got {part!r}")
        out[kind] = int(weight)
    return out


def _config(args: argparse.Namespace) -> Any:
    from rasp_programs.case import CaseError
    from rasp_programs.generate import GeneratorConfig
    from zoo.errors import ZooError

    default = GeneratorConfig()
    mix = tuple((args.mix or {}).get(k, w) for k, w in zip(OP_KINDS, default.mix))
    try:
        return GeneratorConfig(layers=args.layers, width=args.width, mix=mix, vocab_size=args.vocab_size,
                               tokens=args.tokens, seq_len=args.lengths, output=args.output)
    except CaseError as exc:
        raise ZooError(str(exc)) from None


def run_generate(args: argparse.Namespace) -> int:
    config = _config(args)  # bad settings fail before anything heavy is imported
    import torch
    from tqdm import tqdm

    from rasp_programs.generate_check import generate, reject_counts
    from zoo.errors import CriterionNotMet

    torch.set_num_threads(1)  # small models: one thread is fastest and leaves cores to others
    start = time.perf_counter()
    bar = tqdm(total=args.count, file=sys.stderr, unit="case", desc="kept", mininterval=0.25,
               leave=False, dynamic_ncols=True)
    drawn = 0

    def seen(verdict: Any) -> None:
        nonlocal drawn
        drawn += 1
        bar.update(int(verdict.kept))
        bar.set_postfix(drawn=drawn, refresh=False)

    try:
        verdicts = generate(config, args.seed, args.count, start=args.start, max_draws=args.max_draws,
                            on_verdict=seen)
    finally:
        bar.close()
    kept = [v for v in verdicts if v.kept]
    report = {
        "seed": args.seed, "settings": _settings(config), "kept": [v.name for v in kept],
        "draws": len(verdicts), "kept_share": round(len(kept) / max(1, len(verdicts)), 4),
        "rejects": reject_counts(verdicts), "seconds": round(time.perf_counter() - start, 2),
        "cases": [{"name": v.name, **v.shape} for v in kept],
        "rejected": [{"name": v.name, "reason": v.reason, "detail": v.detail} for v in verdicts if not v.kept],
    }
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        for v in kept:
            s = v.shape
            print(f"{v.name:24s} {s['task_kind']:14s} layers {s['layers']}  heads {s['heads']}  "
                  f"circuit {s['nodes']}/{s['components']} nodes  d_model {s['d_model']}")
        reasons = ", ".join(f"{r} {n}" for r, n in report["rejects"].items() if n) or "none"
        print(f"kept {len(kept)} of {len(verdicts)} draws in {report['seconds']:.1f} s; rejected: {reasons}",
              file=sys.stderr)
    if len(kept) < args.count:
        raise CriterionNotMet(f"kept only {len(kept)} of {args.count} wanted cases in {len(verdicts)} draws "
                              "(raise --max-draws or loosen the settings)")
    return 0


def _settings(config: Any) -> dict[str, Any]:
    import dataclasses

    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(config).items()}
