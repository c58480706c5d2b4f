"""A method (or a score file) + model + task data -> validated scores or circuits.

A method is a plain function `f(model, task, **options)` returning node and/or edge scores, or
one binary circuit per hyperparameter value. It receives only the keyword options its signature
names (`graph`, `seed`, `ablation`, and `progress`, a `Progress` callback a long method may call
with its units of work done so far), so the shortest method is

    def my_method(model, task):
        return {"nodes": {"a1.h0": 0.9, "m0": 0.1}}

Methods are frozen `Method` records in `REGISTRY`; `get_method` also accepts
`package.module:function`. `read_score_file` reads MIB's circuit-localization JSON.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import math
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from eval.core.circuit import parse_edge, promote
from eval.core.graph import ComputationGraph, promote_node_scores
from eval.methods.isolation import isolated
# imported here, not in a function: bench fingerprints a method by the modules its module imports
# that are loaded, so a lazy import would change the fingerprint after the first read
from eval.methods.score_input import MAX_SCORE_JSON_DEPTH, ScoreFileError, json_depth_exceeds
from eval.methods.score_input import read_score_file as read_score_bytes

MethodKind = Literal["scores", "circuits"]

Progress = Callable[[int, int], None]
"""progress(done, total): a long method's units of work so far (edges decided, passes, steps), for a
progress bar; calling it is optional and changes no result."""


class MethodError(ValueError):
    """A method or score file that cannot be evaluated (unknown, raised, wrong output)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class CircuitRun:
    """One binary circuit a method returned for one hyperparameter value."""

    param: float | str
    """The hyperparameter value that produced it (e.g. a threshold)."""
    nodes: frozenset[str]
    """Component nodes (head-level names) in the circuit."""
    edges: frozenset[tuple[str, str]] | None = None
    """Edges in the circuit (head level), or None if the method gives nodes only."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class MethodOutput:
    """What one run of a method produced; at least one field is set."""

    node_scores: Mapping[str, float] | None = None
    """Component (head-level name) -> importance; components left out score 0."""
    edge_scores: Mapping[tuple[str, str], float] | None = None
    """(src, dst) -> importance, at head or q/k/v granularity."""
    circuits: tuple[CircuitRun, ...] | None = None
    """One circuit per hyperparameter value; the first is the method's chosen circuit."""

    @property
    def kind(self) -> MethodKind:
        return "circuits" if self.circuits is not None else "scores"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Method:
    """A registered circuit-discovery method."""

    key: str
    """Registry key used on the command line (`--method KEY`)."""
    name: str
    """Human-readable name for tables and plots."""
    function: Callable[..., Any]
    """`function(model, task, **options) -> MethodOutput | mapping` (see the module doc)."""
    description: str = ""
    """One line on what it does."""
    seeded: bool = True
    """Whether reruns with other seeds can differ (stability is measured only then)."""


def call_method(method: Method, model: Any, task: Any, *, graph: ComputationGraph, seed: int,
                ablation: str, progress: Progress | None = None) -> MethodOutput:
    """Run `method` once and validate what it returns; any failure is a one-line MethodError.
    `progress` reaches only a method whose signature names it (not one taking **kwargs, which
    may pass its options on to code that does not expect it)."""
    options: dict[str, Any] = {"graph": graph, "seed": seed, "ablation": ablation}
    try:
        params = inspect.signature(method.function).parameters
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            options = {k: v for k, v in options.items() if k in params}
        if progress is not None and "progress" in params:
            options["progress"] = progress
    except (TypeError, ValueError):  # builtins without a signature get every option
        pass
    try:
        # a method's prints go to stderr: stdout carries only the report (`zoo eval --json`); the
        # model, grad mode and RNG are put back afterwards, so no method changes the next one's run
        with contextlib.redirect_stdout(sys.stderr), isolated(model) as found:
            raw = method.function(model, task, **options)
    except MethodError:
        raise
    except KeyboardInterrupt:  # the user's Ctrl-C stops the run (exit 130), it is not the method's result
        raise
    except SystemExit as exc:  # sys.exit() inside a method must not end `zoo eval` with "success"
        raise MethodError(f"method {method.key!r} called sys.exit({exc.code!r}) instead of returning scores") from None
    except BaseException as exc:  # a researcher's method can fail in any way; report it in one line
        text = " | ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise MethodError(f"method {method.key!r} raised {type(exc).__name__}: {text}") from exc
    if found and found[0].changed:
        names = ", ".join(found[0].changed[:3]) + (" ..." if len(found[0].changed) > 3 else "")
        raise MethodError(f"method {method.key!r} changed the model's weights ({names}); a method must leave the "
                          "model as it found it (the weights were restored; work on a copy)")
    return validate_output(raw, graph, source=f"method {method.key!r}")


