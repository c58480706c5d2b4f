"""`zoo train case N` and `zoo train --all | --catalogue | --cases | --generated`: parse the options
into a TrainOptions, call zoo.train_entry.train_entry or zoo.train_many.train_many, print the result.

Top level is standard library only (the CLI must start fast).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    from siit.config import ArchConfig, TrainConfig  # stdlib-only module: the help shows the real defaults
    from zoo.commands.common import add_common, add_device

    d = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    arch_default = ArchConfig.min_d_head
    p = sub.add_parser(
        "train", help="train a low-level transformer on a case with SIIT, validate it, write the entry",
        description="Compile the case (cached), train a low-level transformer with Strict Interchange "
        "Intervention Training until accuracy, IIA and SIIA reach the criterion on held-out data, "
        "measure per-node effects and write the entry (safetensors + JSON + card). "
        "Exit 1 if the criterion is not met (the entry is still written, met_criterion=false).")
    add_common(p, kind_id=False)
    p.add_argument("kind", nargs="?", choices=("case", "planted"), help="what kind of entry")
    p.add_argument("id", nargs="?", help="case number (e.g. 33), gen-SEED-INDEX, package.module:function, "
                   "or a planted model (e.g. causal-bench-4x4; `zoo list planted`)")
    p.add_argument("--scheme", choices=("alg1", "apph"), default="apph",
                   help="alg1: the paper's Algorithm 1 (three updates per batch, one non-aligned node "
                   "per strictness sample); apph: Appendix H (one summed loss, each non-aligned node "
                   "ablated w.p. 0.5, betas (0.9, 0.9), linear lr decay). Default apph")
    p.add_argument("--strict-weight", type=float, default=None, metavar="W",
                   help=f"Weight_SIIT (default {d['strict_weight']}; 0 trains plain IIT)")
    p.add_argument("--natural", action="store_true",
                   help="behaviour loss only: a 'natural' model with the same architecture")
    _add_busy(p)
    p.add_argument("--strict-edges", action=argparse.BooleanOptionalAction, default=None,
                   help="edge-level strictness (issue 36): strictness also patches single edges outside the "
                   "circuit, training runs until each one's SIIA meets the criterion, and the entry fails unless "
                   "validation.json's exact edge patching (pooled and per input length) finds none above the bound. "
                   "Slower. Default on for the main cases 3, 4, 8, 13, 18, 26, 29, 34-37 and the failure-mode planted models, "
                   "where it trains; off (--no-strict-edges) elsewhere: the paper's node-level SIIT, whose edge "
                   "labels validation.json only reports, and patching may contradict them")
    p.add_argument("--epochs", type=int, default=None, help=f"step budget in passes over the training set (default {d['epochs']}, or a planted "
                   "model's own: 750 for a multi-task bundle's views)")
    p.add_argument("--seed", type=int, default=0, help=f"seed of data, correspondence, init and sampling (default {d['seed']})")
    p.add_argument("--lr", type=float, default=None, help=f"initial Adam learning rate (default {d['lr']:g}, or a planted "
                   "model's own: 0.005 for causal-bench-10x10 and -12x12; the paper 1e-3)")
    p.add_argument("--batch-size", type=int, default=None, help=f"pairs per step (default {d['batch_size']}; the paper 512)")
    p.add_argument("--n-train", type=int, default=None, metavar="N",
                   help=f"training sequences, drawn once from the case's sampler (default {d['n_train']}, or a planted "
                   "model's own: 8192 for the views of the bundle mt-2x2, 32768 for mt-2x4's and mt-4x4's). An "
                   "epoch is one pass over them: with more, give fewer --epochs to keep the step budget "
                   "(--n-train 8192 --epochs 62 is about the default 4000 steps)")
    p.add_argument("--min-d-head", type=int, default=None, metavar="N",
                   help=f"smallest head width of the trained model (default {arch_default}, or a case's own: 8 for "
                   "cases 3 and 4, whose edge-level strictness needs it; d_model = heads x d_head, 16 for most cases); 8 "
                   "gives every busy head and MLP twice the room")
    p.add_argument("--criterion", type=float, default=None, help=f"target for accuracy, IIA, SIIA (default {d['criterion']})")
    p.add_argument("--lean-activations", action=argparse.BooleanOptionalAction, default=None,
                   help="the wide-model step: heads summed from their z, one copy of the source activations (the same "
                   "losses to float rounding; 2.4x faster steps at 2 layers x 49 heads, as fast on small models). On "
                   "for planted large-circuit, off elsewhere: a seed reproduces the weights entries were trained to")
    _add_output(p)
    add_device(p)
    _add_many(p)
    p.set_defaults(func=run_train)


def _add_busy(p: argparse.ArgumentParser) -> None:
    """What the out-of-circuit nodes are given to do (siit.distractors)."""
    p.add_argument("--no-distractors", action="store_true",
                   help="plain SIIT as in InterpBench: no distractor tasks for out-of-circuit nodes and no head "
                   "rescale (their outputs are then squashed and their circuit readable from activation size). "
                   "Default: distractors on whenever strictness is trained")
    p.add_argument("--busy-components", type=int, default=None, metavar="K", help="busy nodes write up to K features "
                   "each (1-6; the same computation on other token features, as many directions as the circuit's "
                   "own nodes of their type write, x 1/2 to 2; siit.busy_components). Default 1")
    p.add_argument("--busy-reads", type=int, default=None, metavar="N", help="busy nodes read up to N earlier busy "
                   "heads (0-3): an MLP computes on what they compute, a head copies their running means from "
                   "positions back, so later components use the busy heads' work (siit.busy_reads). Default 0: "
                   "every busy node computes on tokens")


def _add_output(p: argparse.ArgumentParser) -> None:
    """Where the entry goes and how the run is made: --out, --all-views, --resume, --threads."""
    p.add_argument("--out", metavar="DIR", help="entry directory (default <root>/entries/case-N or planted-NAME)")
    p.add_argument("--all-views", action="store_true",
                   help="for a view of a multi-task bundle (planted mt-2x2.rare-feature, ...): train the bundle once "
                   "and write the entry of every one of its views (same weights, each validated on its own task) to "
                   "<root>/entries, instead of training once per view")
    p.add_argument("--resume", action="store_true",
                   help="continue from the checkpoint of an interrupted run with the same options")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads of each training run (default 1, for one case and for every worker of many, "
                   "whatever --jobs: the weights depend on the thread count; training.json records it)")


def _add_many(p: argparse.ArgumentParser) -> None:
    many = p.add_argument_group("many cases (zoo.train_many): instead of `case <id>`; entries that met "
                                "their criterion are skipped, exit 1 if any case failed")
    many.add_argument("--all", action="store_true", help="InterpBench's 16 main cases")
    many.add_argument("--catalogue", action="store_true", help="every built-in case (the 16 and Appendix H's)")
    many.add_argument("--cases", metavar="ID,ID,...", help="these cases, e.g. 3,4,33")
    many.add_argument("--generated", type=int, metavar="N", help="N cases from `zoo generate` (default settings)")
    many.add_argument("--generated-seed", type=int, default=0, metavar="S", help="seed of --generated (default 0)")
    many.add_argument("--jobs", type=int, metavar="J", help="worker processes (default one per core)")
    many.add_argument("--ray", metavar="ADDRESS", help="run the cases as Ray tasks on the cluster at ADDRESS "
                      "(HOST:PORT, ray://HOST:PORT, auto; local starts one here); needs the ray extra")


def _train_config(args: argparse.Namespace):
    from siit.config import ConfigError, TrainConfig
    from zoo.errors import ZooError

    kw: dict[str, Any] = {"scheme": args.scheme, "seed": args.seed}
    for flag, field in (("lr", "lr"), ("batch_size", "batch_size"), ("epochs", "epochs"), ("n_train", "n_train"),
                        ("strict_weight", "strict_weight"), ("criterion", "criterion"),
                        ("busy_components", "distractor_components"), ("busy_reads", "distractor_reads")):
        if getattr(args, flag) is not None:
            kw[field] = getattr(args, flag)
    if args.natural:
        if args.strict_weight:
            raise ZooError("--natural trains the behaviour loss only; it cannot take --strict-weight")
        kw.update(iit_weight=0.0, strict_weight=0.0)
    if args.no_distractors:
        for flag in ("busy_components", "busy_reads"):
            if getattr(args, flag) is not None:
                raise ZooError(f"--{flag.replace('_', '-')} shapes the distractors; it cannot take --no-distractors")
        kw.update(distractors=False)
    if args.strict_edges is not None:
        kw.update(strict_edges=args.strict_edges)
    if getattr(args, "lean_activations", None) is not None:
        kw.update(lean_activations=args.lean_activations)
    try:
        return TrainConfig(**kw)
    except ConfigError as exc:
        raise ZooError(str(exc)) from None


def _arch_config(args: argparse.Namespace):
    from siit.config import ArchConfig

    return ArchConfig() if args.min_d_head is None else ArchConfig(min_d_head=args.min_d_head)


_OPTION_FLAGS = ("scheme", "strict_weight", "natural", "no_distractors", "strict_edges", "epochs", "seed", "lr",
                 "batch_size", "n_train", "min_d_head", "criterion", "lean_activations", "busy_components",
                 "busy_reads")
"""The training options a many-case worker's entry records as flags of its `zoo train case ID`."""
_NEGATABLE = ("strict_edges", "lean_activations")
"""Flags with a --no- form (None: not given, the case's own default)."""


