"""Case -> Tracr -> HookedTransformer, with its encoding and high-level graph, cached on disk.

`compile_case` reads like the pipeline: validate, look in the cache, compile with Tracr, convert,
derive the graph, write the cache. The cache holds safetensors + JSON only (never pickle) and is
keyed by a fingerprint of the case (metadata, program structure and its outputs on fixed inputs),
so editing a case recompiles it. Tracr's haiku initialisation dominates a cold compile; JAX's
persistent compilation cache (under the same root) makes a recompilation fast too.

Two layers: a zoo root's own cache (`cache_dir/<entry>/`, what the root's entries were built
from) and a shared cache every root reuses (`shared_cache/<entry>-<fingerprint>/`, decided by
`shared_cache_dir`: a user cache). The fingerprint holds the program's structure, its
outputs under `rasp.evaluate` and the compiler's version, so a shared entry is only reused for the
same program and Tracr; its weights are checked against the sha256 recorded beside them.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from eval.core.circuit import Circuit
from rasp_programs.case import BOS, PAD, Case, InputSeq, Value
from eval.core.tlens import build_hooked
from rasp_programs.convert import assembled_to_hooked
from rasp_programs.encoding import Encoding
from rasp_programs.graph import high_level_graph
from eval.core.provenance import package_versions

CACHE_FORMAT = "zoo-compiled/1"


class CompileError(RuntimeError):
    """Tracr could not compile the case's program."""


def shared_cache_dir() -> Path | None:
    """The compiled-case cache every zoo root reuses: $ZOO_COMPILE_CACHE if set ("off" or empty: none),
    else ~/.cache/zoo-compiled. Entries are keyed by the case's program and the Tracr version, so roots
    and checkouts can share it safely."""
    env = os.environ.get("ZOO_COMPILE_CACHE")
    if env is not None:
        return None if env.strip() in ("", "off") else Path(env).expanduser()
    return Path.home() / ".cache" / "zoo-compiled"


@dataclasses.dataclass(frozen=True)
class CompiledCase:
    """A case with its Tracr-compiled model (TransformerLens weights) and high-level graph.

    `model` builds the TransformerLens model on first use (eval.core.tlens.build_hooked: a
    HookedTransformer on 3.x, a TransformerBridge on 4.x): importing TransformerLens takes ~8 s, so
    code that only needs the weights (training, the graph) uses `state_dict` and `config`.
    """

    case: Case
    state_dict: dict[str, torch.Tensor]
    """TransformerLens parameter names -> tensors (W_E, W_pos, blocks.{l}.attn.W_Q, ...)."""
    config: dict[str, Any]
    """HookedTransformerConfig fields, JSON-native."""
    encoding: Encoding
    residual_labels: tuple[str, ...]
    """Name of every residual dimension: `sop:value` (categorical) or `sop` (numerical)."""
    graph: Circuit
    """The high-level graph: ground truth of the compiled model (see rasp_programs.graph)."""
    seconds: float
    from_cache: bool

    @functools.cached_property
    def model(self) -> Any:
        """The compiled model in the installed TransformerLens (built on first use)."""
        return build_hooked(self.config, self.state_dict)

    def run(self, seqs: list[InputSeq]) -> list[list[Value]]:
        """Decoded outputs of the compiled model on input sequences (BOS is added here)."""
        tokens, mask = self.encoding.encode(seqs)
        with torch.no_grad():
            logits = self.model(tokens, attention_mask=mask)
        return self.encoding.decode(logits, [len(s) for s in seqs])

    def summary(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "id": self.case.id,
            "entry": self.case.entry_name,
            "n_layers": cfg["n_layers"],
            "n_heads": cfg["n_heads"],
            "d_model": cfg["d_model"],
            "d_head": cfg["d_head"],
            "d_mlp": cfg["d_mlp"],
            "nodes": len(self.graph.nodes),
            "edges": len(self.graph.edges),
            "seconds": round(self.seconds, 3),
            "from_cache": self.from_cache,
        }


