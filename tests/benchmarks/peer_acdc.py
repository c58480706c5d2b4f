"""The ACDC reference side of bench_peers.py (ArthurConmy/Automatic-Circuit-Discovery's TLACDCExperiment).

    /path/to/venv-acdc/bin/python tests/benchmarks/peer_acdc.py DIR

Needs the reference's `acdc` package importable (its source folder on PYTHONPATH) and the
TransformerLens it pins. Reads the files bench_peers.py wrote in DIR (model.safetensors,
model.json, task.safetensors, spec.json) and writes DIR/acdc_ref.json. Imports no zoo code.

One TLACDCExperiment per τ, as the reference's main.py runs it (indices and names mode "normal",
remove_redundant False, corrupted ablation from the counterfactual batch), stepping until no node
is left. Its per-node graph images (acdc_graphics.show, a graphviz render per kept node) are
switched off: they are plotting, not search, and need a graphviz install. The metric is the KL
divergence of the circuit's output from the full model's, averaged over positions 1.., as the
zoo's ACDC metric. Edges are reported as auto-circuit names them ("A0.1->A2.3.Q").
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file


class Capped(Exception):
    """Raised from the metric when a run reaches its time cap."""


def load_model(folder: Path) -> Any:
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    fields = {f.name for f in dataclasses.fields(HookedTransformerConfig)}
    config = {k: v for k, v in json.loads((folder / "model.json").read_text()).items() if k in fields}
    model = HookedTransformer(HookedTransformerConfig(**config))
    missing, unexpected = model.load_state_dict(load_file(folder / "model.safetensors"), strict=False)
    assert not unexpected and all(k.endswith(("mask", "IGNORE")) for k in missing), (missing, unexpected)
    model.eval()
    return model


def node_name(hook: str, index: Any) -> str:
    """The reference's (hook name, index) as auto-circuit's node name."""
    parts = hook.split(".")
    head = index.as_index[2] if len(index.as_index) > 2 else None
    if hook == "blocks.0.hook_resid_pre":
        return "Resid Start"
    if hook.endswith("hook_resid_post"):
        return "Resid End"
    if hook.endswith(("hook_mlp_out", "hook_mlp_in")):
        return f"MLP {parts[1]}"
    if hook.endswith("attn.hook_result"):
        return f"A{parts[1]}.{head}"
    letter = parts[-1].removeprefix("hook_").removesuffix("_input").upper()
    return f"A{parts[1]}.{head}.{letter}"


def outcome(edges: dict[tuple, Any], remaining: set[tuple]) -> tuple[dict[str, bool], set[str]]:
    """{edge: kept} over the decided residual (ADDITION) edges, and the undecided ones. An edge into a
    q/k/v input counts as removed once that input's direct edge into the head (q_input -> q) is.
    `remaining` are the edges still in the correspondence: one that is not present there was removed;
    one not present but still there is the edge in flight when a cap hit (undecided)."""
    from acdc.TLACDCEdge import EdgeType

    def state(key: tuple, e: Any) -> bool | None:  # kept, removed, or undecided (None)
        if not e.present:
            return False if (key not in remaining or e.effect_size is not None) else None
        return True if e.effect_size is not None else None

    direct = {(child, idx): state((child, idx, p, pi), e) for (child, idx, p, pi), e in edges.items()
              if e.edge_type == EdgeType.DIRECT_COMPUTATION}
    decided, undecided = {}, set()
    for key, e in edges.items():
        child, cidx, parent, pidx = key
        if e.edge_type != EdgeType.ADDITION:
            continue
        name = f"{node_name(parent, pidx)}->{node_name(child, cidx)}"
        kept = state(key, e)
        if child.endswith(("q_input", "k_input", "v_input")):
            letter = child.split("_")[-2][-1]
            if direct[(f"blocks.{child.split('.')[1]}.attn.hook_{letter}", cidx)] is False:
                kept = False  # the head's q/k/v was cut: every edge into its input is gone
        if kept is None:
            undecided.add(name)
        else:
            decided[name] = kept
    return decided, undecided


def run_tau(model: Any, clean: torch.Tensor, corrupt: torch.Tensor, tau: float, deadline: float) -> dict[str, Any]:
    import acdc.TLACDCExperiment as experiment

    experiment.show = lambda *args, **kwargs: None  # graph images: plotting, not search (module doc)
    with torch.no_grad():
        log_p = torch.log_softmax(model(clean)[:, 1:].double(), dim=-1)

    def kl(logits: torch.Tensor) -> torch.Tensor:
        if time.perf_counter() > deadline:
            raise Capped
        log_q = torch.log_softmax(logits[:, 1:].double(), dim=-1)
        return (log_p.exp() * (log_p - log_q)).sum(-1).mean()

    start = time.perf_counter()
    exp = experiment.TLACDCExperiment(model=model, ds=clean, ref_ds=corrupt, threshold=tau, metric=kl,
                                      verbose=False, indices_mode="normal", names_mode="normal",
                                      remove_redundant=False, using_wandb=False, add_sender_hooks=True)
    edges = exp.corr.all_edges()  # every edge object now; removal only flips .present and unlinks
    capped = False
    try:
        while exp.current_node is not None:
            exp.step(testing=False)
    except Capped:
        capped = True
    wall = time.perf_counter() - start
    model.reset_hooks()
    decided, undecided = outcome(edges, set(exp.corr.all_edges()))
    return {"tau": tau, "removed": sorted(e for e, kept in decided.items() if not kept),
            "kept": sorted(e for e, kept in decided.items() if kept), "undecided": len(undecided),
            "done": len(decided), "total": len(decided) + len(undecided), "capped": capped, "wall_s": wall}


def main() -> None:
    import contextlib
    import io
    import os

    folder = Path(sys.argv[1])
    spec = json.loads((folder / "spec.json").read_text())
    torch.set_num_threads(spec["threads"])
    model = load_model(folder)
    task = load_file(folder / "task.safetensors")
    os.chdir(folder)  # the reference writes scratch files (ims/) relative to the working directory
    start, runs = time.perf_counter(), []
    for base, exp in spec["taus"]:
        with contextlib.redirect_stdout(io.StringIO()):  # it prints every node it visits
            runs.append(run_tau(model, task["clean"], task["corrupt"], base * 10**exp, time.perf_counter() + spec["cap_s"]))
        print(f"acdc-ref tau {runs[-1]['tau']}: {runs[-1]['wall_s']:.1f} s, {runs[-1]['done']}/{runs[-1]['total']}",
              file=sys.stderr, flush=True)
        if runs[-1]["capped"]:
            break
    from importlib.metadata import version

    versions = {p: version(p) for p in ("transformer-lens", "torch", "numpy")}
    (folder / "acdc_ref.json").write_text(json.dumps({"runs": runs, "wall_s": time.perf_counter() - start,
                                                       "versions": versions}))


if __name__ == "__main__":
    main()