def option_flags(args: argparse.Namespace) -> tuple[str, ...]:
    """The flags of `zoo train case ID ...` that reproduce one case of a many-case run, those left at
    their defaults omitted (a worker's entry must not record a bare command its options would not
    reproduce)."""
    command: list[str] = []
    defaults = {"scheme": "apph", "seed": 0}  # the parser's non-None defaults
    for key in _OPTION_FLAGS:
        value = getattr(args, key, None)
        flag = key.replace("_", "-")
        if value is False and key in _NEGATABLE:  # --no-strict-edges turns off a case's own default
            command.append(f"--no-{flag}")
        if value is None or value is False or defaults.get(key) == value:
            continue
        command += [f"--{flag}"] + ([] if value is True else [str(value)])
    return tuple(command)


def train_options(args: argparse.Namespace):
    """The parsed options as the one object training takes (checked: bad input is a ZooError)."""
    from zoo.commands.common import device_from
    from zoo.train_entry import TRAIN_THREADS, TrainOptions

    _check_args(args)
    return TrainOptions(config=_train_config(args), arch=_arch_config(args), lr_given=args.lr is not None,
                        strict_edges_given=args.strict_edges is not None, min_d_head_given=args.min_d_head is not None,
                        epochs_given=args.epochs is not None, n_train_given=args.n_train is not None,
                        lean_given=getattr(args, "lean_activations", None) is not None,
                        all_views=bool(getattr(args, "all_views", False)),
                        root=args.root, resume=args.resume, threads=args.threads or TRAIN_THREADS,
                        flags=option_flags(args), device=device_from(args))


