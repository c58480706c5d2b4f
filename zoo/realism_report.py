"""A case's trained entry -> its realism report (the realism issue, item 3; InterpBench §5, Table 5).

`realism_case` reads like the report: load the SIIT entry and compile the case (the Tracr model is
the reference point; a planted model has no compiled counterpart, so its report has no Tracr
column and no natural-vs-Tracr target), measure what a method that never intervenes sees of every node of both
models on inputs from the case's sampler (eval.core.node_heuristics: output norm, output variance, weight norm
and more, each as node AUROC against the circuit), then train or reuse the "natural"
(behaviour-only) and IIT models of the same case, seed and architecture, and compare the four
models' centred weight histograms by KL divergence (eval.scoring.weight_histograms).

The comparison models are cached as entry-format directories under
`<root>/realism/<entry>/{natural,iit}/` (written atomically, reused while the SIIT entry's
training config and architecture are unchanged); the SIIT entry itself is only read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from eval.scoring.weight_histograms import HistogramSpec
from zoo.errors import ZooError

ComparisonKind = Literal["natural", "iit"]
COMPARISONS: tuple[ComparisonKind, ...] = ("natural", "iit")
TABLE_ORDER = ("natural", "tracr", "siit", "iit")
"""Rows and columns of the KL table, in the paper's order (Table 5)."""
LOSS_WEIGHTS: dict[str, dict[str, float]] = {
    "natural": {"iit_weight": 0.0, "strict_weight": 0.0},  # = zoo train --natural
    "iit": {"strict_weight": 0.0},  # = zoo train --strict-weight 0
}
SEPARATION_BOUND, VARIANCE_FLOOR = 0.75, 0.25
"""The realism issue's targets for trained entries (heuristic separation, variance-floor ratio)."""
STAT_FIELDS = ("output_norm", "output_variance", "weight_norm", "output_weight_norm", "logit_variance")
ARCH_KEYS = ("n_layers", "n_heads", "d_model", "d_head", "d_mlp", "d_vocab", "d_vocab_out", "n_ctx", "act_fn",
             "attention_dir")
"""The config fields that must agree between the SIIT entry and its comparison models."""

Progress = Callable[[int, dict[str, float]], None]
ProgressFactory = Callable[[str, int], contextlib.AbstractContextManager[Progress]]
"""progress(kind, total_steps) -> a context whose value receives every training step."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RealismOptions:
    """What `zoo realism` measures and how."""

    n: int = 2000
    """Inputs drawn from the case's sampler for the activation statistics (padded to n_ctx)."""
    seed: int = 0
    """Seed of those inputs."""
    epochs: int | None = None
    """Step budget of the natural and IIT models, in epochs; None: the SIIT entry's own budget."""
    train: bool = True
    """Train comparison models that are not cached; False: use cached ones only (the KL table
    then leaves out the missing kinds)."""
    retrain: bool = False
    """Train the comparison models again even when cached ones match."""
    histogram: HistogramSpec = HistogramSpec()
    """Binning and smoothing of the weight histograms."""
    device: str = "cpu"
    """torch device of the activations and of training comparison models (`cpu`, `cuda:N`;
    resolved from --device by eval.core.device)."""

    def __post_init__(self) -> None:
        if self.n < 2:
            raise ZooError(f"--n must be at least 2 (a variance needs two inputs), got {self.n}")
        if self.epochs is not None and self.epochs < 1:
            raise ZooError(f"--epochs must be >= 1, got {self.epochs}")


