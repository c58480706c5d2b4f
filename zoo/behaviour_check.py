"""A checked entry -> evidence that its model does what its files claim: a forward pass on the
case's own inputs, compared with the compiled program and with validation.json's accuracy.

`zoo pull` runs this before an entry enters the zoo root. The model runs in siit's pure-torch
Transformer (TransformerLens-equivalent, and no TransformerLens import). For a built-in case the
labels come from the Tracr-compiled program (rasp_programs.compile, cached under the zoo root),
the entry's encoding must be the compiled one and its circuit must be the compiled graph (mapped
through the entry's correspondence, if it has one). A planted model's labels come from its
high-level causal model, rebuilt from its name (package `planted`). A data-only case (zoo.case_json) has no
program, so its outputs can only be checked to be finite; the report says so.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from zoo.artifact import ArtifactError
from zoo.case_json import canon, is_data_only
from zoo.entry_check import CheckedEntry, recorded_accuracy

N_INPUTS = 256
MAX_ACTIVATION_BYTES = 1 << 30
"""The most memory the check's forward pass may need, estimated before it runs (activation_bytes).
Weights are bounded by eval.model_config; activations grow with batch x heads x n_ctx^2, so a
kilobyte entry with a long context could otherwise ask for gigabytes (n_ctx 1024, one head: 3.6 GB)."""
SEED = 1_234_567  # not a seed training uses for its data, so the inputs are held out in practice
DEFAULT_TOLERANCE = 0.05  # regression outputs agree within this (siit.config's default)


@dataclasses.dataclass(frozen=True)
class BehaviourCheck:
    """What the forward pass showed."""

    n_inputs: int
    measured: float | None
    """Accuracy against the compiled program (mean of padded and unpadded inputs); None: no program."""
    recorded: float | None
    """validation.json's accuracy."""
    against: str = "the compiled program"
    """What gave the labels: the compiled program, or the planted high-level model."""

    def describe(self) -> str:
        if self.measured is None:
            return (f"outputs finite on {self.n_inputs} inputs; accuracy not checked: a data-only case has "
                    "no program to compare with")
        return (f"accuracy {self.measured:.4f} on {self.n_inputs} inputs vs {self.against} "
                f"(validation.json: {self.recorded:.4f})")


def tolerance(recorded: float, n_positions: int) -> float:
    """How far a fresh sample's accuracy may sit from the recorded one: 0.02 for the different mix
    of input shapes, plus three binomial standard deviations."""
    var = max(recorded * (1 - recorded), 1.0 / max(n_positions, 1))
    return 0.02 + 3 * math.sqrt(var / max(n_positions, 1))


def check_behaviour(entry: CheckedEntry, compile_cache: Path | None, *, require_accuracy: bool = True) -> BehaviourCheck:
    """Run the entry's model on its case's inputs; ArtifactError if it disagrees with its files."""
    import torch

    from siit.high_level import as_task
    from siit.losses import agree, predictions
    from siit.transformer import Transformer

    label = entry.name
    recorded = recorded_accuracy(entry.validation) if entry.validation is not None else None
    if require_accuracy and not isinstance(recorded, float):
        raise ArtifactError(f"entry {label}: validation.json with metrics.accuracy is needed to check the model")
    seqs = entry.case.sample(N_INPUTS, SEED)
    tokens, mask = entry.encoding.encode(seqs)
    need = activation_bytes(entry.config, *tokens.shape)
    if need > MAX_ACTIVATION_BYTES:
        raise ArtifactError(
            f"entry {label}: checking its model on {N_INPUTS} inputs of {tokens.shape[1]} positions would need about "
            f"{need >> 20} MiB of activations (n_heads {entry.config['n_heads']}, d_mlp {entry.config['d_mlp']}), "
            f"over the bound of {MAX_ACTIVATION_BYTES >> 20} MiB; refused before running it")
    labelled = mask.bool().clone()
    labelled[:, 0] = False
    model = Transformer.from_state_dict(entry.config, entry.state_dict)
    with torch.no_grad():
        shapes = [model(tokens, mask)[0], model(tokens, mask, present=mask.bool())[0]]  # padded, unpadded
    if not all(bool(torch.isfinite(out[labelled]).all()) for out in shapes):
        raise ArtifactError(f"entry {label}: the model outputs NaN or infinite values on its case's inputs")
    if is_data_only(entry.case):
        return BehaviourCheck(N_INPUTS, None, recorded if isinstance(recorded, float) else None)
    task = as_task(_compiled(entry, compile_cache))  # the compiled case or the planted model, one interface
    if canon(task.encoding.to_json()) != canon(entry.encoding.to_json()):
        raise ArtifactError(f"entry {label}: its encoding differs from the compiled case {entry.case.id}'s")
    _check_circuit(entry, task)
    labels = task.high_level().run(tokens, mask)[0]
    tol = _regression_tolerance(entry.training)
    accs = [float(agree(predictions(out, entry.case.task_kind), labels, entry.case.task_kind, tol)[labelled]
                  .float().mean()) for out in shapes]
    measured = sum(accs) / len(accs)
    if isinstance(recorded, float):
        allowed = tolerance(recorded, int(labelled.sum()))
        if abs(measured - recorded) > allowed:
            raise ArtifactError(
                f"entry {label}: its model's accuracy on {N_INPUTS} inputs of case {entry.case.id} is "
                f"{measured:.4f}, validation.json records {recorded:.4f} (tolerance {allowed:.3f}); refused")
    against = "the planted high-level model" if entry.case.family == "planted" else "the compiled program"
    return BehaviourCheck(N_INPUTS, measured, recorded if isinstance(recorded, float) else None, against)