def _check_args(args: argparse.Namespace) -> None:
    """Bad numbers are bad input before anything is imported or written."""
    from zoo.errors import ZooError

    for flag in ("lr", "strict_weight", "criterion"):  # NaN / inf is never a training option
        value = getattr(args, flag, None)
        if value is not None and not math.isfinite(value):
            raise ZooError(f"--{flag.replace('_', '-')} must be a finite number, got {value}")
    if args.lr is not None and not args.lr > 0:
        raise ZooError(f"--lr must be > 0, got {args.lr}")
    for flag in ("batch_size", "epochs", "n_train", "min_d_head", "threads"):
        value = getattr(args, flag, None)
        if value is not None and value < 1:
            raise ZooError(f"--{flag.replace('_', '-')} must be >= 1, got {value}")
    if getattr(args, "busy_components", None) not in (None, *range(1, 7)):
        raise ZooError(f"--busy-components must be an integer from 1 to 6, got {args.busy_components}")
    if getattr(args, "busy_reads", None) not in (None, *range(0, 4)):
        raise ZooError(f"--busy-reads must be an integer from 0 to 3, got {args.busy_reads}")


def run_train(args: argparse.Namespace) -> int:
    from zoo.commands.common import ValidationProgress, step_bar
    from zoo.errors import CriterionNotMet, ZooError
    from zoo.high_level_source import resolve_case
    from zoo.train_entry import check_writable, checkpoint_dir, destination, train_entry

    selection = _selection(args)
    if selection.given():
        return _run_many(args, selection)
    for flag in ("jobs", "ray"):
        if getattr(args, flag) is not None:
            raise ZooError(f"--{flag} goes with --all, --catalogue, --cases or --generated")
    if not (args.kind and args.id):
        raise ZooError("`zoo train` needs `case <id>` (e.g. `case 33`), --all, --catalogue, --cases or --generated")
    _check_args(args)
    case = resolve_case(args.kind, args.id)
    if case.family == "planted" and args.min_d_head is not None:  # its architecture is the planted model's own
        raise ZooError(f"--min-d-head applies to compiled cases; planted {case.id} has its own head width")
    dest = destination(args.root, args.out, case)
    check_writable(dest)
    if args.all_views:
        _check_all_views(args, case)
    options = train_options(args)

    from siit.trainer import TrainingDiverged, TrainingInterrupted

    if not args.json:
        print(f"training {case.family} {case.id} ({case.name}), scheme {options.config.scheme}, on {options.device} "
              f"-> {dest}", file=sys.stderr)
    bar = step_bar(options.config.max_steps)
    validating = ValidationProgress(before=bar)
    try:
        trained = train_entry(case, options, dest, progress=bar.update_to, stage=validating.stage,
                              command=["zoo", *sys.argv[1:]] if sys.argv else None)
    except TrainingInterrupted:
        bar.close()
        print(f"zoo: checkpoint saved in {checkpoint_dir(dest)}; rerun with --resume to continue", file=sys.stderr)
        raise
    except TrainingDiverged as exc:  # a run that missed its criterion (exit 1), with nothing to write
        bar.close()
        shutil.rmtree(checkpoint_dir(dest), ignore_errors=True)  # its last checkpoint would only resume the divergence
        raise CriterionNotMet(f"{case.family} {case.id}: {exc}; no entry written (try a smaller --lr)") from None
    finally:
        validating.close()  # and the step bar
    summary, result = trained.summary, trained.result
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        _print_summary(summary)
    missed = [name for name, view in (summary.get("other_views") or {}).items() if not view["met_criterion"]]
    if result.met_criterion and missed:
        raise CriterionNotMet(f"{case.family} {case.id}: met its criterion, but its bundle's view(s) "
                              f"{', '.join(missed)} did not (entries written with met_criterion=false)")
    if not result.met_criterion:
        edge = _bounds_missed(summary, result.config.trains_edges)
        raise CriterionNotMet(
            f"{case.family} {case.id}: criterion {result.config.criterion} not met after {result.steps} steps "
            f"(accuracy {summary['accuracy']:.4f}, IIA min {summary['iia_min']:.4f}, "
            f"SIIA min {summary['siia_min']:.4f}{edge}); entry written to {trained.dest} with met_criterion=false")
    return 0