def realism_case(case: Any, root: Path, options: RealismOptions = RealismOptions(), *,
                 progress: ProgressFactory | None = None) -> dict[str, Any]:
    """The JSON-native realism report of `<root>/entries/<case entry>` and its compiled model."""
    from rasp_programs.compile import CompileError
    from zoo.high_level_source import high_level_task, is_planted
    from zoo.paths import compiled_dir, entries_dir

    start = time.perf_counter()
    entry = load_siit_entry(entries_dir(root) / case.entry_name, case)
    try:
        compiled = high_level_task(case, compiled_dir(root))  # a planted model: its PlantedTask
    except CompileError as exc:
        raise ZooError(str(exc)) from None
    except PermissionError as exc:
        raise ZooError(f"cannot write the compile cache: {exc}") from None
    seqs = case.sample(options.n, options.seed)
    activity = {"siit": node_activity(entry.config, entry.state_dict, entry.encoding.encode(seqs),
                                      entry.circuit.nodes, case.task_kind, device=options.device)}
    state_dicts: dict[str, Mapping[str, Any]] = {"siit": entry.state_dict}
    if not is_planted(case):  # why: the Tracr model is the reference point only where one exists
        activity["tracr"] = node_activity(compiled.config, compiled.state_dict, compiled.encoding.encode(seqs),
                                          compiled.graph.nodes, case.task_kind, device=options.device)
        state_dicts["tracr"] = compiled.state_dict
    models: dict[str, Any] = {}
    cache = root / "realism" / entry.name
    for kind in COMPARISONS:
        state_dict, info = comparison_model(kind, compiled, entry, cache / kind, options, progress)
        models[kind] = info
        if state_dict is not None:
            state_dicts[kind] = state_dict
    table = weight_kl(state_dicts, options.histogram)
    report = {
        "case": case.id,
        "family": case.family,
        "name": case.name,
        "entry": str(entry.path),
        "inputs": {"n": options.n, "seed": options.seed, "source": "the case's sampler, padded to n_ctx "
                   "with the attention mask; statistics over real positions (BOS included)"},
        "activity": activity,
        "weight_kl": table,
        "comparison_models": models,
        "targets": targets(activity["siit"], table),
        "compute": device_json(options.device),
        "definitions": {
            "separation": "max(AUROC, 1 - AUROC) of ranking nodes by the heuristic against the circuit; "
                          "0.5 = chance, 1 = the heuristic finds the circuit",
            "variance_floor_ratio": "min out-of-circuit output variance / median circuit-node output variance",
            "weight_kl": table["definition"],
        },
        "seconds": round(time.perf_counter() - start, 3),
    }
    return json_safe(report)


def load_siit_entry(path: Path, case: Any) -> Any:
    """The trained entry of `case` at `path`, or a one-line ZooError."""
    from zoo.entry import load_entry_dir

    family = case.family
    if not path.is_dir():
        raise ZooError(f"no trained entry for {family} {case.id} at {path}; train one with "
                       f"`zoo train {family} {case.id}` (or pass the --root that holds it)")
    entry = load_entry_dir(path)  # ArtifactError is a ZooError: a damaged entry is bad input
    if str(entry.case_json.get("id")) != str(case.id):
        raise ZooError(f"entry {path} holds {entry.case_json.get('id')!r}, not {family} {case.id}")
    if entry.training is None or "config" not in entry.training:
        raise ZooError(f"entry {path} has no training record: zoo realism compares a trained (SIIT) entry")
    cfg = entry.training["config"]
    if not (cfg.get("strict_weight", 0) > 0 and cfg.get("iit_weight", 0) > 0):
        raise ZooError(f"entry {path} was not trained with SIIT (iit_weight {cfg.get('iit_weight')}, "
                       f"strict_weight {cfg.get('strict_weight')}); zoo realism compares an SIIT entry "
                       "with natural and IIT models it trains itself")
    return entry


def device_json(device: str) -> dict[str, Any]:
    """Where a report's numbers were computed (eval.core.device.DeviceRecord)."""
    import torch

    from eval.core.device import device_record

    return device_record(torch.device(device)).to_json()