def compile_case(case: Case, cache_dir: Path | None = None, *, shared_cache: Path | None = None) -> CompiledCase:
    """Compile `case` (or load it from `cache_dir/<entry>/`, else from the shared cache) to a
    HookedTransformer + graph; a compilation is written to both caches."""
    start = time.perf_counter()
    fingerprint = case_fingerprint(case)
    entry_dir = cache_dir / case.entry_name if cache_dir is not None else None
    shared_dir = shared_cache / f"{case.entry_name}-{fingerprint[:20]}" if shared_cache is not None else None
    for where in (entry_dir, shared_dir):
        cached = None if where is None else _load_cached(case, where, fingerprint)
        if cached is not None:
            config, state_dict, encoding, labels = cached
            # The graph is recomputed (a scan of the weights), so a cache never holds a graph
            # made by an older rule.
            graph = high_level_graph(state_dict, config, labels, _expression_labels(case))
            compiled = CompiledCase(
                case=case, state_dict=state_dict, config=config, encoding=encoding,
                residual_labels=tuple(labels), graph=graph,
                seconds=time.perf_counter() - start, from_cache=True,
            )
            if where is shared_dir and entry_dir is not None:
                _write_cache(entry_dir, fingerprint, compiled, state_dict)  # the root's own copy
            return compiled
    jax_home = shared_cache if shared_cache is not None else cache_dir
    if jax_home is not None:
        _enable_jax_cache(jax_home / "jax")
    assembled, encoding, labels, output_columns = _compile_with_tracr(case)
    config, state_dict = assembled_to_hooked(assembled, case, output_columns)
    graph = high_level_graph(state_dict, config, labels, _expression_labels(case))
    compiled = CompiledCase(
        case=case, state_dict=state_dict, config=config, encoding=encoding,
        residual_labels=tuple(labels), graph=graph,
        seconds=time.perf_counter() - start, from_cache=False,
    )
    if entry_dir is not None:
        _write_cache(entry_dir, fingerprint, compiled, state_dict)
    if shared_dir is not None:
        try:
            _write_cache(shared_dir, fingerprint, compiled, state_dict)
        except OSError:  # a read-only user cache only costs the next root a compilation
            pass
    return compiled


def _compile_with_tracr(case: Case) -> tuple[Any, Encoding, list[str], list[int]]:
    from tracr.compiler import compiling

    program = case.program
    try:
        assembled = compiling.compile_rasp_to_model(
            program, vocab=set(case.vocab), max_seq_len=case.max_seq_len,
            causal=case.causal, compiler_bos=BOS, compiler_pad=PAD,
        )
    except (NotImplementedError, ValueError, KeyError, AssertionError) as exc:
        raise CompileError(f"Tracr cannot compile case {case.id}: {exc}") from exc
    names = {expr.label: expr.name for expr in _all_expressions(program)}
    labels = [_canonical_label(label, names) for label in assembled.residual_labels]
    in_map = assembled.input_encoder.encoding_map
    input_vocab = tuple(sorted(in_map, key=in_map.get))
    out_name = program.name
    if case.task_kind == "classification":
        out_map = assembled.output_encoder.encoding_map
        output_vocab = tuple(sorted(out_map, key=out_map.get))
        columns = [labels.index(f"{out_name}:{value}") for value in output_vocab]
    else:
        output_vocab = None
        columns = [labels.index(out_name)]
    encoding = Encoding(
        input_vocab=input_vocab, output_vocab=output_vocab,
        max_seq_len=case.max_seq_len, task_kind=case.task_kind,
    )
    return assembled, encoding, labels, columns


def _all_expressions(program: Any) -> list[Any]:
    """Every RASP expression the program depends on (depth-first, each once)."""
    seen: dict[int, Any] = {}
    stack = [program]
    while stack:
        expr = stack.pop()
        if id(expr) not in seen:
            seen[id(expr)] = expr
            stack.extend(expr.children)
    return list(seen.values())


def _canonical_label(label: str, names: dict[str, str]) -> str:
    """`map_17:odd` -> `is_odd:odd`: tracr's labels carry a global counter, names do not."""
    sop, sep, value = label.partition(":")
    for expr_label, name in names.items():
        if sop == expr_label:
            return name + sep + value
        if sop.startswith(expr_label + "_"):  # internal directions, e.g. selector-width hidden
            return name + sop[len(expr_label):] + sep + value
    return label