def _check_all_views(args: argparse.Namespace, case) -> None:
    """--all-views: a multi-task view, no --out, and every other view's folder writable (exit 2 before training)."""
    from zoo.errors import ZooError
    from zoo.multi_task_entry import sibling_views
    from zoo.train_entry import check_writable, destination

    if args.out:
        raise ZooError("--all-views writes every view to <root>/entries; it does not take --out")
    views = sibling_views(case)
    if views is None:
        raise ZooError(f"--all-views applies to a view of a multi-task bundle (e.g. planted mt-2x2.rare-feature); "
                       f"{case.family} {case.id} is not one")
    for view in views:
        check_writable(destination(args.root, None, view))


def _bounds_missed(summary: dict, trains_edges: bool) -> str:
    """The bounds a failed entry missed, for its one-line error: its edges' (when it trained them)
    on padded inputs and per length, and its out-of-circuit nodes'."""
    out = ""
    edges, eb = summary["edge_effects"], summary.get("edge_bounds") or {}
    if trains_edges and edges.get("exact") is False:
        out += f", edge {edges['worst_edge']} effect {edges['max_out_of_circuit_edge_effect']} > bound {edges['bound']}"
    if trains_edges and eb.get("exact") is False:
        w = eb["worst"]
        how = f" ({w['ablation']})" if w.get("ablation") else ""
        out += f", edge {w['edge']} effect {w['effect']}{how} > bound {eb['bound']} at length {w['length']}"
    bounds, w = summary["effect_bounds"], summary["effect_bounds"].get("worst") or {}
    if bounds.get("exact") is False:
        out += (f", node {w['node']} effect {w['effect']} > bound {bounds['bound']} at length {w['length']} "
                f"({w['shape']}, {w['ablation']})")
    return out


def _selection(args: argparse.Namespace):
    from zoo.train_many import CaseSelection

    return CaseSelection(all=args.all, catalogue=args.catalogue, cases=args.cases, generated=args.generated,
                         generated_seed=args.generated_seed)


def _run_many(args: argparse.Namespace, selection) -> int:
    from zoo.errors import ZooError
    from zoo.train_many import SUMMARY_FILE, case_ids, train_many
    from zoo.train_summary import format_table
    from zoo.train_workers import Engine, check_engine

    options = train_options(args)  # bad options are exit 2 before any case runs
    given = selection.given()
    if len(given) > 1:
        raise ZooError(f"give one of --all, --catalogue, --cases, --generated, not {' and '.join(given)}")
    if args.kind or args.id:
        raise ZooError(f"give either `case <id>` or {given[0]}, not both")
    if args.out:
        raise ZooError(f"--out names one entry; {given[0]} writes entries under --root")
    if args.all_views:
        raise ZooError("--all-views goes with one view of a multi-task bundle (`planted mt-2x2.rare-feature`), "
                       f"not {given[0]}")
    engine = Engine(jobs=args.jobs, ray=args.ray, quiet=args.json)
    check_engine(engine)
    summary = train_many(case_ids(selection), options, engine)
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(format_table(summary["rows"]))
        print(f"{summary['trained']} trained, {summary['skipped']} skipped, {len(summary['failed'])} failed"
              f"{' (' + ', '.join(summary['failed']) + ')' if summary['failed'] else ''} in "
              f"{summary['wall_s']:.1f} s; summary in {Path(summary['root']) / SUMMARY_FILE}")
    return 1 if summary["failed"] else 0


