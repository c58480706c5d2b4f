"""`zoo eval case N --method NAME`: score circuit-discovery methods against the ground truth.

Top level is standard library and the torch-free method registry; the evaluator (torch, TransformerLens) is imported inside
`run_eval`. Every input error surfaces as one ZooError line before any output is written.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from eval.methods.registry import BUILTIN_METHOD_KEYS


def add_method_option(p: argparse.ArgumentParser) -> None:
    """`--method-option METHOD.FIELD=VALUE` (zoo eval and zoo bench)."""
    p.add_argument("--method-option", action="append", default=[], metavar="METHOD.FIELD=VALUE",
                   help="set a field of a method's options (repeatable), e.g. acdc.taus=0.01,0.1,1 (a shorter τ "
                   "grid: a cheaper ACDC), acdc.metric=logit_diff, eap_ig_inputs.steps=10, edge_sp.penalties=0,1,10, "
                   "ensemble.methods=eap,ifr; the method must be one that runs; every method's options are "
                   "recorded in the report (settings.method_options)")


def methods_with_options(names: list[str], items: list[str]) -> list:
    """--method names, with each one that --method-option names bound to its options (eval.methods.options)."""
    from eval.methods.registry import REGISTRY
    from eval.methods.options import parse_method_options, with_options
    from eval.methods.interface import get_method

    options = parse_method_options(items, running=names)
    return [with_options(get_method(name, REGISTRY), options[name]) if name in options else name for name in names]


def register(sub: argparse._SubParsersAction) -> None:
    from zoo.commands.common import add_common, add_corruption, add_device

    p = sub.add_parser(
        "eval", help="score circuit-discovery methods against an entry's ground-truth circuit",
        description="Run circuit-discovery methods on a zoo entry (or its compiled model) and score them "
        "against the known circuit: node/edge ROC and AUROC, precision/recall/F1, CAUSAL-BENCH "
        "faithfulness, completeness, minimality, stability, causal optimality and composite, MIB "
        "faithfulness curve with CPR/CMD, and cross-method convergence. Built-in methods: "
        + ", ".join(BUILTIN_METHOD_KEYS) + "; or package.module:function.")
    add_common(p)
    p.add_argument("--method", action="append", default=[], metavar="NAME",
                   help="method to run (repeatable): a built-in key or package.module:function")
    p.add_argument("--scores", action="append", default=[], metavar="FILE",
                   help="score a MIB-format score file, or a folder of MIB circuit files (one circuit per "
                   "file, as MIB submits circuits of several sizes) (repeatable)")
    p.add_argument("--model", choices=("trained", "compiled"), default=None,
                   help="which model to evaluate (default: trained if the entry exists under the root, else compiled)")
    p.add_argument("--seed", type=int, default=0, help="seed of the task data and methods (default 0)")
    p.add_argument("--n", type=int, default=200, help="inputs per run (default 200)")
    p.add_argument("--ablation", choices=("resample", "mean", "zero"), default="resample",
                   help="how ablated components are replaced (default resample)")
    add_corruption(p)
    p.add_argument("--behaviour", choices=("normalized", "accuracy"), default="normalized",
                   help="CAUSAL-BENCH behaviour β (default normalized logit difference)")
    p.add_argument("--stability-seeds", type=int, default=10, metavar="K",
                   help="runs per method for stability (default 10; 1 turns it off)")
    p.add_argument("--permutations", type=int, default=1000, metavar="B",
                   help="permutation-null size for cross-method convergence (default 1000)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: the same numbers and comparable times on every machine, "
                   "and no stall when another process holds a core; more are faster on an idle machine)")
    add_device(p)
    add_method_option(p)
    p.add_argument("--plots", metavar="DIR", help="write PNG plots into DIR")
    p.add_argument("--save-scores", metavar="DIR",
                   help="write each method's scores as a MIB score file DIR/<method>.json (circuit methods: "
                   "a folder DIR/<method>/ of MIB circuit files, one per hyperparameter value); "
                   "`--scores` reads both back")
    p.set_defaults(func=run_eval)


def run_eval(args: argparse.Namespace) -> int:
    from zoo.commands.common import corruption_from, method_bars
    from zoo.high_level_source import resolve_case
    from zoo.errors import ZooError

    if not args.method and not args.scores:
        raise ZooError("name a method with --method (" + ", ".join(BUILTIN_METHOD_KEYS)
                       + ", or package.module:function) or a score file with --scores")
    for name, value, low in (("--n", args.n, 2), ("--stability-seeds", args.stability_seeds, 1),
                             ("--permutations", args.permutations, 1), ("--threads", args.threads, 1)):
        if value < low:
            raise ZooError(f"{name} must be at least {low}, got {value}")
    for path in args.scores:
        if not Path(path).exists():
            raise ZooError(f"score file {path!r} does not exist")
        if not (Path(path).is_dir() or Path(path).is_file()):  # a FIFO would block a reader forever
            raise ZooError(f"score file {path!r} is not a regular file or a folder (a FIFO, socket or device)")
    if args.save_scores is not None and Path(args.save_scores).exists() and not Path(args.save_scores).is_dir():
        raise ZooError(f"--save-scores {args.save_scores!r} is a file; name a directory")
    corruption = corruption_from(args)  # a malformed style fails before anything loads
    case = resolve_case(args.kind, args.id)

    import torch

    from eval.methods.interface import MethodError
    from eval.evaluator.report import table
    from zoo.commands.common import device_from
    from zoo.targets import evaluate

    torch.set_num_threads(args.threads)

    try:
        methods = methods_with_options(args.method, args.method_option)
    except MethodError as exc:
        raise ZooError(str(exc)) from None
    bars = method_bars()
    try:
        with _stdout_to_stderr():  # whatever runs (a method, a library) prints to stderr, never into the report
            report = evaluate(case, methods, scores=args.scores, model=args.model or "auto", root=args.root,
                              n=args.n, seed=args.seed, ablation=args.ablation, corruption=corruption,
                              behaviour=args.behaviour,
                              stability_seeds=args.stability_seeds, permutations=args.permutations,
                              save_scores=args.save_scores, progress=bars, device=device_from(args))
    except (MethodError, ValueError) as exc:
        raise ZooError(str(exc)) from None
    except OSError as exc:  # --save-scores could not be written
        raise ZooError(f"cannot write {exc.filename or args.save_scores}: {exc.strerror}") from None
    finally:
        bars.close()  # before any error line or the report
    if args.plots:
        _write_plots_atomically(report, Path(args.plots))
    if args.json:
        print(json.dumps(report.to_json(), indent=1, allow_nan=False))
    else:
        print(table(report))
        if args.plots:
            print(f"plots written to {args.plots}", file=sys.stderr)
    return 0


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Point Python's sys.stdout and file descriptor 1 at stderr for the block (C extensions and
    subprocesses write to fd 1 directly), then restore both."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no usable fd 1 or 2 (embedded interpreters): the Python-level redirect still holds
        saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            sys.stderr.flush()
            os.dup2(saved, 1)
            os.close(saved)


def _write_plots_atomically(report, target: Path) -> None:
    """Plots go to a temporary folder first, so a failure leaves no half-written plot set."""
    from eval.evaluator.plots import write_plots

    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target, prefix=".plots-") as tmp:
        for path in write_plots(report, tmp):
            shutil.move(str(path), target / path.name)