def validate_output(raw: Any, graph: ComputationGraph, *, source: str) -> MethodOutput:
    """A MethodOutput with checked names and finite scores, from a MethodOutput or a mapping."""
    if isinstance(raw, MethodOutput):
        raw = {"nodes": raw.node_scores, "edges": raw.edge_scores, "circuits": raw.circuits}
    if not isinstance(raw, Mapping) or not {"nodes", "edges", "circuits"} & set(raw):
        raise MethodError(
            f"{source} returned {type(raw).__name__}; expected a MethodOutput or a mapping with "
            "'nodes' and/or 'edges' scores, or 'circuits'"
        )
    unknown = set(raw) - {"nodes", "edges", "circuits"}
    if unknown:
        raise MethodError(f"{source} returned unknown keys {sorted(unknown)}; allowed: nodes, edges, circuits")
    nodes = _node_scores(raw.get("nodes"), graph, source)
    edges = _edge_scores(raw.get("edges"), graph, source)
    circuits = _circuits(raw.get("circuits"), graph, source)
    if nodes is None and edges is None and circuits is None:
        raise MethodError(f"{source} returned no scores and no circuits")
    if circuits is None and not nodes and not edges:
        raise MethodError(f"{source} returned empty scores (no node or edge has a score); every component "
                          "a method leaves out scores 0, so an empty answer ranks nothing")
    if circuits is not None and all(not run.nodes and not run.edges for run in circuits):
        raise MethodError(f"{source} returned only empty circuits; an empty circuit scores nothing")
    if circuits is not None and (nodes is not None or edges is not None):
        raise MethodError(f"{source} returned both scores and circuits; return one kind")
    return MethodOutput(node_scores=nodes, edge_scores=edges, circuits=circuits)


def _finite(value: Any, what: str, source: str) -> float:
    if type(value).__name__ in ("bool", "bool_"):  # True is not a score (numpy's bool too)
        raise MethodError(f"{source}: score of {what} is {value!r}, a boolean, not a number")
    if isinstance(value, (str, bytes)):  # float("0.5") would read it: a string is not a score
        raise MethodError(f"{source}: score of {what} is {str(value)[:40]!r}, a string, not a number")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise MethodError(f"{source}: score of {what} is {value!r}, not a number") from None
    if not math.isfinite(out):
        raise MethodError(f"{source}: score of {what} is {out} (scores must be finite)")
    return out


def _node_scores(raw: Any, graph: ComputationGraph, source: str) -> dict[str, float] | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise MethodError(f"{source}: 'nodes' must map node names to scores, got {type(raw).__name__}")
    out: dict[str, float] = {}
    for name, value in raw.items():
        try:
            graph.check_node(str(name))
        except ValueError as exc:
            raise MethodError(f"{source}: {exc}") from None
        if name in ("input", "logits"):
            continue  # they are always in the circuit; a score for them carries nothing
        out[str(name)] = _finite(value, name, source)
    return promote_node_scores(out)


def _edge_scores(raw: Any, graph: ComputationGraph, source: str) -> dict[tuple[str, str], float] | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise MethodError(f"{source}: 'edges' must map 'src->dst' to scores, got {type(raw).__name__}")
    out: dict[tuple[str, str], float] = {}
    for key, value in raw.items():
        try:
            edge = parse_edge(key) if isinstance(key, str) else (str(key[0]), str(key[1]))
            graph.check_edge(*edge)
        except (ValueError, TypeError, IndexError) as exc:
            raise MethodError(f"{source}: {exc}") from None
        out[edge] = _finite(value, f"edge {edge[0]}->{edge[1]}", source)
    return out


def _check_edge(edge: Any, graph: ComputationGraph) -> tuple[str, str]:
    pair = parse_edge(edge) if isinstance(edge, str) else tuple(edge)
    if len(pair) != 2:
        raise ValueError(f"not an edge: {edge!r} (expected 'src->dst' or a (src, dst) pair)")
    pair = (str(pair[0]), str(pair[1]))
    return graph.check_edge(*pair)


