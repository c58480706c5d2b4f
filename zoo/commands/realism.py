"""`zoo realism case N`: can a method that never intervenes find the circuit of a trained entry, and
how natural do its weights look (InterpBench §5, Table 5)?

Top level is standard library only (the CLI must start fast); the report (torch, siit, the
comparison training) is imported inside `run_realism`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    from zoo.commands.common import add_common, add_device

    p = sub.add_parser(
        "realism", help="how well activation and weight size find an entry's circuit; weight-histogram KL",
        description="For the trained entry of a case or planted model, and for a case's Tracr-compiled model "
        "(a planted model has none): per-node output "
        "norm, output variance, weight norm (and output-weight norm, logit variance) on inputs from the "
        "case's sampler, each heuristic's node AUROC against the circuit and its separation "
        "max(AUROC, 1 - AUROC) (0.5 = chance). Then InterpBench's Table 5: KL divergence between the "
        "centred weight histograms of natural (behaviour-only), Tracr, SIIT and IIT models of the case; "
        "the natural and IIT models are trained with the entry's seed and architecture (`zoo train "
        "--natural`, `--strict-weight 0`) and cached under <root>/realism/<entry>/.")
    add_common(p)
    p.add_argument("--n", type=int, default=2000, help="inputs drawn from the case's sampler (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="seed of those inputs (default 0)")
    p.add_argument("--epochs", type=int, default=None,
                   help="step budget of the natural and IIT models in epochs (default: the entry's own budget)")
    p.add_argument("--no-train", action="store_true",
                   help="do not train comparison models: use cached ones only and leave missing kinds out "
                   "of the KL table (default: train what is not cached)")
    p.add_argument("--retrain", action="store_true",
                   help="train the natural and IIT models again even if cached ones match (default: reuse)")
    p.add_argument("--bins", type=int, default=100, help="histogram bins on the shared range (default 100)")
    p.add_argument("--plots", metavar="DIR", help="write PNG plots into DIR (default: none)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: the models are tiny)")
    add_device(p)
    p.set_defaults(func=run_realism)


def run_realism(args: argparse.Namespace) -> int:
    from zoo.high_level_source import resolve_case
    from zoo.errors import ZooError

    for flag, low in (("n", 2), ("bins", 1), ("threads", 1)):
        if getattr(args, flag) < low:
            raise ZooError(f"--{flag} must be at least {low}, got {getattr(args, flag)}")
    if args.no_train and args.retrain:
        raise ZooError("--no-train and --retrain contradict each other; pass one")
    case = resolve_case(args.kind, args.id)
    if args.plots and Path(args.plots).exists() and not Path(args.plots).is_dir():
        raise ZooError(f"--plots {args.plots} exists and is not a directory")

    import torch

    from eval.scoring.weight_histograms import HistogramSpec
    from zoo.commands.common import device_from
    from zoo.paths import zoo_root
    from zoo.realism_report import RealismOptions, realism_case

    torch.set_num_threads(args.threads)
    options = RealismOptions(n=args.n, seed=args.seed, epochs=args.epochs, train=not args.no_train,
                             retrain=args.retrain, histogram=HistogramSpec(bins=args.bins),
                             device=device_from(args))
    report = realism_case(case, zoo_root(args.root), options, progress=_progress_bar)
    if args.plots:
        from zoo.realism_plots import write_plots_atomically

        report["plots"] = [str(p) for p in write_plots_atomically(report, Path(args.plots))]
    if args.json:
        print(json.dumps(report, indent=1, allow_nan=False))
    else:
        print(format_report(report))
    return 0


@contextlib.contextmanager
def _progress_bar(kind: str, total: int) -> Iterator[Any]:
    from zoo.commands.common import step_bar

    bar = step_bar(total, desc=f"training {kind} model")
    try:
        yield bar.update_to
    finally:
        bar.close()


def _f(value: Any, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_battery(b: dict[str, Any], tracr: dict[str, Any] | None = None) -> list[str]:
    """The battery of no-intervention looks (eval.core.looks): each look's separation, its chance band,
    and the Tracr model's separation; then the bounds."""
    lines = ["look (no intervention)    SIIT separation  chance 95%  Tracr separation"]
    for key, row in b["looks"].items():
        other = _f(tracr["looks"][key]["separation"]) if tracr else "-"
        mark = " (apart)" if row["apart"] else (" !" if key in b["over_bound"] else "")
        lines.append(f"  {key:25s}{_f(row['separation']):>6s}{mark:9s}{_f(row['chance_95']):>8s}     {other:>6s}")
    bounds = b["bounds"]
    lines.append(f"  worst {_f(b['max_separation'])} (bound {bounds['look']}), median {_f(b['median_separation'])} "
                 f"(bound {bounds['median']}), apart worst {_f(b['max_separation_apart'])} (bound {bounds['apart']}): "
                 f"{'met' if b['met'] else 'NOT met'}; ! = over the bound")
    return lines


