"""The zoo beside auto-circuit and the ACDC reference: same model, data, metric and τ grid; wall time and agreement, as JSON.

    python tests/benchmarks/bench_peers.py --peer-python VENV_AC/bin/python \
        [--acdc-ref-python VENV_ACDC/bin/python --acdc-ref-src ACDC_SRC] \
        [--sizes 6x4 12x12] [--repeats 2 2] [--n 32] [--cap-s 180] [--threads 1] [--out results.json]

The peers are never dependencies of the project; each lives in its own Python 3.11 venv:
- VENV_AC: torch 2.13.0+cpu, auto-circuit==1.0.1, then transformer-lens==2.16.1 (auto-circuit 1.0.1
  imports transformer_lens.past_key_value_caching, gone in 3.x; 4.x has no HookedTransformer),
  numpy 2.4.6 over TL 2.16's numpy<2 pin (the resolved pyarrow needs numpy 2) and attrs (imported by
  auto_circuit.data, not declared).
- VENV_ACDC: torch 2.13.0+cpu, transformer-lens==1.6.1 (the reference's pin), transformers==4.35.2,
  datasets==2.16.1, networkx, plotly, wandb, torchtyping, cmapy, pygraphviz (Debian's
  libgraphviz-dev). ACDC_SRC is a checkout of ArthurConmy/Automatic-Circuit-Discovery (commit
  bc99ace8), put on PYTHONPATH, not installed: its pyproject pins torch<2.0 and a tracr git
  dependency; every side here runs the same torch instead.

Models and data are bench_edge_methods.py's (random_model, random_task: 10 positions, labels the
model's own argmax on clean and resampled inputs). The peer runs in its own venv as a subprocess
(peer_autocircuit.py), fed safetensors + JSON in a temporary folder, never pickle; it imports no
zoo code. Per size the runs go zoo, peer, zoo, peer (--repeats) and times are medians.

Matching the metric. The zoo's m is the mean over label positions (1..9) where clean and
counterfactual labels differ of logit[label] - logit[cf label]. auto-circuit averages its answer
difference over every scored position (slice "not_first_seq": positions 1..); a position whose
labels agree gets wrong answer = answer, so it adds exactly 0. Its m is therefore the zoo's times
differing / (n·9), and peer scores are divided by that factor before comparing. ACDC's metric is
the same on both sides: KL(full || circuit) averaged over positions 1.. (the zoo computes it in
float64, auto-circuit in float32).

Methods compared: `edge_patching` (exact, per edge; auto-circuit has no such algorithm, so the peer
side is a loop over its patch masks, one forward pass per edge from the destination's block, as its
ACDC runs them), `eap` (its mask_gradient_prune_scores, logit, mask 0), `eap_ig` (its integrated
gradients over the edge masks, Z + 1 = 6 mask values 0..1, against both zoo variants) and `acdc`.

Ground truth: random models have no planted circuit, so it is the top --gt-share of edges by
|exact effect| from the zoo's edge patching (checked against the peer's exact effects). AUROC uses
|score|. A run past --cap-s stops, records the share of edges done, and its full time is
extrapolated (marked) by a block-count model: an edge into block l costs L - l blocks.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_edge_methods import random_model, random_task  # the same models and data
from peers_compare import IG_STEPS, acdc_ref_report, agreement, timings

PEER_SCRIPT = Path(__file__).resolve().parent / "peer_autocircuit.py"
ACDC_REF_SCRIPT = Path(__file__).resolve().parent / "peer_acdc.py"
TAUS = ((1, -2), (1, -3), (1, -1))
"""ACDC thresholds as base·10**exp (auto-circuit's form); 1e-2 first: a capped peer run reaches only it."""


def peer_name(node: str) -> str:
    """A zoo node name as auto-circuit spells it: input -> Resid Start, a1.h2<q> -> A1.2.Q, m3 -> MLP 3."""
    from eval.core.circuit import parse_node

    if node in ("input", "logits"):
        return "Resid Start" if node == "input" else "Resid End"
    p = parse_node(node)
    if p.kind == "mlp":
        return f"MLP {p.layer}"
    return f"A{p.layer}.{p.head}" + (f".{p.qkv.upper()}" if p.qkv else "")


def peer_edge(edge: tuple[str, str]) -> str:
    return f"{peer_name(edge[0])}->{peer_name(edge[1])}"


def acdc_order(graph: Any) -> list[tuple[str, str]]:
    """The zoo's ACDC visiting order (eval.methods.acdc.acdc_sweep)."""
    from eval.methods.edge_patching import readers

    qkv = graph.at("qkv")
    incoming: dict[str, list[str]] = {}
    for src, dst in qkv.edges:
        incoming.setdefault(dst, []).append(src)
    return [(src, reader) for reader in reversed(readers(qkv)) for src in reversed(incoming[reader])]


def write_inputs(folder: Path, model: Any, task: Any, spec: dict[str, Any]) -> float:
    """model / task / spec files for the peer; returns the factor peer m = zoo m x factor."""
    from safetensors.torch import save_file

    from eval.core.tlens import hooked_config

    keys = hooked_config(n_layers=1, d_model=8, n_heads=1, d_head=8, d_mlp=8, d_vocab=2, d_vocab_out=2,
                         n_ctx=2, causal=True)
    (folder / "model.json").write_text(json.dumps({k: getattr(model.cfg, k) for k in keys}))
    state = {k: v.contiguous() for k, v in model.state_dict().items() if not k.endswith(("mask", "IGNORE"))}
    save_file(state, folder / "model.safetensors")
    labels, cf = task.labels[:, 1:], task.cf_labels[:, 1:]
    differ = labels != cf
    save_file({"clean": task.tokens.contiguous(), "corrupt": task.cf_tokens.contiguous(),
               "answers": labels.unsqueeze(-1).contiguous(),
               "wrong_answers": torch.where(differ, cf, labels).unsqueeze(-1).contiguous()},
              folder / "task.safetensors")
    (folder / "spec.json").write_text(json.dumps(spec))
    return float(differ.sum()) / differ.numel()


def run_peer(python: str, folder: Path, timeout: float, script: Path = PEER_SCRIPT, result: str = "peer.json",
             env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a peer script in its own venv on the files in folder; its JSON result."""
    start = time.perf_counter()
    proc = subprocess.run([python, str(script), str(folder)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, check=False)  # its stderr goes into the error
    if proc.returncode != 0:
        raise RuntimeError(f"{script.name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads((folder / result).read_text())
    out["process_s"] = time.perf_counter() - start
    return out


def run_acdc_ref(args: argparse.Namespace, folder: Path) -> dict[str, Any] | None:
    """The ACDC reference implementation's runs (peer_acdc.py), when --acdc-ref-python is given."""
    if not args.acdc_ref_python:
        return None
    return run_peer(args.acdc_ref_python, folder, 4 * args.cap_s + 600, script=ACDC_REF_SCRIPT,
                    result="acdc_ref.json", env={"PYTHONPATH": str(args.acdc_ref_src)})


def zoo_scores(model: Any, task: Any, graph: Any, key: str) -> dict[str, Any]:
    from eval.methods.interface import call_method
    from eval.methods.registry import REGISTRY

    start = time.perf_counter()
    out = call_method(REGISTRY[key], model, task, graph=graph, seed=0, ablation="resample")
    return {"scores": dict(out.edge_scores), "wall_s": time.perf_counter() - start}


def zoo_acdc(model: Any, task: Any, graph: Any, taus: tuple[float, ...], cap_s: float) -> dict[str, Any]:
    """eval.methods.acdc.acdc's sweep (same Sweep, metric and order), stopped at cap_s so a capped
    run keeps the decisions it made."""
    from eval.methods.acdc import acdc_metric
    from eval.methods.acdc_sweep import Sweep
    from eval.patching.ablation import make_context

    start = time.perf_counter()
    ctx = make_context(model, task, graph, "resample")
    with torch.no_grad():
        metric = acdc_metric("divergence", task, ctx.forward())
    order = acdc_order(graph)
    sweep = Sweep(ctx, graph.at("qkv").edges, taus, metric, max_rows=2048)
    done = 0
    for edge in order:
        if time.perf_counter() - start > cap_s:
            break
        sweep.decide(edge)
        done += 1
    return {"removed": [sorted(peer_edge(e) for e in gone) for gone in sweep.removed], "done": done,
            "total": len(order), "wall_s": time.perf_counter() - start}


def loadavg() -> str:
    """1, 5 and 15 minute load averages: the machine is shared."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_zoo(model: Any, task: Any, graph: Any, taus: tuple[float, ...], cap_s: float) -> dict[str, Any]:
    """Every compared zoo method once; scores keyed by auto-circuit's edge names."""
    out: dict[str, Any] = {}
    for key in ("edge_patching", "eap", "eap_ig_inputs", "eap_ig_activations"):
        res = zoo_scores(model, task, graph, key)
        out[key] = {"scores": {peer_edge(e): v for e, v in res["scores"].items()}, "wall_s": res["wall_s"]}
        print(f"zoo {key}: {res['wall_s']:.2f} s", file=sys.stderr, flush=True)
    out["acdc"] = zoo_acdc(model, task, graph, taus, cap_s)
    print(f"zoo acdc: {out['acdc']['wall_s']:.2f} s ({out['acdc']['done']}/{out['acdc']['total']})",
          file=sys.stderr, flush=True)
    return out


def run_size(size: str, repeats: int, args: argparse.Namespace) -> dict[str, Any]:
    from eval.core.graph import graph_of
    from eval.patching.ablation import behaviour, make_context

    layers, heads = (int(x) for x in size.split("x"))
    model = random_model(layers, heads)
    task = random_task(model, args.n)
    graph = graph_of(model)
    edges = list(graph.at("qkv").edges)
    acdc_edges = acdc_order(graph)
    # The peer's loop must visit destinations last block first: a pass from block l rewrites the
    # stored source outputs of blocks >= l, which a later pass from a later block would read stale.
    patch_edges = acdc_edges
    orders = {"acdc": acdc_edges, "patch": patch_edges}
    taus = [b * 10**e for b, e in TAUS]
    native = ["acdc_native"] if size in args.native_acdc else []
    spec = {"methods": ["edge_patching", "eap", "eap_ig", "acdc", *native], "taus": [list(t) for t in TAUS],
            "acdc_order": [peer_edge(e) for e in acdc_edges], "patch_order": [peer_edge(e) for e in patch_edges],
            "cap_s": args.cap_s, "threads": args.threads, "ig_samples": IG_STEPS}
    zoo_runs, peer_runs, ref_runs, loads = [], [], [], [loadavg()]
    with tempfile.TemporaryDirectory() as tmp:
        factor = write_inputs(Path(tmp), model, task, spec)
        for r in range(repeats):
            zoo_runs.append(run_zoo(model, task, graph, tuple(taus), args.cap_s))
            loads.append(loadavg())
            peer_runs.append(run_peer(args.peer_python, Path(tmp), timeout=4 * args.cap_s + 600))
            loads.append(loadavg())
            ref = run_acdc_ref(args, Path(tmp))
            if ref is not None:
                ref_runs.append(ref)
                loads.append(loadavg())
    with torch.no_grad():
        clean = behaviour(task, make_context(model, task, graph).forward())
    return {"model": size, "qkv_edges": len(edges), "n": args.n, "repeats": repeats, "metric_factor": round(factor, 6),
            "clean_metric_zoo": round(clean, 6),
            "clean_metric_peer_rescaled": round(peer_runs[-1]["edge_patching"]["clean_metric"] / factor, 6),
            "peer_versions": peer_runs[-1]["versions"], "loadavg": loads,
            "timing": timings(zoo_runs, peer_runs, orders, layers, len(taus)),
            "agreement": agreement(zoo_runs[-1], peer_runs[-1], factor, spec["acdc_order"], taus, args.gt_share),
            **(acdc_ref_report(zoo_runs, ref_runs, spec["acdc_order"], taus, orders, layers) if ref_runs else {})}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--peer-python", required=True, help="python of auto-circuit's own venv")
    parser.add_argument("--sizes", nargs="+", default=["6x4", "12x12"], help="LAYERSxHEADS")
    parser.add_argument("--repeats", nargs="+", type=int, default=[2, 1], help="zoo/peer pairs per size")
    parser.add_argument("--n", type=int, default=32)
    parser.add_argument("--cap-s", type=float, default=240.0, help="stop a per-edge run after this; extrapolate")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--gt-share", type=float, default=0.05, help="top share of |exact effect| = ground truth")
    parser.add_argument("--native-acdc", nargs="*", default=["6x4"],
                        help="sizes where the peer's ACDC also runs in its own edge order")
    parser.add_argument("--acdc-ref-python", default=None, help="python of the ACDC reference's venv (optional)")
    parser.add_argument("--acdc-ref-src", type=Path, default=None, help="folder holding the reference's acdc package")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from importlib.metadata import version

    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "torch_threads": args.threads,
                              "cap_s": args.cap_s, "taus": [b * 10**e for b, e in TAUS], "ig_steps": IG_STEPS,
                              "zoo_versions": {p: version(p) for p in ("torch", "transformer-lens")},
                              "command": " ".join(sys.argv), "results": []}
    repeats = args.repeats + [args.repeats[-1]] * (len(args.sizes) - len(args.repeats))
    for size, r in zip(args.sizes, repeats):
        report["results"].append(run_size(size, r, args))
        if args.out:
            args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