def _circuits(raw: Any, graph: ComputationGraph, source: str) -> tuple[CircuitRun, ...] | None:
    if raw is None:
        return None
    if isinstance(raw, (str, bytes, Mapping)) or not isinstance(raw, Iterable):
        raise MethodError(f"{source}: 'circuits' must be a list of circuits (one per hyperparameter value)")
    runs = []
    for i, item in enumerate(raw):
        if isinstance(item, CircuitRun):
            item = {"param": item.param, "nodes": item.nodes, "edges": item.edges}
        if not isinstance(item, Mapping) or "nodes" not in item:
            raise MethodError(f"{source}: circuit {i} must be a mapping with 'nodes' (and optional 'edges', 'param')")
        try:
            nodes = frozenset(promote(graph.check_node(str(n))) for n in item["nodes"]) - {"input", "logits"}
            edges = item.get("edges")
            if edges is not None:
                edges = frozenset(
                    (promote(e[0]), promote(e[1])) for e in (_check_edge(x, graph) for x in edges)
                )
        except (ValueError, TypeError) as exc:
            raise MethodError(f"{source}: circuit {i}: {exc}") from None
        runs.append(CircuitRun(param=item.get("param", i), nodes=nodes, edges=edges))
    if not runs:
        raise MethodError(f"{source} returned an empty list of circuits")
    return tuple(runs)


def load_function(spec: str) -> Callable[..., Any]:
    """The function named by `package.module:function`."""
    from eval.core.spec import import_spec

    try:
        return import_spec(spec, "method")
    except ValueError as exc:
        raise MethodError(str(exc)) from None


def get_method(key: str | Method, registry: Mapping[str, Method]) -> Method:
    """A registered method by key, an outside `package.module:function`, or a Method as is."""
    if isinstance(key, Method):
        return key
    if key in registry:
        return registry[key]
    if ":" in key:
        return Method(key=key, name=key.rpartition(":")[2], function=load_function(key),
                      description=f"outside method {key}")
    raise MethodError(f"unknown method {key!r}; known: {', '.join(registry)} (or package.module:function)")


def read_score_file(path: Path, graph: ComputationGraph) -> MethodOutput:
    """MIB circuit-localization scores or circuits: one file, or a folder of files.

    A file is EAP-IG's `Graph.to_json`: {"cfg", "nodes": {name: {"score"?, "in_graph"}} (or the
    older {name: in_graph}), "edges": {"src->dst": {"score", "in_graph"}}}. A file holds one graph:
    with scores it gives scores (MIB re-selects top-n edges, so its in_graph is not read), with
    `in_graph` only it gives that one circuit. MIB submits several circuits (one per size) as
    several files in one folder (`evaluate_area_under_curve_multifile`), so a folder reads as one
    circuit per `*.json` file, in file-name order; the first is the method's chosen circuit.
    """
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".json" and p.is_file())
        if not files:
            raise MethodError(f"score folder {str(path)!r} holds no .json circuit files")
        circuits = []
        for file in files:
            source = f"score file {str(file)!r}"
            data = _load_json(file, source)
            sections = _mib_sections(data, graph, source)
            param = data.get("cfg", {}).get("param") if isinstance(data.get("cfg"), Mapping) else None
            ok = isinstance(param, (str, int, float)) and not isinstance(param, bool)  # to_circuit_files keeps it
            circuits.append(_mib_circuit(sections, source, param=param if ok else file.stem))
        return validate_output({"circuits": circuits}, graph, source=f"score folder {str(path)!r}")
    source = f"score file {str(path)!r}"
    sections = _mib_sections(_load_json(path, source), graph, source)
    if any(v.get("score") is not None for entries in sections.values() for v in entries.values()):
        raw = {part: {k: (v.get("score") if v.get("score") is not None else 0.0) for k, v in entries.items()}
               for part, entries in sections.items() if entries}
        return validate_output(raw, graph, source=source)
    return validate_output({"circuits": [_mib_circuit(sections, source, param="file")]},
                           graph, source=source)