def describe_program(case: Case) -> list[str]:
    """The program as lines `name = Kind(children) [encoding]`, inputs first."""
    described = _expression_labels(case)
    depth: dict[int, int] = {}

    def depth_of(expr: Any) -> int:  # longest path from tokens / indices
        if id(expr) not in depth:
            depth[id(expr)] = 1 + max((depth_of(c) for c in expr.children), default=-1)
        return depth[id(expr)]

    exprs = [e for e in _all_expressions(case.program) if e.name in described]
    ordered = sorted(exprs, key=lambda e: (depth_of(e), e.name))
    return list(dict.fromkeys(described[e.name] for e in ordered))


def _expression_labels(case: Case) -> dict[str, str]:
    """name -> a readable description of the expression, e.g. `Map(tokens)`."""
    from tracr.rasp import rasp

    def describe(expr: Any) -> str:
        kind = type(expr).__name__
        if isinstance(expr, rasp.Select):
            pred = getattr(expr.predicate, "name", "custom")
            return f"Select({expr.keys.name}, {expr.queries.name}, {pred})"
        if isinstance(expr, (rasp.Aggregate, rasp.SelectorWidth)):
            inner = ", ".join(describe(c) if isinstance(c, rasp.Selector) else c.name for c in expr.children)
            return f"{kind}({inner})"
        return f"{kind}({', '.join(c.name for c in expr.children)})"

    encoding = lambda e: "numerical" if rasp.is_numerical(e) else "categorical"  # noqa: E731
    return {
        expr.name: f"{expr.name} = {describe(expr)} [{encoding(expr)}]"
        for expr in _all_expressions(case.program)
        if isinstance(expr, rasp.SOp) and expr.children
    }


def case_fingerprint(case: Case) -> str:
    """Hash of what determines the compiled model: metadata, program structure and behaviour."""
    program = case.program
    structure = sorted(
        (type(e).__name__, e.name, tuple(c.name for c in e.children)) for e in _all_expressions(program)
    )
    probe = case.sample(64, seed=0)
    outputs = [[repr(v) for v in case.evaluate(seq)] for seq in probe]
    payload = json.dumps(
        {
            "format": CACHE_FORMAT,
            "case": case.metadata(),
            "structure": structure,
            "probe": [[repr(v) for v in s] for s in probe],
            "outputs": outputs,
            "tracr": package_versions(["tracr-pypi"])["tracr-pypi"],
        },
        sort_keys=True, default=repr,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def _enable_jax_cache(path: Path) -> None:
    import jax

    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


def _load_cached(case: Case, entry_dir: Path, fingerprint: str):
    meta_path, weights_path = entry_dir / "compiled.json", entry_dir / "model.safetensors"
    if not (meta_path.is_file() and weights_path.is_file()):
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if meta.get("format") != CACHE_FORMAT or meta.get("fingerprint") != fingerprint:
        return None
    from safetensors.torch import load

    try:
        raw = weights_path.read_bytes()
    except OSError:
        return None
    if meta.get("weights_sha256") not in (None, hashlib.sha256(raw).hexdigest()):
        return None  # damaged or replaced weights: compile again
    state_dict = load(raw)
    return meta["config"], state_dict, Encoding.from_json(meta["encoding"]), meta["residual_labels"]


def _write_cache(entry_dir: Path, fingerprint: str, compiled: CompiledCase, state_dict) -> None:
    """Write into a temporary sibling directory, then rename: readers never see half a cache."""
    from safetensors.torch import save_file

    entry_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry_dir.name}.", dir=entry_dir.parent))
    save_file({k: v.contiguous() for k, v in state_dict.items()}, str(tmp / "model.safetensors"),
              metadata={"format": CACHE_FORMAT})
    meta = {
        "format": CACHE_FORMAT,
        "fingerprint": fingerprint,
        "weights_sha256": hashlib.sha256((tmp / "model.safetensors").read_bytes()).hexdigest(),
        "case": compiled.case.metadata(),
        "config": compiled.config,
        "encoding": compiled.encoding.to_json(),
        "residual_labels": list(compiled.residual_labels),
        "graph": compiled.graph.to_json(),
    }
    (tmp / "compiled.json").write_text(json.dumps(meta, indent=1, default=_json_value))
    old = entry_dir.with_name(f".{entry_dir.name}.old.{os.getpid()}")
    try:
        if entry_dir.exists():
            entry_dir.rename(old)
        tmp.rename(entry_dir)
    except OSError:  # another process wrote the same entry meanwhile: theirs is as good
        pass
    finally:
        _rmtree(tmp)
        _rmtree(old)


def _json_value(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    return repr(value)


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
