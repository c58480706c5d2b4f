"""`zoo bench`: every method on every entry, one leaderboard (eval.leaderboard.cells, eval.leaderboard.table).

Top level is standard library only. Cells are cached under `<out>/cache`, so a rerun (after Ctrl-C
or with one more method or entry) computes only what is missing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

LEADERBOARD_FILES = ("leaderboard.json", "leaderboard.csv", "cells.csv", "pairwise.csv", "auroc_box.png",
                     "a12_matrix.png")
"""What `zoo bench` writes into --out (a12_matrix.png only with two or more methods), beside cache/."""


def register(sub: argparse._SubParsersAction) -> None:
    from zoo.commands.common import add_common, add_corruption, add_device
    from eval.methods.registry import BUILTIN_METHOD_KEYS
    from zoo.commands.evaluate import add_method_option

    p = sub.add_parser(
        "bench", help="run methods x entries and write one leaderboard (cached: a rerun computes only what is missing)",
        description="Run circuit-discovery methods on zoo entries and write a leaderboard: per method node and "
        "edge AUROC (mean ± sd over entries, beside the chance line), F1, CPR, CMD and wall time, and "
        "InterpBench's RQ4 table (Wilcoxon-Mann-Whitney p and Vargha-Delaney A12 of edge AUROC for every pair "
        "of methods), as JSON, CSV, a terminal table and PNG plots. Default: every entry under the root and "
        "every built-in method (" + ", ".join(BUILTIN_METHOD_KEYS) + "). Each (method, entry, seed) result is "
        "cached in OUT/cache and recomputed only when the entry, the method or a setting changes.")
    add_common(p, kind_id=False)
    p.add_argument("--cases", action="append", default=[], metavar="IDS",
                   help="case ids, comma-separated (e.g. 3,4,gen-0-1): the trained entry if the root has it, "
                   "else the compiled model (see --model); default every entry under the root")
    p.add_argument("--planted", action="append", default=[], metavar="NAMES",
                   help="planted entries by name, comma-separated (folders planted-NAME under the root's entries; a "
                   "multi-task bundle's name, e.g. mt-2x4, stands for all its views)")
    p.add_argument("--family", action="append", default=[], metavar="NAME",
                   help="the planted entries of a failure-mode family (rare-feature, cancellation, saturation, redundancy, "
                   "distribution-shift, large-circuit; all: every family; `zoo list planted --family NAME`), added to "
                   "--planted (repeatable)")
    p.add_argument("--method", action="append", default=[], metavar="NAME",
                   help="method (repeatable or comma-separated): a built-in key or package.module:function; "
                   "default every built-in method")
    p.add_argument("--scores", action="append", default=[], metavar="DIR",
                   help="a folder of precomputed scores, one per entry: DIR/<entry>.json (MIB score file) or "
                   "DIR/<entry>/ (MIB circuit files); joins the leaderboard as scores:<folder name> (repeatable)")
    p.add_argument("--model", choices=("auto", "trained", "compiled"), default="auto",
                   help="which model of a --cases entry (default auto: trained if the root has it, else compiled)")
    p.add_argument("--out", metavar="DIR", help="where the leaderboard and the cache go (default ROOT/bench)")
    p.add_argument("--seed", type=int, default=0, help="seed of the task data and methods (default 0)")
    p.add_argument("--n", type=int, default=100, help="inputs per (method, entry) (default 100)")
    p.add_argument("--ablation", choices=("resample", "mean", "zero"), default="resample",
                   help="how patched components are replaced (default resample)")
    add_corruption(p, "; part of the cache key")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: the same numbers and comparable times on every machine, "
                   "and no stall when another process holds a core; more are faster on an idle machine; "
                   "part of the cache key)")
    p.add_argument("--jobs", type=int, default=1, metavar="J",
                   help="worker processes computing the cells the cache lacks (default 1: this process); each "
                   "cell's numbers are the same whatever J, on --threads torch threads per worker")
    add_device(p)
    add_method_option(p)
    p.set_defaults(func=run_bench_command)


def _split(values: list[str], what: str) -> list[str]:
    from zoo.errors import ZooError

    out = [v.strip() for value in values for v in value.split(",") if v.strip()]
    if values and not out:
        raise ZooError(f"{what} names nothing; give comma-separated names")
    return list(dict.fromkeys(out))


def _entries_named(args: argparse.Namespace) -> list[str]:
    """--planted's names (a multi-task bundle's name standing for all its views), then those of every
    --family's planted models, each once."""
    from planted import family_members
    from planted.registry import bundle_views
    from rasp_programs.case import CaseError
    from zoo.errors import ZooError

    try:
        members = [m for f in _split(args.family, "--family") for m in family_members(f)]
    except CaseError as exc:
        raise ZooError(str(exc)) from None
    named = [v for name in _split(args.planted, "--planted") for v in (bundle_views(name) or [name])]
    return list(dict.fromkeys(named + members))