def activation_bytes(config: dict[str, Any], batch: int, width: int) -> int:
    """Peak memory of one forward pass of siit.transformer on [batch, width] tokens, from the
    numbers alone (float32): about four [batch, heads, width, width] attention tensors live at once
    (scores, masked scores, their exponent, the pattern) plus the bool mask, and one layer's
    per-head results, q/k/v/z, residual copies, MLP hidden units and logits. Measured against it:
    n_ctx 1024 with one head, 3.6 GB peak for an estimate of 4.3 GB."""
    heads, d_head, d_model = config["n_heads"], config["d_head"], config["d_model"]
    per_position = 2 * heads * d_model + 4 * heads * d_head + 4 * d_model + 2 * config["d_mlp"] + config["d_vocab_out"]
    floats = batch * (4 * heads * width * width + width * per_position)
    return 4 * floats + batch * width * width


def _compiled(entry: CheckedEntry, compile_cache: Path | None) -> Any:
    """The compiled case, or the planted model's task (rebuilt from its name)."""
    from rasp_programs.compile import CompileError
    from zoo.errors import ZooError
    from zoo.high_level_source import high_level_task

    try:
        return high_level_task(entry.case, compile_cache)
    except ZooError as exc:
        raise ArtifactError(f"entry {entry.name}: {exc}") from None
    except CompileError as exc:
        raise ArtifactError(f"entry {entry.name}: cannot compile its case to check it ({exc})") from None


def _check_circuit(entry: CheckedEntry, task: Any) -> None:
    """The entry's circuit must be the high-level graph, mapped through its correspondence if any."""
    from siit.correspondence import Correspondence, NodeLayout

    graph, data = task.graph, entry.circuit_json
    expected = graph
    if "correspondence" in data:
        corr = data["correspondence"]
        if set(corr) != set(graph.nodes):
            raise ArtifactError(f"entry {entry.name}: circuit.json's correspondence does not cover the nodes "
                                f"of case {entry.case.id}'s compiled graph")
        try:
            expected = Correspondence(
                mapping={n: tuple(corr[n]) for n in graph.nodes},
                high=task.layout,
                low=NodeLayout(entry.config["n_layers"], entry.config["n_heads"]),
            ).map_circuit(graph)
        except (ValueError, KeyError) as exc:
            raise ArtifactError(f"entry {entry.name}: circuit.json's correspondence is invalid ({exc})") from None
    if set(entry.circuit.nodes) != set(expected.nodes) or set(entry.circuit.edges) != set(expected.edges):
        raise ArtifactError(f"entry {entry.name}: circuit.json is not case {entry.case.id}'s ground truth "
                            "(nodes or edges differ from the compiled program's graph)")


def _regression_tolerance(training: dict[str, Any] | None) -> float:
    config = training.get("config") if isinstance(training, dict) else None
    value = config.get("regression_tolerance") if isinstance(config, dict) else None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1
    return float(value) if ok else DEFAULT_TOLERANCE
