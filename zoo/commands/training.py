"""`zoo train case N`: compile, train with SIIT to criterion, validate, write the entry (and the
many-case runs' per-case job, zoo.train_many).

Top level is standard library only (the CLI must start fast); torch and siit are imported inside
the verbs. Training never imports transformer_lens (~8 s): siit runs its own TL-format model.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import sys
from pathlib import Path
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    from siit.config import ArchConfig, TrainConfig  # stdlib-only module: the help shows the real defaults
    from zoo.commands.common import add_common

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
    p.add_argument("--no-distractors", action="store_true",
                   help="plain SIIT as in InterpBench: no distractor tasks for out-of-circuit nodes and no head "
                   "rescale (their outputs are then squashed and their circuit readable from activation size). "
                   "Default: distractors on whenever strictness is trained")
    p.add_argument("--epochs", type=int, default=None, help=f"step budget in passes over the training set (default {d['epochs']})")
    p.add_argument("--seed", type=int, default=0, help=f"seed of data, correspondence, init and sampling (default {d['seed']})")
    p.add_argument("--lr", type=float, default=None, help=f"initial Adam learning rate (default {d['lr']:g}, or a planted "
                   "model's own: 0.005 for causal-bench-10x10 and -12x12; the paper 1e-3)")
    p.add_argument("--batch-size", type=int, default=None, help=f"pairs per step (default {d['batch_size']}; the paper 512)")
    p.add_argument("--n-train", type=int, default=None, metavar="N",
                   help=f"training sequences, drawn once from the case's sampler (default {d['n_train']}). An "
                   "epoch is one pass over them: with more, give fewer --epochs to keep the step budget "
                   "(--n-train 8192 --epochs 62 is about the default 4000 steps)")
    p.add_argument("--min-d-head", type=int, default=None, metavar="N",
                   help=f"smallest head width of the trained model (default {arch_default}: d_model = heads x "
                   "d_head, 16 for most cases); 8 gives every busy head and MLP twice the room, which "
                   "lets a distractor stuck below R² 0.9 in a d_model-16 model reach it (catalogue case 130)")
    p.add_argument("--criterion", type=float, default=None, help=f"target for accuracy, IIA, SIIA (default {d['criterion']})")
    p.add_argument("--out", metavar="DIR", help="entry directory (default <root>/entries/case-N or planted-NAME)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the checkpoint of an interrupted run with the same options")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default 1: the models are tiny; with several cases cores/jobs)")
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
    p.set_defaults(func=run_train)


def _train_config(args: argparse.Namespace):
    from siit.config import ConfigError, TrainConfig
    from zoo.errors import ZooError

    kw: dict[str, Any] = {"scheme": args.scheme, "seed": args.seed}
    for flag, field in (("lr", "lr"), ("batch_size", "batch_size"), ("epochs", "epochs"), ("n_train", "n_train"),
                        ("strict_weight", "strict_weight"), ("criterion", "criterion")):
        if getattr(args, flag) is not None:
            kw[field] = getattr(args, flag)
    if args.natural:
        if args.strict_weight:
            raise ZooError("--natural trains the behaviour loss only; it cannot take --strict-weight")
        kw.update(iit_weight=0.0, strict_weight=0.0)
    if args.no_distractors:
        kw.update(distractors=False)
    try:
        return TrainConfig(**kw)
    except ConfigError as exc:
        raise ZooError(str(exc)) from None


def _arch_config(args: argparse.Namespace):
    from siit.config import ArchConfig

    return ArchConfig() if args.min_d_head is None else ArchConfig(min_d_head=args.min_d_head)


def job_command(case_id: str, options: dict[str, Any]) -> list[str]:
    """The `zoo train case ID ...` that reproduces one case of a many-case run: the training options
    the workers get (zoo.train_many._OPTIONS) as flags, those left at their defaults omitted (a
    worker's entry must not record a bare command its options would not reproduce)."""
    from zoo.train_many import _OPTIONS

    command = ["zoo", "train", "case", case_id]
    defaults = {"scheme": "apph", "seed": 0}  # the parser's non-None defaults
    for key in _OPTIONS:
        value = options.get(key)
        if key in ("resume", "root") or value is None or value is False or defaults.get(key) == value:
            continue
        command += [f"--{key.replace('_', '-')}"] + ([] if value is True else [str(value)])
    return command


def with_task_defaults(config, task, *, lr_given: bool):
    """The config with the task's own defaults where the command line gave none (a planted model's
    learning rate, PlantedTask.lr)."""
    lr = getattr(task, "lr", None)
    return config if lr_given or lr is None else dataclasses.replace(config, lr=lr)


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


def _destination(args: argparse.Namespace, case) -> Path:
    from zoo.paths import entries_dir, zoo_root

    return Path(args.out).expanduser() if args.out else entries_dir(zoo_root(args.root)) / case.entry_name


def _check_writable(dest: Path) -> None:
    """The entry directory can be created or replaced, checked without writing anything."""
    from zoo.errors import ZooError

    if dest.exists() and not dest.is_dir():
        raise ZooError(f"output {dest} exists and is not a directory")
    parent = dest.parent
    while not parent.exists():
        if parent.parent == parent:
            break
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ZooError(f"cannot write the output directory {dest}: {parent} is not writable")


def _compiled(args: argparse.Namespace, case):
    """The high-level task of `case`: its (cached) compilation, or the planted model."""
    from rasp_programs.compile import CompileError
    from zoo.errors import ZooError
    from zoo.high_level_source import high_level_task
    from zoo.paths import compiled_dir, zoo_root

    try:
        return high_level_task(case, compiled_dir(zoo_root(args.root)))
    except CompileError as exc:
        raise ZooError(str(exc)) from None
    except PermissionError as exc:
        raise ZooError(f"cannot write the compile cache: {exc}") from None


def run_train(args: argparse.Namespace) -> int:
    from zoo.commands.common import resolve_case, step_bar
    from zoo.errors import CriterionNotMet

    from zoo import train_many
    from zoo.errors import ZooError

    if train_many.multi_requested(args):
        _check_args(args)
        _train_config(args)  # bad options are exit 2 before any case runs
        return train_many.run(args, job=train_case_job, met_criterion=_met_criterion)
    for flag in ("jobs", "ray"):
        if getattr(args, flag) is not None:
            raise ZooError(f"--{flag} goes with --all, --catalogue, --cases or --generated")
    if not (args.kind and args.id):
        raise ZooError("`zoo train` needs `case <id>` (e.g. `case 33`), --all, --catalogue, --cases or --generated")
    _check_args(args)
    case = resolve_case(args.kind, args.id)
    if case.family == "planted" and args.min_d_head is not None:  # its architecture is the planted model's own
        raise ZooError(f"--min-d-head applies to compiled cases; planted {case.id} has its own head width")
    dest = _destination(args, case)
    _check_writable(dest)
    config = _train_config(args)

    import torch

    from siit.trainer import TrainingDiverged, TrainingInterrupted, train
    from siit.validation import validate_model

    torch.set_num_threads(args.threads or 1)
    compiled = _compiled(args, case)
    config = with_task_defaults(config, compiled, lr_given=args.lr is not None)
    checkpoint_dir = dest.parent / f".{dest.name}.checkpoint"
    if not args.json:
        print(f"training {case.family} {case.id} ({case.name}), scheme {config.scheme} -> {dest}", file=sys.stderr)
    bar = step_bar(config.max_steps)
    try:
        result = train(compiled, config, _arch_config(args), checkpoint_dir=checkpoint_dir, resume=args.resume,
                       progress=bar.update_to)
    except TrainingInterrupted:
        bar.close()
        print(f"zoo: checkpoint saved in {checkpoint_dir}; rerun with --resume to continue", file=sys.stderr)
        raise
    except TrainingDiverged as exc:  # a run that missed its criterion (exit 1), with nothing to write
        bar.close()
        shutil.rmtree(checkpoint_dir, ignore_errors=True)  # its last checkpoint would only resume the divergence
        raise CriterionNotMet(f"{case.family} {case.id}: {exc}; no entry written (try a smaller --lr)") from None
    finally:
        bar.close()
    validation = validate_model(result.model, result.evaluator)
    dest = _write(dest, compiled, result=result, validation=validation,
                  command=["zoo", *sys.argv[1:]] if sys.argv else None)
    shutil.rmtree(checkpoint_dir, ignore_errors=True)
    summary = _summary(case, dest, result, validation)
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        _print_summary(summary)
    if not result.met_criterion:
        raise CriterionNotMet(
            f"{case.family} {case.id}: criterion {config.criterion} not met after {result.steps} steps "
            f"(accuracy {summary['accuracy']:.4f}, IIA min {summary['iia_min']:.4f}, "
            f"SIIA min {summary['siia_min']:.4f}); entry written to {dest} with met_criterion=false")
    return 0


def train_case_job(case_id: str, options: dict[str, Any], threads: int) -> tuple[dict[str, Any], dict[str, bytes] | None]:
    """One case of `zoo train --all` (zoo.train_many), in a worker process or a Ray task: compile,
    train, validate; return the summary row and the entry's files as bytes (installed by the
    driver, so a Ray node needs no shared disk). Any failure is a row, never an exception."""
    import time

    from zoo.train_many import summary_row

    start = time.perf_counter()
    try:
        return _train_case_job(case_id, options, threads, start)
    except BaseException as exc:  # noqa: BLE001 - a failed case is a row; Ctrl-C ends only this case
        return summary_row(case_id, "error", wall=time.perf_counter() - start,
                           error=f"{type(exc).__name__}: {exc}".splitlines()[0][:300]), None


def _train_case_job(case_id: str, options: dict[str, Any], threads: int, start: float):
    import tempfile
    import time

    import torch

    from siit.trainer import train
    from siit.validation import validate_model
    from zoo.artifact import read_entry
    from zoo.commands.common import resolve_case
    from zoo.paths import entries_dir
    from zoo.train_many import summary_row

    torch.set_num_threads(threads)
    args = argparse.Namespace(kind="case", id=case_id, **options)
    case = resolve_case("case", case_id)
    config = _train_config(args)
    try:
        compiled = _compiled(args, case)
    except Exception:  # noqa: BLE001 - the root's compile cache is not writable here (a Ray node)
        args.root = tempfile.mkdtemp(prefix="zoo-compile-")
        compiled = _compiled(args, case)
    checkpoint_dir: Path | None = entries_dir(Path(options["root"])) / f".{case.entry_name}.checkpoint"
    try:
        checkpoint_dir.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        checkpoint_dir = None
    result = train(compiled, config, _arch_config(args), checkpoint_dir=checkpoint_dir, resume=options["resume"])
    validation = validate_model(result.model, result.evaluator)
    with tempfile.TemporaryDirectory(prefix="zoo-entry-") as tmp:
        dest = _write(Path(tmp) / case.entry_name, compiled, result=result, validation=validation,
                      command=job_command(case_id, options))
        files = dict(read_entry(dest).data)
    if checkpoint_dir is not None:
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
    m = result.metrics
    row = summary_row(case_id, "met" if result.met_criterion else "not met", met=result.met_criterion,
                      steps=result.steps, wall=time.perf_counter() - start, accuracy=m["accuracy"],
                      iia=m["iia_min"], siia=m["siia_min"], siia_all=m["siia_all"],
                      effect=validation["max_out_of_circuit_effect"]["resample"])
    return row, files


def _write(dest: Path, compiled, *, result, validation, command) -> Path:
    """Write the entry and return where: `dest`, unless this run missed its criterion and `dest`
    holds an entry that met it; then beside it (`case-33.failed/`, not an entry name), and the
    good entry is kept. NaN anywhere in the files is refused (zoo.artifact), nothing written."""
    from siit.export import case_json, circuit_json, training_json
    from zoo.artifact import FAILED_SUFFIX, write_entry
    from zoo.card import render_model_card

    from zoo.inert_edges import inert_section

    circuit = circuit_json(compiled, result.correspondence)
    # validation.json lists the labelled edges no counterfactual moves (issue 10), computed here so
    # that siit's validation stays model-only
    validation = {**validation, "inert_edges": inert_section(result.low_config, result.model.state_dict(), circuit,
                                                             compiled)}
    files = {
        "config.json": result.low_config,
        "circuit.json": circuit,
        "case.json": case_json(compiled),
        "training.json": training_json(result, command=command),
        "validation.json": validation,
    }
    readme = render_model_card(name=dest.name, config=files["config.json"], circuit=files["circuit.json"],
                               case=files["case.json"], training=files["training.json"],
                               validation=validation)
    if not result.met_criterion and _met_criterion(dest):
        kept, dest = dest, dest.with_name(dest.name + FAILED_SUFFIX)
        print(f"zoo: kept the entry in {kept} (it met its criterion); this run's entry goes to {dest}",
              file=sys.stderr)
    write_entry(dest, state_dict=result.model.state_dict(), json_files=files, readme=readme)
    return dest


def _met_criterion(entry_dir: Path) -> bool:
    """Whether `entry_dir` holds a readable entry that nothing says failed: its training met its
    criterion, or it has no training.json (a pulled or hand-made entry, which loads and pulls as
    good): a run that missed its criterion never replaces it, and many-case runs skip it."""
    from zoo.artifact import ArtifactError, read_entry

    if not entry_dir.is_dir():
        return False
    try:
        training = read_entry(entry_dir).json("training.json")
    except ArtifactError:
        return False  # no usable entry there: nothing better to keep
    return training is None or training.get("met_criterion") is True


def _summary(case, dest: Path, result, validation: dict[str, Any]) -> dict[str, Any]:
    m = result.metrics
    return {
        "id": case.id, "family": case.family, "entry": str(dest), "met_criterion": result.met_criterion,
        "steps": result.steps, "epochs": round(result.steps / result.config.steps_per_epoch, 3),
        "wall_time_s": round(result.seconds, 3),
        "accuracy": m["accuracy"], "iia": m["iia"], "iia_min": m["iia_min"],
        "siia": m["siia"], "siia_min": m["siia_min"], "siia_all": m["siia_all"],
        "max_out_of_circuit_effect": validation["max_out_of_circuit_effect"],
        "max_out_of_circuit_effect_by_shape": validation["max_out_of_circuit_effect_by_shape"],
        "max_out_of_circuit_effect_by_length": validation["max_out_of_circuit_effect_by_length"],
        "accuracy_non_circuit_ablated": validation["accuracy_non_circuit_ablated"],
        "distractor_r2_min": m.get("distractor_r2_min"),
        "by_shape": m.get("by_shape"),
        "heuristic_separation": {k: v["separation"] for k, v in validation["realism"]["heuristics"].items()},
        "variance_floor_ratio": validation["realism"]["variance_floor_ratio"],
    }


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
          f"resample {worst['resample']:.4f}, mean {worst['mean']:.4f}")
    sep = s["heuristic_separation"]
    r2 = f", distractor R² min {s['distractor_r2_min']:.3f}" if s["distractor_r2_min"] is not None else ""
    print(f"  circuit vs activation/weight size (separation, 0.5 = no better than chance): output norm "
          f"{sep['output_norm']:.2f}, output variance {sep['output_variance']:.2f}, weight norm "
          f"{sep['weight_norm']:.2f}{r2}")