def _check_options(args: argparse.Namespace, keys: list[str]) -> None:
    """One-line ZooErrors (exit 2) for numbers out of range, unknown methods and missing score folders."""
    from eval.methods.registry import BUILTIN_METHOD_KEYS
    from zoo.errors import ZooError

    for name, value, low in (("--n", args.n, 2), ("--threads", args.threads, 1), ("--jobs", args.jobs, 1)):
        if value < low:
            raise ZooError(f"{name} must be at least {low}, got {value}")
    for key in keys:
        if ":" not in key and key not in BUILTIN_METHOD_KEYS:
            raise ZooError(f"unknown method {key!r}; known: {', '.join(BUILTIN_METHOD_KEYS)} "
                           "(or package.module:function)")
    for folder in args.scores:
        if not Path(folder).is_dir():
            raise ZooError(f"--scores {folder!r} is not a directory (it holds <entry>.json files or <entry>/ folders)")


def run_bench_command(args: argparse.Namespace) -> int:
    from eval.methods.registry import BUILTIN_METHOD_KEYS
    from zoo.commands.common import corruption_from, device_from
    from zoo.commands.evaluate import _stdout_to_stderr
    from zoo.errors import ZooError
    from zoo.paths import zoo_root

    cases, planted = _split(args.cases, "--cases"), _entries_named(args)
    keys = _split(args.method, "--method")
    _check_options(args, keys)
    corruption = corruption_from(args)
    root = zoo_root(args.root)
    out = Path(args.out) if args.out else root / "bench"
    if out.exists() and not out.is_dir():
        raise ZooError(f"--out {str(out)!r} is a file; name a directory")

    from eval.methods.registry import REGISTRY
    from eval.leaderboard.cells import BenchSettings, bench_method, run_bench, score_folder
    from eval.methods.options import parse_method_options
    from eval.methods.interface import MethodError
    from zoo.leaderboard_entries import bench_entries

    try:
        chosen = keys or list(BUILTIN_METHOD_KEYS)
        options = parse_method_options(args.method_option, running=chosen)
        # bound options change the method's fingerprint, so its cells are cached apart from the defaults'
        methods = [bench_method(k, REGISTRY, options.get(k)) for k in chosen]
        methods += [score_folder(d) for d in args.scores]
    except MethodError as exc:
        raise ZooError(str(exc)) from None
    device = device_from(args)  # a GPU this machine lacks is bad input, before any entry is made
    entries = bench_entries(root, cases=cases, planted=planted, model=args.model, ablation=args.ablation)
    settings = BenchSettings(seed=args.seed, n=args.n, ablation=args.ablation, corruption=corruption,
                             threads=args.threads, device=device)
    bar = _bar(len(entries) * len(methods))
    specs = [("method", (k, options.get(k))) for k in chosen] + [("scores", d) for d in args.scores]
    try:
        with _stdout_to_stderr():  # a method's prints must not reach --json (nor a worker's: fd 1 is stderr here)
            done = None if args.jobs == 1 else _in_workers(args, root, entries, methods, specs, settings, out, bar)
            run = run_bench(entries, methods, settings, out / "cache", progress=bar, runs=bar.runs, done=done)
    except KeyboardInterrupt:
        bar.close()
        print(f"zoo: finished cells are cached in {out / 'cache'}; rerun to compute only what is missing",
              file=sys.stderr)
        raise
    bar.close()
    board = _write(run, out, {e.name: e.family for e in entries},
                   {e.name: settings.corruption_for(e) for e in entries}, {e.name: e.edge_labels for e in entries})
    if args.json:
        print(json.dumps(board.to_json(), indent=1, allow_nan=False))
    else:
        from eval.leaderboard.table import table

        print(table(board))
        print(f"leaderboard written to {out}", file=sys.stderr)
    return 1 if any(c.status == "error" for c in run.cells) else 0


