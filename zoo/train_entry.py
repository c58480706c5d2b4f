"""A case + training options -> a trained, validated entry written to disk: the library behind
`zoo train` (one case here; many cases in zoo.train_many, whose workers run `train_case_job`).

Top level is standard library only (the CLI imports it to start fast); torch and siit are imported
inside the functions. Training never imports transformer_lens (~8 s): siit runs its own TL-format model.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zoo.entry_verdicts import (
    cpu_state,
    with_bound_verdict,
    with_edge_verdict,
    with_patching_checks,
)

__all__ = ["with_bound_verdict", "with_edge_verdict", "with_patching_checks"]  # re-exported for callers

TRAIN_THREADS = 1
"""torch threads of every training run unless --threads says otherwise, whatever --jobs is: float32
results depend on the thread count, so an entry's weights must not depend on the machine's cores."""


@dataclasses.dataclass(frozen=True)
class TrainOptions:
    """What a training run needs beside its case, built once by the CLI and handed as is to workers."""

    config: Any
    """siit.config.TrainConfig."""
    arch: Any
    """siit.config.ArchConfig."""
    lr_given: bool = False
    """Whether --lr was given (otherwise a planted model's own learning rate applies)."""
    strict_edges_given: bool = False
    """Whether --strict-edges or --no-strict-edges was given (otherwise a planted model's own default applies)."""
    epochs_given: bool = False
    """Whether --epochs was given (otherwise a planted model's own step budget applies)."""
    n_train_given: bool = False
    """Whether --n-train was given (otherwise a planted model's own training set size applies)."""
    lean_given: bool = False
    """Whether --lean-activations or --no-lean-activations was given (otherwise a planted model's own applies)."""
    min_d_head_given: bool = False
    """Whether --min-d-head was given (otherwise a case's own head width applies, Case.min_d_head)."""
    all_views: bool = False
    """For a multi-task bundle's view: write every view's entry from the one training (--all-views)."""
    root: str | None = None
    """Zoo root (None: $ZOO_HOME or ~/.cache/zoo)."""
    resume: bool = False
    threads: int = TRAIN_THREADS
    flags: tuple[str, ...] = ()
    """The `zoo train` flags that reproduce these options (a many-case worker records
    `zoo train case ID *flags` in training.json)."""
    device: str = "cpu"
    """torch device of the run, resolved from --device (eval.core.device): `cpu` or `cuda:N`."""


def destination(root: str | None, out: str | None, case) -> Path:
    """The entry directory: `out`, or <root>/entries/<entry name>."""
    from zoo.paths import entries_dir, zoo_root

    return Path(out).expanduser() if out else entries_dir(zoo_root(root)) / case.entry_name


def check_writable(dest: Path) -> None:
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


def compiled_task(root: str | None, case):
    """The high-level task of `case`: its (cached) compilation, or the planted model."""
    from rasp_programs.compile import CompileError
    from zoo.errors import ZooError
    from zoo.high_level_source import high_level_task
    from zoo.paths import compiled_dir, zoo_root

    try:
        return high_level_task(case, compiled_dir(zoo_root(root)))
    except CompileError as exc:
        raise ZooError(str(exc)) from None
    except PermissionError as exc:
        raise ZooError(f"cannot write the compile cache: {exc}") from None


def with_task_defaults(config, task, *, lr_given: bool, strict_edges_given: bool = False, epochs_given: bool = False,
                       n_train_given: bool = False, lean_given: bool = False):
    """The config with the task's own defaults where the command line gave none (a planted model's
    learning rate, edge-level strictness, step budget, training set size, wide-model step, the busy targets'
    position profile and settings no option sets, PlantedTask.lr, .strict_edges, .epochs, .n_train,
    .lean_activations, .distractor_profile and .training;
    a case's edge-level strictness, Case.strict_edges); no distractors for a task whose circuit covers the
    whole model (PlantedTask.covers_model: a multi-task bundle)."""
    lr, edges = getattr(task, "lr", None), getattr(task, "strict_edges", None)
    if edges is None and getattr(getattr(task, "case", None), "strict_edges", False):
        edges = True  # a RASP case that trains edge-exact (rasp_programs.case.Case.strict_edges)
    if not lr_given and lr is not None:
        config = dataclasses.replace(config, lr=lr)
    if not strict_edges_given and edges is not None:
        config = dataclasses.replace(config, strict_edges=edges)
    epochs = getattr(task, "epochs", None)
    if not epochs_given and epochs is not None:
        config = dataclasses.replace(config, epochs=epochs)
    n_train = getattr(task, "n_train", None)
    if not n_train_given and n_train is not None:
        config = dataclasses.replace(config, n_train=n_train)
    if not lean_given and getattr(task, "lean_activations", False):
        config = dataclasses.replace(config, lean_activations=True)
    if getattr(task, "distractor_profile", None) is not None:  # no command-line option sets it
        config = dataclasses.replace(config, distractor_profile=task.distractor_profile)
    config = dataclasses.replace(config, **dict(getattr(task, "training", ())))  # no command-line option sets these
    if getattr(task, "covers_model", False) and config.distractors:
        # every component is some task's circuit (a multi-task bundle): nothing is left for busy-work
        config = dataclasses.replace(config, distractors=False)
    return config


def arch_for(options: TrainOptions, task: Any):
    """options.arch with the case's own smallest head width where --min-d-head was not given (Case.min_d_head)."""
    width = getattr(getattr(task, "case", None), "min_d_head", None)
    if options.min_d_head_given or width is None:
        return options.arch
    return dataclasses.replace(options.arch, min_d_head=width)


def checkpoint_dir(dest: Path) -> Path:
    """Where an interrupted run of `dest` keeps its checkpoint (`--resume` continues from it)."""
    return dest.parent / f".{dest.name}.checkpoint"


@dataclasses.dataclass(frozen=True)
class TrainedEntry:
    """What one `train_entry` run wrote and measured."""

    dest: Path
    result: Any
    """siit.trainer.TrainResult."""
    validation: dict[str, Any]
    summary: dict[str, Any]
    other_views: dict[str, tuple[Path, bool]] = dataclasses.field(default_factory=dict)
    """With --all-views: the entries written for the bundle's other views (view name -> folder, and
    whether that view met its criterion)."""


def train_entry(case, options: TrainOptions, dest: Path, *, command: list[str] | None,
                progress: Callable[[int], Any] | None = None, stage: Callable[[str], Any] | None = None) -> TrainedEntry:
    """Compile (cached), train to criterion, validate and write the entry of `case` to `dest` (or
    beside it, see write_entry_files); the checkpoint is removed once the entry is written. With
    options.all_views (a multi-task view), every other view of its bundle is written too, each to
    its default folder under the root. siit.trainer.TrainingInterrupted leaves the checkpoint in
    checkpoint_dir(dest). stage: told each part of the final validation as it starts (siit.validation.PARTS,
    then zoo.entry_verdicts.PATCHING_PARTS)."""
    import torch

    from siit.trainer import train
    from siit.validation import validate_model
    from zoo.multi_task_entry import training_task, validate_views

    torch.set_num_threads(options.threads)
    compiled = compiled_task(options.root, case)
    trained_on = training_task(compiled)  # a multi-task view trains its bundle (planted.multi_task)
    config = with_task_defaults(options.config, trained_on, lr_given=options.lr_given,
                                strict_edges_given=options.strict_edges_given, epochs_given=options.epochs_given,
                                n_train_given=options.n_train_given, lean_given=options.lean_given)
    result = train(trained_on, config, arch_for(options, trained_on), checkpoint_dir=checkpoint_dir(dest), resume=options.resume,
                   progress=progress, device=torch.device(options.device))
    others: dict[str, tuple[Path, bool]] = {}
    if trained_on is not compiled:
        views = validate_views(result, compiled, torch.device(options.device))
        _, result, validation = views.pop(compiled.case.id)
        if options.all_views:  # the same weights, validated as each task's ground truth
            others = {name: (write_entry_files(destination(options.root, None, task.case), task, result=r,
                                               validation=v, command=command), r.met_criterion)
                      for name, (task, r, v) in views.items()}
    else:
        validation = with_patching_checks(validate_model(result.model, result.evaluator, compiled,
                                                         evaluation=result.final_evaluation, stage=stage),
                                          compiled, result, stage=stage)
        result = with_bound_verdict(with_edge_verdict(result, validation), validation)
    dest = write_entry_files(dest, compiled, result=result, validation=validation, command=command)
    shutil.rmtree(checkpoint_dir(dest), ignore_errors=True)
    summary = entry_summary(case, dest, result, validation)
    if options.all_views:
        summary["other_views"] = {name: {"entry": str(path), "met_criterion": met}
                                  for name, (path, met) in others.items()}
    return TrainedEntry(dest, result, validation, summary, others)


def train_case_job(case_id: str, options: TrainOptions) -> tuple[dict[str, Any], dict[str, bytes] | None]:
    """One case of `zoo train --all` (zoo.train_many), in a worker process or a Ray task: compile,
    train, validate; return the summary row and the entry's files as bytes (installed by the
    driver, so a Ray node needs no shared disk). Any failure is a row, never an exception."""
    import time

    from zoo.train_summary import summary_row

    start = time.perf_counter()
    try:
        return _train_case_job(case_id, options, start)
    except BaseException as exc:  # noqa: BLE001 - a failed case is a row; Ctrl-C ends only this case
        return summary_row(case_id, "error", wall=time.perf_counter() - start,
                           error=f"{type(exc).__name__}: {exc}".splitlines()[0][:300]), None


def _train_case_job(case_id: str, options: TrainOptions, start: float):
    import tempfile
    import time

    import torch

    from siit.trainer import train
    from siit.validation import validate_model
    from zoo.artifact import read_entry
    from zoo.high_level_source import resolve_case
    from zoo.paths import entries_dir
    from zoo.train_summary import summary_row

    torch.set_num_threads(options.threads)
    case = resolve_case("case", case_id)
    try:
        compiled = compiled_task(options.root, case)
    except Exception:  # noqa: BLE001 - the root's compile cache is not writable here (a Ray node)
        compiled = compiled_task(tempfile.mkdtemp(prefix="zoo-compile-"), case)
    # the case's own defaults, as `zoo train case ID` takes them (Case.strict_edges, Case.min_d_head)
    config = with_task_defaults(options.config, compiled, lr_given=options.lr_given,
                                strict_edges_given=options.strict_edges_given, epochs_given=options.epochs_given,
                                n_train_given=options.n_train_given, lean_given=options.lean_given)
    checkpoint: Path | None = entries_dir(Path(options.root or ".")) / f".{case.entry_name}.checkpoint"
    try:
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        checkpoint = None
    result = train(compiled, config, arch_for(options, compiled), checkpoint_dir=checkpoint, resume=options.resume,
                   device=torch.device(options.device))
    validation = with_patching_checks(validate_model(result.model, result.evaluator, compiled,
                                                     evaluation=result.final_evaluation), compiled, result)
    result = with_bound_verdict(with_edge_verdict(result, validation), validation)
    with tempfile.TemporaryDirectory(prefix="zoo-entry-") as tmp:
        dest = write_entry_files(Path(tmp) / case.entry_name, compiled, result=result, validation=validation,
                                 command=["zoo", "train", "case", case_id, *options.flags])
        files = dict(read_entry(dest).data)
    if checkpoint is not None:
        shutil.rmtree(checkpoint, ignore_errors=True)
    m = result.metrics
    row = summary_row(case_id, "met" if result.met_criterion else "not met", met=result.met_criterion,
                      steps=result.steps, wall=time.perf_counter() - start, accuracy=m["accuracy"],
                      iia=m["iia_min"], siia=m["siia_min"], siia_all=m["siia_all"],
                      effect=validation["max_out_of_circuit_effect"]["resample"])
    return row, files


def write_entry_files(dest: Path, compiled, *, result, validation, command) -> Path:
    """Write the entry and return where: `dest`, unless this run missed its criterion and `dest`
    holds an entry that met it; then beside it (`case-33.failed/`, not an entry name), and the
    good entry is kept. NaN anywhere in the files is refused (zoo.artifact), nothing written."""
    from siit.export import case_json, circuit_json, training_json
    from zoo.artifact import FAILED_SUFFIX, write_entry
    from zoo.card import render_model_card

    circuit = circuit_json(compiled, result.correspondence)
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
    if not result.met_criterion and met_criterion(dest):
        kept, dest = dest, dest.with_name(dest.name + FAILED_SUFFIX)
        print(f"zoo: kept the entry in {kept} (it met its criterion); this run's entry goes to {dest}",
              file=sys.stderr)
    write_entry(dest, state_dict=cpu_state(result.model), json_files=files, readme=readme)
    return dest


def met_criterion(entry_dir: Path) -> bool:
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


def entry_summary(case, dest: Path, result, validation: dict[str, Any]) -> dict[str, Any]:
    """The numbers `zoo train` prints (and gives with --json) for one trained entry."""
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
        "effect_bounds": {k: (validation.get("effect_bounds") or {}).get(k) for k in (
            "exact", "resolved", "max_effect", "max_upper_95", "bound", "confidence", "n_per_length", "worst")},
        "edge_effects": {k: (validation.get("edge_effects") or {}).get(k) for k in (
            "exact", "max_out_of_circuit_edge_effect", "worst_edge", "bound", "skipped")},
        "edge_bounds": {k: (validation.get("edge_bounds") or {}).get(k) for k in (
            "exact", "resolved", "max_effect", "max_upper_95", "bound", "n_per_length", "out_of_circuit_edges",
            "input_shapes", "measured_shapes", "ablations", "worst",
            "skipped")},
        "distractor_r2_min": m.get("distractor_r2_min"),
        "by_shape": m.get("by_shape"),
        "heuristic_separation": {k: v["separation"] for k, v in validation["realism"]["heuristics"].items()},
        "variance_floor_ratio": validation["realism"]["variance_floor_ratio"],
        "looks": {k: (validation["realism"].get("battery") or {}).get(k) for k in (
            "max_separation", "median_separation", "max_separation_apart", "over_bound", "met")},
        **({"saturation": validation["saturation"]} if "saturation" in validation else {}),
    }