def _load_json(path: Path, source: str) -> Any:
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:  # json.loads would silently keep the last one
                raise MethodError(f"{source} has the key {key!r} twice")
            out[key] = value
        return out

    try:
        data = json.loads(read_score_bytes(path, source).decode("utf-8"), object_pairs_hook=no_duplicates)
    except ScoreFileError as exc:
        raise MethodError(str(exc)) from None
    except RecursionError:
        raise MethodError(f"{source} is nested too deeply to be a score file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MethodError(f"{source} is not JSON: {exc}") from None
    if json_depth_exceeds(data):
        raise MethodError(f"{source} nests deeper than {MAX_SCORE_JSON_DEPTH} levels; a score file nests three")
    return data


def _mib_sections(data: Any, graph: ComputationGraph, source: str) -> dict[str, dict[str, Mapping[str, Any]]]:
    """{'nodes': {...}, 'edges': {...}} with every entry as {'score'?, 'in_graph'?}, checked."""
    if not isinstance(data, Mapping) or not ({"nodes", "edges"} & set(data)):
        raise MethodError(f"{source}: expected MIB's format with 'nodes' and/or 'edges'")
    unknown = set(data) - {"cfg", "nodes", "edges"}
    if unknown:
        raise MethodError(f"{source}: unknown top-level keys {sorted(unknown)}; MIB's format has cfg, nodes, edges")
    cfg = data.get("cfg")
    if isinstance(cfg, Mapping):
        for key, have in (("n_layers", graph.n_layers), ("n_heads", graph.n_heads)):
            if isinstance(cfg.get(key), int) and not isinstance(cfg[key], bool) and cfg[key] != have:
                raise MethodError(f"{source}: cfg {key} is {cfg[key]}, the model has {have}")
    sections: dict[str, dict[str, Mapping[str, Any]]] = {}
    for part in ("nodes", "edges"):
        entries = data.get(part) or {}
        if not isinstance(entries, Mapping):
            raise MethodError(f"{source}: '{part}' must map names to {{'score', 'in_graph'}} objects")
        out: dict[str, Mapping[str, Any]] = {}
        for name, value in entries.items():
            if part == "nodes" and isinstance(value, bool):
                value = {"in_graph": value}  # older EAP-IG files: node name -> in_graph
            if not isinstance(value, Mapping):
                raise MethodError(f"{source}: '{part}' must map names to {{'score', 'in_graph'}} objects")
            flag = value.get("in_graph")
            if flag is not None and not isinstance(flag, bool):
                raise MethodError(
                    f"{source}: in_graph of {name!r} is {flag!r}, not true/false; a MIB file holds one circuit "
                    "(several circuits are several files in one folder: pass the folder)")
            out[str(name)] = value
        sections[part] = out
    if not sections["nodes"] and not sections["edges"]:
        raise MethodError(f"{source} has no node or edge entries; an empty circuit is written with every "
                          "entry's in_graph false, and scores need at least one entry")
    return sections


def _mib_circuit(sections: Mapping[str, Mapping[str, Mapping[str, Any]]], source: str, *, param: str) -> dict[str, Any]:
    """The circuit of one file's in_graph flags: its nodes (with every in-graph edge's endpoints)
    and its edges (None when the file lists no edges)."""
    flagged = [v for entries in sections.values() for v in entries.values() if "in_graph" in v]
    if not flagged:
        raise MethodError(f"{source}: no entry has an in_graph flag (nor, for a single file, a score); "
                          "nothing marks a circuit")
    edges = [k for k, v in sections["edges"].items() if v.get("in_graph")]
    nodes = [k for k, v in sections["nodes"].items() if v.get("in_graph")]
    try:
        nodes += [n for e in edges for n in parse_edge(e)]
    except ValueError as exc:
        raise MethodError(f"{source}: {exc}") from None
    return {"param": param, "nodes": list(dict.fromkeys(nodes)), "edges": edges if sections["edges"] else None}


def to_score_file(output: MethodOutput, cfg: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """MIB's score-file JSON for a scoring method's output (in_graph left False). A circuit
    method's output is several files (`to_circuit_files`); an empty file here would read as nothing."""
    if output.circuits is not None:
        raise MethodError("a circuit method's output is one MIB file per circuit: use to_circuit_files")
    return {
        "cfg": dict(cfg or {}),
        "nodes": {n: {"score": s, "in_graph": False} for n, s in (output.node_scores or {}).items()},
        "edges": {f"{s}->{d}": {"score": v, "in_graph": False} for (s, d), v in (output.edge_scores or {}).items()},
    }


def to_circuit_files(output: MethodOutput, graph: ComputationGraph,
                     cfg: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """A circuit method's output as MIB circuit files, {file name: JSON}, for one folder: every
    node flagged in_graph, and, when the run lists edges, every q/k/v edge (an edge into a head
    stands for its three inputs). Names sort in run order, so `read_score_file(folder)` gives the
    same circuits back, the chosen one first; the run's param is kept in cfg."""
    if output.circuits is None:
        raise MethodError("a scoring method's output is one MIB score file: use to_score_file")
    qkv = graph.at("qkv").edges
    files = {}
    for i, run in enumerate(output.circuits):
        nodes = set(run.nodes) | {"input", "logits"}
        edges = {} if run.edges is None else {
            f"{s}->{d}": {"score": None, "in_graph": (s, promote(d)) in run.edges} for s, d in qkv}
        files[f"circuit-{i:03d}.json"] = {
            "cfg": {**dict(cfg or {}), "n_layers": graph.n_layers, "n_heads": graph.n_heads, "param": run.param},
            "nodes": {n: {"in_graph": n in nodes} for n in ("input", *graph.components, "logits")},
            "edges": edges,
        }
    return files