def node_activity(config: Mapping[str, Any], state_dict: Mapping[str, Any], encoded: tuple[Any, Any],
                  circuit: Any, task_kind: str, *, device: str = "cpu") -> dict[str, Any]:
    """eval.core.node_heuristics's report for one model on encoded inputs (tokens, mask), plus per statistic
    its spread in and out of the circuit, and the battery of no-intervention looks (eval.core.looks);
    the model runs on `device`."""
    import torch

    from eval.core.circuit import head_node, mlp_node
    from eval.core.looks import battery
    from eval.core.node_heuristics import node_stats, realism_report
    from siit.look_inputs import look_inputs
    from siit.transformer import Transformer

    tokens, mask = (x.to(device) for x in encoded)
    model = Transformer.from_state_dict(config, state_dict).to(device)
    with torch.no_grad():
        _, acts = model(tokens, mask, return_acts=True)
    heads = model.n_heads
    per_node = {(head_node(layer, s) if s < heads else mlp_node(layer)): acts[layer, :, :, s]
                for layer in range(model.n_layers) for s in range(heads + 1)}
    rows = node_stats(per_node, mask.bool(), state_dict, config, set(circuit), task_kind)
    report = realism_report(rows)
    report["in_vs_out"] = {
        name: {side: _spread([getattr(r, name) for r in rows if r.in_circuit == inside])
               for side, inside in (("in_circuit", True), ("out_of_circuit", False))}
        for name in STAT_FIELDS
    }
    report["circuit"] = [r.node for r in rows if r.in_circuit]
    report["battery"] = battery(look_inputs(model, tokens, mask, circuit, task_kind))
    return report


def _spread(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "min": None, "median": None, "max": None}
    return {"n": len(values), "min": min(values), "median": statistics.median(values), "max": max(values)}


def comparison_config(training: Mapping[str, Any], kind: ComparisonKind, epochs: int | None) -> tuple[Any, Any]:
    """The TrainConfig and ArchConfig of the `kind` model: the SIIT entry's own (seed, data,
    optimiser, architecture) with the loss weights of `zoo train --natural` / `--strict-weight 0`.
    Distractors and the head rescale go back to their defaults, which resolve off without
    strictness, exactly as on the command line."""
    from siit.export import config_from_training_json

    config, arch = config_from_training_json(dict(training))
    changes: dict[str, Any] = {**LOSS_WEIGHTS[kind], "distractors": None, "rescale_heads": None}
    if epochs is not None:
        changes["epochs"] = epochs
    return dataclasses.replace(config, **changes), arch


def comparison_model(kind: ComparisonKind, compiled: Any, entry: Any, path: Path, options: RealismOptions,
                     progress: ProgressFactory | None) -> tuple[Mapping[str, Any] | None, dict[str, Any]]:
    """(state dict or None, what the report says about it) of the cached or newly trained model."""
    from siit.high_level import as_task

    config, arch = comparison_config(entry.training, kind, options.epochs)
    if _architecture(as_task(compiled).low_level_config(arch)) != _architecture(entry.config):
        case = compiled.case
        raise ZooError(f"entry {entry.path} was trained on another version of {case.family} {case.id}; "
                       f"retrain it with `zoo train {case.family} {case.id}`")
    info: dict[str, Any] = {"path": str(path), "config": {k: config.to_json()[k] for k in
                                                          ("iit_weight", "strict_weight", "seed", "epochs")}}
    cached = None if options.retrain else _cached(path, config, arch, entry.config)
    if cached is not None:
        return cached.state_dict, {**info, **_training_summary(cached.training), "from_cache": True}
    if not options.train:
        return None, {**info, "missing": True, "from_cache": False}
    result = _train(compiled, config, arch, kind, progress, options.device)
    _write_comparison(path, kind, compiled, result, entry.name)
    from siit.export import training_json

    return {k: v.detach().cpu() for k, v in result.model.state_dict().items()}, {**info, **_training_summary(training_json(result)), "from_cache": False}


def _cached(path: Path, config: Any, arch: Any, low_config: Mapping[str, Any]) -> Any:
    """The cached model at `path` if it was trained with exactly `config`, `arch` and the entry's
    architecture; None otherwise (a missing or damaged cache is trained again)."""
    from siit.export import config_from_training_json
    from zoo.artifact import ArtifactError
    from zoo.entry import load_entry_dir

    if not path.is_dir():
        return None
    try:
        cached = load_entry_dir(path)
        old_config, old_arch = config_from_training_json(cached.training or {})
    except (ArtifactError, KeyError, TypeError, ValueError):
        return None
    same = old_config == config and old_arch == arch and _architecture(cached.config) == _architecture(low_config)
    return cached if same else None


def _architecture(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: config.get(k) for k in ARCH_KEYS}