def _print_summary(s: dict[str, Any]) -> None:
    status = "met" if s["met_criterion"] else "NOT met"
    print(f"{s['family']} {s['id']}: criterion {status} after {s['steps']} steps ({s['epochs']} epochs, "
          f"{s['wall_time_s']:.1f} s) -> {s['entry']}")
    print(f"  accuracy {s['accuracy']:.4f}  IIA {s['iia']:.4f} (min {s['iia_min']:.4f})  "
          f"SIIA {s['siia']:.4f} (min {s['siia_min']:.4f}, all at once {s['siia_all']:.4f})")
    by_shape = s.get("by_shape") or {}
    if len({json.dumps(part, sort_keys=True) for part in by_shape.values()}) < 2:
        by_shape = {}  # one line says it all (causal models compute the same in every shape)
    for shape, part in by_shape.items():  # bidirectional models: which shape lags
        r2 = f", distractor R² min {part['distractor_r2_min']:.3f} ({part['worst_distractor']})" \
            if "distractor_r2_min" in part else ""
        lagging = f" ({part['worst_iia_node']})" if part["iia_min"] < 1.0 else ""
        print(f"  {shape:>13} inputs: accuracy {part['accuracy']:.4f}  IIA min {part['iia_min']:.4f}{lagging}  "
              f"SIIA min {part['siia_min']:.4f}{r2}")
    e = s["max_out_of_circuit_effect"]
    print(f"  largest out-of-circuit effect over {', '.join(s['max_out_of_circuit_effect_by_shape'])} inputs: "
          f"resample {e['resample']:.4f}, mean {e['mean']:.4f}, zero {e['zero']:.4f}")
    by_length = s["max_out_of_circuit_effect_by_length"]
    worst = {k: max(v[k] for v in by_length.values()) for k in ("resample", "mean")}
    print(f"  ... at any one input length ({min(by_length, key=int)}-{max(by_length, key=int)}): "
          f"resample {worst['resample']:.4f}, mean {worst['mean']:.4f} (validation set)")
    from zoo.card_bounds import bound_sentence, edge_bound_sentence
    from zoo.train_summary import saturation_line

    if sentence := bound_sentence(s.get("effect_bounds"), markdown=False):
        print(f"  out-of-circuit bound: {sentence}")
    edges = s.get("edge_effects") or {}
    if edges.get("skipped"):
        print(f"  edge-level ground truth: not measured ({edges['skipped']})")
    elif edges.get("exact") is not None:
        verdict = "exact" if edges["exact"] else "NOT exact (patching contradicts the edge labels; issue 36)"
        print(f"  edge-level ground truth: {verdict}: largest non-circuit edge effect "
              f"{edges['max_out_of_circuit_edge_effect']:.4f}{f' ({w})' if (w := edges['worst_edge']) else ''}, "
              f"bound {edges['bound']}")
    if sentence := edge_bound_sentence(s.get("edge_bounds"), markdown=False):
        print(f"  edge-level bound: {sentence}")
    for row in s.get("saturation") or ():  # a family's saturated heads (siit.saturation)
        print(f"  {saturation_line(row)}")
    sep = s["heuristic_separation"]
    r2 = f", distractor R² min {s['distractor_r2_min']:.3f}" if s["distractor_r2_min"] is not None else ""
    print(f"  circuit vs activation/weight size (separation, 0.5 = no better than chance): output norm "
          f"{sep['output_norm']:.2f}, output variance {sep['output_variance']:.2f}, weight norm "
          f"{sep['weight_norm']:.2f}{r2}")
    looks = s.get("looks") or {}
    if looks.get("max_separation") is not None:
        over = ", ".join(looks["over_bound"]) or "none"
        print(f"  looks that never intervene (eval.core.looks; `zoo realism` has each): worst separation "
              f"{looks['max_separation']:.2f}, median {looks['median_separation']:.2f}; over the bound: {over}")
    for name, view in (s.get("other_views") or {}).items():  # --all-views: the same weights as each task's entry
        print(f"  view {name}: criterion {'met' if view['met_criterion'] else 'NOT met'} -> {view['entry']}")