def format_report(r: dict[str, Any]) -> str:
    """The human-readable report (the JSON has everything)."""
    siit, tracr = r["activity"]["siit"], r["activity"].get("tracr")
    planted = r.get("family") == "planted"
    versus = "(planted: no Tracr-compiled model)" if planted else "vs its Tracr-compiled model"
    lines = [f"{r['family']} {r['case']} ({r['name']}): {r['entry']} {versus}, "
             f"{r['inputs']['n']} inputs (seed {r['inputs']['seed']})", "",
             "heuristic          SIIT separation  Tracr separation   (0.5 = chance, 1 = finds the circuit)"]
    for name, h in siit["heuristics"].items():
        bound = " *" if name in siit["bounded_heuristics"] else ""
        other = _f(tracr["heuristics"][name]["separation"]) if tracr else "-"
        lines.append(f"  {name:20s}{_f(h['separation']):>6s}{bound:2s}          {other:>6s}")
    t = r["targets"]
    lines += ["  * bounded by the realism target: separation <= "
              f"{t['max_heuristic_separation']['bound']} ({'met' if t['max_heuristic_separation']['met'] else 'NOT met'})",
              f"  variance floor ratio (min out-of-circuit / median circuit output variance): "
              f"{_f(siit['variance_floor_ratio'])} (target >= {t['variance_floor_ratio']['bound']})", "",
              *format_battery(siit["battery"], tracr and tracr["battery"]), "",
              "SIIT entry, per node:   node     circuit  output norm  output variance  weight norm"]
    for n in siit["nodes"]:
        lines.append(f"  {'':20s}{n['node']:8s} {'in' if n['in_circuit'] else 'out':7s}  {n['output_norm']:11.3f}"
                     f"  {n['output_variance']:15.3f}  {n['weight_norm']:11.3f}")
    kl = r["weight_kl"]
    order = kl["order"]
    lines += ["", "weight-histogram KL divergence (nats; row r, column c: KL(P_c || P_r)):",
              "  " + " " * 8 + "".join(f"{k:>9s}" for k in order)]
    for k, row in zip(order, kl["lower_triangle"]):
        lines.append(f"  {k:8s}" + "".join(f"{_f(v):>9s}" if v is not None else " " * 9 for v in row))
    for kind, info in r["comparison_models"].items():
        state = ("not cached (--no-train)" if info.get("missing") else
                 f"{'cached' if info['from_cache'] else 'trained'}, {info['steps']} steps, criterion "
                 f"{'met' if info['met_criterion'] else 'NOT met'}")
        lines.append(f"  {kind}: {state} ({info['path']})")
    k = t["kl_natural_siit_below_natural_tracr"]
    if k["met"] is not None:
        lines.append(f"  KL natural-SIIT {_f(k['natural_siit'])} {'<' if k['met'] else '>='} natural-Tracr "
                     f"{_f(k['natural_tracr'])}: {'met' if k['met'] else 'NOT met'}")
    if r.get("plots"):
        lines += ["", "plots: " + ", ".join(r["plots"])]
    return "\n".join(lines)