def _in_workers(args: argparse.Namespace, root: Path, entries: list, methods: list, specs: list, settings, out: Path,
                bar) -> dict:
    """The cells the cache lacks, computed in --jobs worker processes (zoo.bench_workers)."""
    from rasp_programs.lookup import get_case
    from zoo.bench_workers import compute_cells, jobs_for

    named = {get_case(c).entry_name: c for c in _split(args.cases, "--cases")}
    cases = {e.name: named.get(e.name, e.name[len("case-"):]) for e in entries if e.model == "compiled"}
    jobs = jobs_for(entries, methods, specs, cases, root=root, ablation=args.ablation, settings=settings,
                    cache=out / "cache")
    return compute_cells(jobs, min(args.jobs, max(1, len(jobs))), lambda cell: bar(cell, False))


def _bar(total: int):
    """One tqdm bar over every (method, entry) cell; cached cells pass at once. `.runs` follows a
    computing cell's runs and their steps in the postfix (eval.evaluator.evaluate.RunProgress)."""
    from tqdm import tqdm

    bar = tqdm(total=total, file=sys.stderr, unit="cell", desc="bench", mininterval=0.25, leave=False,
               dynamic_ncols=True)

    def step(cell, cached: bool) -> None:
        bar.set_postfix_str(f"{cell.method} on {cell.entry}{' (cached)' if cached else ''}", refresh=False)
        bar.update(1)

    def runs(method: str, index: int, count: int):
        head = f"{method} run {index + 1}/{count}" if count > 1 else method

        def steps(done: int, total: int) -> None:
            bar.set_postfix_str(f"{head}: {done}/{total}", refresh=False)
            bar.update(0)  # redraws at most every mininterval

        bar.set_postfix_str(head, refresh=False)
        bar.update(0)
        return steps

    step.close = bar.close  # type: ignore[attr-defined]
    step.runs = runs  # type: ignore[attr-defined]
    return step


def _write(run, out: Path, families: dict[str, str], corruptions: dict[str, str], edge_labels: dict[str, str]):
    """The leaderboard's files, each written whole under a temporary name and renamed into place."""
    import os
    import tempfile

    from eval.leaderboard.plots import write_bench_plots
    from eval.leaderboard.table import cells_to_csv, leaderboard, pairs_to_csv, to_csv

    board = leaderboard(run, families=families, corruptions=corruptions, edge_labels=edge_labels)
    out.mkdir(parents=True, exist_ok=True)
    texts = {"leaderboard.json": json.dumps(board.to_json(), indent=1, allow_nan=False),
             "leaderboard.csv": to_csv(board), "cells.csv": cells_to_csv(board), "pairwise.csv": pairs_to_csv(board)}
    for name, text in texts.items():
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, out / name)
    (out / "a12_matrix.png").unlink(missing_ok=True)  # a stale matrix must not outlive a one-method run
    with tempfile.TemporaryDirectory(dir=out, prefix=".plots-") as tmp:
        for path in write_bench_plots(board, tmp):
            os.replace(path, out / path.name)
    return board
