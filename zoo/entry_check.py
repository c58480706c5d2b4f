"""An entry's verified files -> its checked contents: every field typed and bounded, every tensor
where the config says it is, the circuit inside the model's graph, the case from case.json alone.

This runs on every load (local root, Hugging Face cache) and before `zoo pull` installs anything;
it needs no program and runs no model (zoo.behaviour_check does that). Order matters: the config
is checked first, because it bounds everything else (the weights' shapes and sizes are compared
with the safetensors header before a single tensor is read). Every failure is one ArtifactError.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

from eval.core.circuit import Circuit, node_sort_key, parse_node
from eval.core.graph import graph_of
from eval.core.model_config import ModelConfigError, check_model_config, tensor_shapes
from rasp_programs.case import BOS, PAD, Case
from rasp_programs.encoding import Encoding
from zoo.artifact import ENTRY_NAME, FORMAT, ArtifactError, EntryFiles, parse_json, tensors_from_bytes
from zoo.case_json import canon, is_scalar, case_from_json, entry_name_for

MAX_CIRCUIT_EDGES = 200_000
_NAME = re.compile(r"[a-z0-9.<>]{1,40}")
_DTYPE_BYTES = {"F32": 4}  # the zoo writes float32 weights only


@dataclasses.dataclass(frozen=True)
class CheckedEntry:
    """An entry whose every file has been checked (not yet run)."""

    name: str
    config: dict[str, Any]
    state_dict: dict[str, Any]
    circuit: Circuit
    circuit_json: dict[str, Any]
    case_json: dict[str, Any]
    case: Case
    encoding: Encoding
    training: dict[str, Any] | None
    validation: dict[str, Any] | None


def check_entry(files: EntryFiles) -> CheckedEntry:
    """Check a verified snapshot (zoo.artifact.read_entry); its label is the entry name."""
    label = files.label
    config = _config(files)
    state_dict = _weights(files, config)
    case_json = files.json("case.json")
    case = case_from_json(case_json, entry=label)
    if ENTRY_NAME.fullmatch(label) and entry_name_for(case.id, case.family) != label:
        raise ArtifactError(f"entry {label} holds the entry of {case.family} {case.id!r} (its folder would be "
                            f"{entry_name_for(case.id, case.family)}); refused")
    encoding = _encoding(label, case_json, case, config)
    circuit_json = files.json("circuit.json")
    circuit = _circuit(label, circuit_json, config)
    training, validation = files.json("training.json"), files.json("validation.json")
    if validation is not None and recorded_accuracy(validation) is False:
        raise ArtifactError(f"entry {label}: validation.json metrics.accuracy must be a number in [0, 1]")
    if training is not None and not isinstance(training.get("met_criterion", False), bool):
        raise ArtifactError(f"entry {label}: training.json met_criterion must be true or false")
    return CheckedEntry(name=label, config=config, state_dict=state_dict, circuit=circuit,
                        circuit_json=circuit_json, case_json=case_json, case=case, encoding=encoding,
                        training=training, validation=validation)


def recorded_accuracy(validation: Mapping[str, Any]) -> float | None | bool:
    """validation.json's metrics.accuracy; None if absent; False if present but not in [0, 1]."""
    metrics = validation.get("metrics")
    if not isinstance(metrics, dict) or "accuracy" not in metrics:
        return None
    value = metrics["accuracy"]
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1
    return float(value) if ok else False


def _config(files: EntryFiles) -> dict[str, Any]:
    try:
        return check_model_config(files.json("config.json"))
    except ModelConfigError as exc:
        raise ArtifactError(f"entry {files.label}: config.json: {exc}") from None


def _weights(files: EntryFiles, config: Mapping[str, Any]) -> dict[str, Any]:
    """The tensors, after the header has been compared with the config (names, dtypes, shapes,
    byte ranges that tile the data exactly) and before anything is read; then all must be finite."""
    import torch

    label, data = files.label, files.data["model.safetensors"]
    n = int.from_bytes(data[:8], "little")
    header = parse_json(data[8 : 8 + n], f"entry {label}: model.safetensors header")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ArtifactError(f"entry {label}: model.safetensors is not a {FORMAT} file (header metadata)")
    expected = tensor_shapes(config)
    if set(header) != set(expected):
        missing, extra = sorted(set(expected) - set(header)), sorted(set(header) - set(expected))
        raise ArtifactError(f"entry {label}: model.safetensors does not fit config.json (missing "
                            f"{missing[:3]}, unexpected {[k[:60] for k in extra[:3]]})")
    spans = []
    for key, shape in expected.items():
        info = header[key]
        if not isinstance(info, dict) or info.get("dtype") not in _DTYPE_BYTES:
            raise ArtifactError(f"entry {label}: tensor {key} must be float32 (F32)")
        if info.get("shape") != list(shape):
            raise ArtifactError(f"entry {label}: tensor {key} has shape {str(info.get('shape'))[:40]}, "
                                f"config.json implies {list(shape)}")
        offsets = info.get("data_offsets")
        size = math.prod(shape) * _DTYPE_BYTES[info["dtype"]]
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets)
                or offsets[1] - offsets[0] != size):
            raise ArtifactError(f"entry {label}: tensor {key}'s byte range does not match its shape")
        spans.append(offsets)
    position = 0
    for begin, end in sorted(spans):
        if begin != position:
            raise ArtifactError(f"entry {label}: model.safetensors byte ranges overlap or leave gaps")
        position = end
    if position != len(data) - 8 - n:
        raise ArtifactError(f"entry {label}: model.safetensors is {len(data)} bytes; its header accounts "
                            f"for {position + 8 + n}")
    try:
        tensors = tensors_from_bytes(data)
    except Exception as exc:  # safetensors' own checks: one line, whatever its error type
        raise ArtifactError(f"entry {label}: model.safetensors cannot be read ({str(exc)[:120]})") from None
    bad = [k for k, v in tensors.items() if not bool(torch.isfinite(v).all())]
    if bad:
        raise ArtifactError(f"entry {label}: weights {bad[:3]} hold NaN or infinite values; refused")
    return tensors


