"""Every built-in method on a random model on one device (`--device cuda` on a GPU), wall time per
method with the device synchronised, as JSON: the GPU half of issue 33's side-by-side table.

    python tests/benchmarks/bench_device.py [--device auto|cpu|cuda] [--size 12x12] [--n 32]
        [--methods ...] [--budget-s 240] [--out device.json]

The model and task are bench_edge_methods.py's (random weights, d_head 8, 10 positions; 12x12 has
32,491 q/k/v edges), built on the CPU from the seed and moved, so every device scores the same
model on the same inputs. A method still running after --budget-s seconds is stopped (SIGALRM,
checked between Python steps) and its row says `timed_out_s`. Each row also holds the scores'
checksum (sum of |score| over the edges or nodes a method returns, or its circuits' sizes) so runs
on two devices can be compared; floats differ by device in the last digits.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_edge_methods import METHODS, random_model, random_task  # noqa: E402


class _Budget(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Budget()


def checksum(out: Any) -> float:
    """One number of a method's output, to compare devices: sum |score|, or total circuit size."""
    if out.kind == "circuits":
        return float(sum(len(c.edges or ()) + len(c.nodes) for c in out.circuits))
    scores = out.edge_scores or out.node_scores or {}
    return float(sum(abs(v) for v in scores.values()))


def run_one(model: Any, task: Any, graph: Any, key: str, budget_s: float, sync: Any) -> dict[str, Any]:
    from eval.methods.interface import call_method
    from eval.methods.registry import REGISTRY

    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(max(1, int(budget_s)))
    start = time.perf_counter()
    try:
        out = call_method(REGISTRY[key], model, task, graph=graph, seed=0, ablation="resample")
        sync()
        return {"method": key, "wall_s": round(time.perf_counter() - start, 3), "kind": out.kind,
                "checksum": round(checksum(out), 4)}
    except _Budget:
        return {"method": key, "timed_out_s": round(time.perf_counter() - start, 1)}
    except Exception as exc:  # noqa: BLE001 - a failing method is a row, the others still run
        return {"method": key, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}
    finally:
        signal.alarm(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--size", default="12x12", help="LAYERSxHEADS of the random model")
    parser.add_argument("--n", type=int, default=32, help="clean inputs (and counterfactuals)")
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--budget-s", type=float, default=240.0, help="stop a method after this many seconds")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here too (after every method)")
    args = parser.parse_args()

    import torch

    from eval.core.device import device_record, resolve_device
    from eval.core.graph import graph_of

    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    layers, heads = (int(x) for x in args.size.split("x"))
    model = random_model(layers, heads)
    task = random_task(model, args.n)
    model, task = model.to(device), task.to(device)
    graph = graph_of(model)
    rows: list[dict[str, Any]] = []
    report = {"model": args.size, "qkv_edges": len(graph.at("qkv").edges), "n": args.n,
              "budget_s": args.budget_s, "device": device_record(device).to_json(), "rows": rows}
    for key in args.methods:
        rows.append(run_one(model, task, graph, key, args.budget_s, sync))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        if args.out:
            args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
