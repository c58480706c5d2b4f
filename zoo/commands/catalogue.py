"""`zoo list`, `zoo show`, `zoo compile`: the case catalogue, the planted models and Tracr compilation."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    from zoo.commands.common import add_common

    p = sub.add_parser("list", help="list the built-in cases (or planted models) with their sizes",
                       description="A table of the built-in cases: id, kind, layers, heads, nodes, "
                       "edges of the compiled model, and whether a trained entry exists locally. "
                       "`zoo list planted`: the planted models with their low-level sizes and circuits.")
    add_common(p, kind_id=False)
    p.add_argument("kind", nargs="?", choices=("case", "planted"), default="case",
                   help="what to list (default case)")
    p.add_argument("--family", metavar="NAME",
                   help="only the planted models of a failure-mode family (planted.failure_modes: rare-feature, "
                        "cancellation, saturation, redundancy, distribution-shift, large-circuit; all: every family); implies "
                        "`planted`")
    p.set_defaults(func=run_list)

    p = sub.add_parser("show", help="show a case or planted model: program, vocab, dimensions, circuit",
                       description="Compile the case (cached) and show its RASP program, vocabulary, "
                       "the compiled model's dimensions and its high-level graph (the ground truth); "
                       "for a planted model, its nodes, low-level architecture and graph.")
    add_common(p)
    p.set_defaults(func=run_show)

    p = sub.add_parser("compile", help="compile a case with Tracr to a HookedTransformer (cached)",
                       description="Compile the case's RASP program with Tracr, convert it to a "
                       "TransformerLens HookedTransformer and cache it (safetensors + JSON) under "
                       "<root>/compiled/. A second compile of an unchanged case loads the cache.")
    add_common(p)
    p.add_argument("--force", action="store_true", help="recompile even if a cached model exists")
    p.set_defaults(func=run_compile)


def load_catalogue() -> list[dict[str, Any]]:
    """The shipped summary of built-in cases (no jax / torch import)."""
    return _catalogue_file()["cases"]


def load_not_built() -> list[dict[str, str]]:
    """Described cases (InterpBench Table 11) that could not be built, each with its reason."""
    return _catalogue_file().get("not_built", [])


def _catalogue_file() -> dict[str, Any]:
    from importlib import resources

    return json.loads(resources.files("rasp_programs").joinpath("catalogue.json").read_text())


def run_list(args: argparse.Namespace) -> int:
    from zoo.paths import entries_dir, zoo_root

    if args.kind == "planted" or args.family is not None:
        from zoo.commands.planted_info import run_list_planted

        return run_list_planted(args)
    rows = load_catalogue()
    entries = entries_dir(zoo_root(args.root))
    for row in rows:
        row["trained"] = (entries / f"case-{row['id']}").is_dir()
    if args.json:
        print(json.dumps(rows, indent=1, ensure_ascii=False))
        return 0
    header = ("id", "kind", "layers", "heads", "nodes", "edges", "trained", "description")
    table = [header] + [
        (r["id"], "case", str(r["n_layers"]), str(r["n_heads"]), str(r["nodes"]), str(r["edges"]),
         "yes" if r["trained"] else "-", r["description"])
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    for row in table:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths)]
        desc = row[-1] if len(row[-1]) <= 70 else row[-1][:67] + "..."
        print("  ".join(cells + [desc]))
    for row in load_not_built():  # why: a described case that is not built is said, not hidden
        print(f"not built: case {row['id']}: {row['reason']}")
    return 0


def _compile(args: argparse.Namespace, *, force: bool = False):
    from zoo.high_level_source import resolve_case
    from zoo.errors import ZooError
    from zoo.paths import compile_cache_dir, compiled_dir, zoo_root

    case = resolve_case(args.kind, args.id)
    if case.family == "planted":
        raise ZooError(f"planted model {case.id} is written by hand, not compiled; "
                       f"`zoo show planted {case.id}` shows it, `zoo train planted {case.id}` trains it")
    from rasp_programs.compile import CompileError, compile_case

    cache = compiled_dir(zoo_root(args.root))
    if force:
        import shutil

        shutil.rmtree(cache / case.entry_name, ignore_errors=True)
    if not args.json:
        print(f"compiling case {case.id} ({case.name})...", file=sys.stderr)
    try:
        return compile_case(case, cache, shared_cache=None if force else compile_cache_dir())  # --force: Tracr again
    except CompileError as exc:
        raise ZooError(str(exc)) from None
    except PermissionError as exc:
        raise ZooError(f"cannot write the compile cache: {exc}") from None


def run_compile(args: argparse.Namespace) -> int:
    from zoo.paths import compiled_dir, zoo_root

    compiled = _compile(args, force=args.force)
    summary = compiled.summary()
    summary["path"] = str(compiled_dir(zoo_root(args.root)) / compiled.case.entry_name)
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        how = "loaded from cache" if compiled.from_cache else "compiled"
        print(f"case {summary['id']}: {how} in {summary['seconds']:.2f} s -> {summary['path']}")
        print(f"  layers {summary['n_layers']}, heads {summary['n_heads']}, d_model {summary['d_model']}, "
              f"d_head {summary['d_head']}, d_mlp {summary['d_mlp']}, "
              f"nodes {summary['nodes']}, edges {summary['edges']}")
    return 0


def run_show(args: argparse.Namespace) -> int:
    from rasp_programs.compile import describe_program

    if args.kind == "planted":
        from zoo.commands.planted_info import run_show_planted

        return run_show_planted(args)
    compiled = _compile(args)
    case = compiled.case
    info = {
        "case": case.metadata(),
        "program": describe_program(case),
        "compiled": compiled.summary(),
        "encoding": compiled.encoding.to_json(),
        "graph": compiled.graph.to_json(),
    }
    if args.json:
        print(json.dumps(info, indent=1, ensure_ascii=False, default=repr))
        return 0
    print(f"case {case.id}: {case.name} ({case.task_kind}{', causal' if case.causal else ''})")
    print(f"  {case.description}")
    if case.notes:
        print(f"  note: {case.notes}")
    print(f"  vocab: {list(case.vocab)}  lengths {case.min_seq_len}..{case.max_seq_len}")
    print("program:")
    for line in info["program"]:
        print(f"  {line}")
    s = info["compiled"]
    print(f"compiled: layers {s['n_layers']}, heads {s['n_heads']}, d_model {s['d_model']}, "
          f"d_head {s['d_head']}, d_mlp {s['d_mlp']}")
    print(f"circuit ({len(compiled.graph.nodes)} nodes, {len(compiled.graph.edges)} edges):")
    for node in compiled.graph.nodes:
        print(f"  {node:8s} {compiled.graph.labels.get(node, '')}")
    print("  edges: " + ", ".join(compiled.graph.edge_names()))
    return 0