def _train(compiled: Any, config: Any, arch: Any, kind: str, progress: ProgressFactory | None,
           device: str = "cpu") -> Any:
    import torch

    from siit.config import ConfigError
    from siit.trainer import train

    bar = progress(kind, config.max_steps) if progress is not None else contextlib.nullcontext(None)
    try:
        with bar as update:
            return train(compiled, config, arch, progress=update, device=torch.device(device))
    except ConfigError as exc:
        raise ZooError(str(exc)) from None


def _write_comparison(path: Path, kind: str, compiled: Any, result: Any, entry_name: str) -> None:
    """Entry-format files (verified on reuse), written atomically by zoo.artifact."""
    from siit.export import case_json, circuit_json, training_json
    from zoo.artifact import write_entry

    path.parent.mkdir(parents=True, exist_ok=True)
    readme = (f"# {kind} comparison model of {entry_name}\n\nNot a zoo entry: trained by `zoo realism` with the "
              f"SIIT entry's seed, data and architecture and the loss weights of "
              f"{'`zoo train --natural`' if kind == 'natural' else '`zoo train --strict-weight 0`'}, to compare "
              "weight histograms (InterpBench Table 5). Its circuit.json is the SIIT entry's correspondence, "
              "which this model was not trained to respect.\n")
    state_dict = {k: v.detach().cpu() for k, v in result.model.state_dict().items()}
    write_entry(path, state_dict=state_dict, readme=readme, json_files={
        "config.json": result.low_config, "circuit.json": circuit_json(compiled, result.correspondence),
        "case.json": case_json(compiled), "training.json": training_json(result, command=None)})


def _training_summary(training: Mapping[str, Any] | None) -> dict[str, Any]:
    t = training or {}
    metrics = t.get("final_metrics") or {}
    return {"met_criterion": t.get("met_criterion"), "steps": t.get("steps"), "wall_time_s": t.get("wall_time_s"),
            "accuracy": metrics.get("accuracy")}


def weight_kl(state_dicts: Mapping[str, Mapping[str, Any]], spec: HistogramSpec) -> dict[str, Any]:
    """The KL table of the models present, in TABLE_ORDER (eval.scoring.weight_histograms)."""
    from eval.scoring.weight_histograms import state_dict_kl_table

    ordered = {k: state_dicts[k] for k in TABLE_ORDER if k in state_dicts}
    table = state_dict_kl_table(ordered, spec)
    out = table.to_json()
    out["pairs"] = {f"{a}-{b}": table.kl(a, b) for i, a in enumerate(table.labels)
                    for b in table.labels[i + 1:]}
    return out


def targets(siit: Mapping[str, Any], table: Mapping[str, Any]) -> dict[str, Any]:
    """The realism issue's targets for the SIIT entry, each with its value and whether it holds."""
    heur = siit["heuristics"]
    worst = max(heur[h]["separation"] for h in siit["bounded_heuristics"])
    floor = siit["variance_floor_ratio"]
    pairs = table.get("pairs", {})
    kl_siit, kl_tracr = pairs.get("natural-siit"), pairs.get("natural-tracr")
    return {
        "max_heuristic_separation": {"value": worst, "bound": SEPARATION_BOUND,
                                     "met": _holds(worst, lambda v: v <= SEPARATION_BOUND)},
        "variance_floor_ratio": {"value": floor, "bound": VARIANCE_FLOOR,
                                 "met": _holds(floor, lambda v: v >= VARIANCE_FLOOR)},
        "battery": {"max_separation": siit["battery"]["max_separation"],
                    "median_separation": siit["battery"]["median_separation"],
                    "max_separation_apart": siit["battery"]["max_separation_apart"],
                    "bounds": siit["battery"]["bounds"], "over_bound": siit["battery"]["over_bound"],
                    "met": siit["battery"]["met"]},
        "kl_natural_siit_below_natural_tracr": {
            "natural_siit": kl_siit, "natural_tracr": kl_tracr,
            "met": None if kl_siit is None or kl_tracr is None else kl_siit < kl_tracr},
    }


def _holds(value: float | None, test: Callable[[float], bool]) -> bool | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else test(value)


def json_safe(data: Any) -> Any:
    """NaN and infinities -> None (JSON has neither), recursively."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, Mapping):
        return {k: json_safe(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [json_safe(v) for v in data]
    return data