def _encoding(label: str, case_json: Mapping[str, Any], case: Case, config: Mapping[str, Any]) -> Encoding:
    what = f"entry {label}: case.json encoding"
    data = case_json.get("encoding")
    if not isinstance(data, dict):
        raise ArtifactError(f"{what} is missing")
    inputs, outputs = data.get("input_vocab"), data.get("output_vocab")
    if not isinstance(inputs, list) or not all(is_scalar(v) for v in inputs):
        raise ArtifactError(f"{what}: input_vocab must be a list of strings, numbers or booleans")
    if {canon(v) for v in inputs} != {canon(v) for v in (*case.vocab, BOS, PAD)} or len(inputs) != len(case.vocab) + 2:
        raise ArtifactError(f"{what}: input_vocab must be the case's vocab plus {BOS!r} and {PAD!r}")
    if len(inputs) != config["d_vocab"]:
        raise ArtifactError(f"{what}: {len(inputs)} input tokens but config d_vocab {config['d_vocab']}")
    if case.task_kind == "classification":
        if (not isinstance(outputs, list) or not all(is_scalar(v) for v in outputs)
                or len({canon(v) for v in outputs}) != len(outputs)):
            raise ArtifactError(f"{what}: output_vocab must be a list of distinct values")
        if len(outputs) != config["d_vocab_out"]:
            raise ArtifactError(f"{what}: {len(outputs)} output values but config d_vocab_out {config['d_vocab_out']}")
    elif outputs is not None:
        raise ArtifactError(f"{what}: a regression case has no output_vocab")
    if data.get("max_seq_len") != case.max_seq_len or data.get("task_kind") != case.task_kind:
        raise ArtifactError(f"{what}: max_seq_len / task_kind differ from the case's")
    if config["n_ctx"] < case.max_seq_len + 1:
        raise ArtifactError(f"entry {label}: config n_ctx {config['n_ctx']} is shorter than BOS + max_seq_len")
    if (config["attention_dir"] == "causal") != case.causal:
        raise ArtifactError(f"entry {label}: config attention_dir contradicts case.json causal")
    return Encoding(input_vocab=tuple(inputs), output_vocab=None if outputs is None else tuple(outputs),
                    max_seq_len=case.max_seq_len, task_kind=case.task_kind)


def edge_in_graph(src: str, dst: str) -> bool:
    """Whether src -> dst is an edge of any transformer whose graph holds both nodes (eval.core.graph's
    rule: every earlier residual writer feeds every later reader; the MLP of layer l reads the heads
    of layer l). Computed from the names, so a huge config cannot make it enumerate its graph."""
    s, d = parse_node(src), parse_node(dst)
    if s.kind == "logits" or d.kind == "input" or s.qkv is not None:
        return False
    return node_sort_key(src)[0] < node_sort_key(dst)[0]


def _lists(value: Any) -> list[list[Any]]:
    return [v for v in value.values() if isinstance(v, list)] if isinstance(value, dict) else []


def _circuit(label: str, data: Mapping[str, Any], config: Mapping[str, Any]) -> Circuit:
    what = f"entry {label}: circuit.json"
    graph = graph_of(config)
    if data.get("schema_version") != 1 or data.get("granularity", "head") != "head":
        raise ArtifactError(f"{what}: expected schema_version 1 at head granularity")
    nodes, edges = data.get("nodes"), data.get("edges")
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes) or len(nodes) > len(graph.components):
        raise ArtifactError(f"{what}: nodes must be a list of at most {len(graph.components)} node names")
    if (not isinstance(edges, list) or len(edges) > MAX_CIRCUIT_EDGES
            or not all(isinstance(e, list) and len(e) == 2 and all(isinstance(x, str) for x in e) for e in edges)):
        raise ArtifactError(f"{what}: edges must be a list of [src, dst] name pairs")
    names = [*nodes, *(x for e in edges for x in e), *(x for v in _lists(data.get("correspondence")) for x in v)]
    if not all(isinstance(x, str) and _NAME.fullmatch(x) for x in names):
        raise ArtifactError(f"{what}: node names may hold only a-z, 0-9, '.', '<', '>'")
    try:
        for node in nodes:
            graph.check_node(node)
        for src, dst in edges:
            graph.check_node(src), graph.check_node(dst)
            if not edge_in_graph(src, dst):
                raise ValueError(f"edge {src}->{dst} is not in the model's graph (a writer must precede its reader)")
        corr = data.get("correspondence", {})
        if not isinstance(corr, dict) or not all(isinstance(v, list) and all(isinstance(x, str) for x in v)
                                                 for v in corr.values()):
            raise ValueError("correspondence must map high-level nodes to lists of node names")
        for low_nodes in corr.values():
            for node in low_nodes:
                if parse_node(graph.check_node(node)).kind not in ("head", "mlp") or "<" in node:
                    raise ValueError(f"correspondence names {node!r}, not a head or MLP")
        for key in ("labels", "high_level_labels"):
            labels = data.get(key, {})
            if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
                raise ValueError(f"{key} must map node names to strings")
        return Circuit.from_json(data)
    except (ValueError, TypeError, KeyError) as exc:
        raise ArtifactError(f"{what}: {str(exc)[:160]}") from None
