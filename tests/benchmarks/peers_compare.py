"""Timing and agreement for bench_peers.py: medians of zoo and peer runs (capped ones extrapolated,
marked), and how far their results agree (score agreement and AUROC against one ground truth, ACDC
circuits per τ). Works on plain JSON-able results; no model is touched here.
"""

from __future__ import annotations

import statistics
from typing import Any

import torch

IG_STEPS = 5
"""Z of both sides' EAP-IG (the zoo's default; auto-circuit's integrated_grad_samples)."""


def block_cost(edge: tuple[str, str], n_layers: int) -> int:
    """Blocks a pass patching this edge runs (both sides start at the destination's block)."""
    from eval.methods.edge_patching import reader_layer

    return n_layers - min(reader_layer(edge[1], n_layers), n_layers - 1)


def extrapolate(wall: float, done: int, order: list[tuple[str, str]], n_layers: int, runs: int = 1) -> dict[str, Any]:
    """Measured time, or (marked) the full run's time by the block-count model when capped."""
    if done >= len(order):
        return {"s": round(wall, 3), "extrapolated": False}
    cost = [block_cost(e, n_layers) for e in order]
    return {"s": round(wall * sum(cost) / max(1, sum(cost[:done])) * runs, 1), "extrapolated": True,
            "done_share": round(done / len(order), 4), "capped_after_s": round(wall, 1)}


def timings(zoo_runs: list[dict[str, Any]], peer_runs: list[dict[str, Any]], orders: dict[str, list],
            n_layers: int, n_taus: int) -> dict[str, dict[str, Any]]:
    """Median seconds per method and side (capped runs extrapolated, marked)."""
    def one(res: dict[str, Any], order: list, runs: int = 1) -> dict[str, Any]:
        done = res.get("done", len(order))
        return extrapolate(res["wall_s"], done, order, n_layers, runs)

    def acdc_peer(res: dict[str, Any]) -> dict[str, Any]:
        last = res["runs"][-1]  # a capped run is the last one; earlier τ ran in full
        full = sum(r["wall_s"] for r in res["runs"][:-1])
        part = extrapolate(last["wall_s"], last["done"], orders["acdc"], n_layers)
        left = n_taus - len(res["runs"])  # τ never started: each costs about one full sweep
        return {**part, "s": round(full + part["s"] * (1 + left), 1), "extrapolated": part["extrapolated"] or left > 0}

    pairs = {"edge_patching": ("edge_patching", "edge_patching", "patch"), "eap": ("eap", "eap", None),
             "eap_ig_inputs": ("eap_ig_inputs", "eap_ig", None), "eap_ig_activations": ("eap_ig_activations", "eap_ig", None),
             "acdc": ("acdc", "acdc", "acdc")}
    out = {}
    for row, (zk, pk, ok) in pairs.items():
        zs = [one(r[zk], orders["acdc"] if zk == "acdc" else orders["patch"]) for r in zoo_runs]
        ps = [acdc_peer(r[pk]) if pk == "acdc" else one(r[pk], orders.get(ok or "patch")) for r in peer_runs]
        z, p = statistics.median(x["s"] for x in zs), statistics.median(x["s"] for x in ps)
        out[row] = {"zoo_s": round(z, 3), "peer_s": round(p, 3), "ratio_peer_over_zoo": round(p / z, 2) if z else None,
                    "zoo_runs": zs, "peer_runs": ps}
    return out


def acdc_ref_timing(res: dict[str, Any], n_taus: int) -> dict[str, Any]:
    """The reference runs a full forward pass per edge, so a capped τ is extrapolated by the share
    of edges decided; τ never started cost as much again (marked)."""
    runs = res["runs"]
    full = sum(r["wall_s"] for r in runs if not r["capped"])
    last = runs[-1]
    if not last["capped"] and len(runs) == n_taus:
        return {"s": round(full, 3), "extrapolated": False}
    part = last["wall_s"] * last["total"] / max(1, last["done"])
    return {"s": round(full + part * (1 + n_taus - len(runs)), 1), "extrapolated": True,
            "done_share": round(last["done"] / last["total"], 4), "capped_after_s": round(last["wall_s"], 1)}


def auroc(scores: list[float], truth: list[bool]) -> float | None:
    """Area under the ROC curve of |score| for the true edges (Mann-Whitney, ties halved)."""
    pos = [abs(s) for s, t in zip(scores, truth) if t]
    neg = [abs(s) for s, t in zip(scores, truth) if not t]
    if not pos or not neg:
        return None
    x = torch.tensor(pos, dtype=torch.float64)[:, None]
    y = torch.tensor(neg, dtype=torch.float64)[None, :]
    return round(float(((x > y).double() + 0.5 * (x == y).double()).mean()), 4)


def spearman(a: list[float], b: list[float]) -> float:
    def ranks(v: list[float]) -> torch.Tensor:
        return torch.tensor(v, dtype=torch.float64).argsort().argsort().double()

    ra, rb = ranks(a), ranks(b)
    return round(float(torch.corrcoef(torch.stack([ra, rb]))[0, 1]), 4)


def score_agreement(zoo: dict[str, float], peer: dict[str, float], factor: float,
                    truth: dict[str, bool]) -> dict[str, Any]:
    """Agreement of two score maps on the edges both scored (peer rescaled to the zoo's m)."""
    common = [e for e in zoo if e in peer]
    z = [zoo[e] for e in common]
    p = [peer[e] / factor for e in common]
    t = [truth[e] for e in common]
    scale = max(abs(v) for v in z) or 1.0
    return {"edges_compared": len(common), "max_abs_diff_rel": round(max(abs(a - b) for a, b in zip(z, p)) / scale, 6),
            "spearman": spearman(z, p), "auroc_zoo": auroc(z, t), "auroc_peer": auroc(p, t)}


def agreement(zoo: dict[str, Any], peer: dict[str, Any], factor: float, order: list[str],
              taus: list[float], gt_share: float) -> dict[str, Any]:
    """Result agreement of the last zoo and peer runs, against ground truth from zoo's exact effects."""
    exact = zoo["edge_patching"]["scores"]
    k = max(1, round(gt_share * len(exact)))
    top = set(sorted(exact, key=lambda e: -abs(exact[e]))[:k])
    truth = {e: e in top for e in exact}
    return {"ground_truth_edges": k,
            "edge_patching": score_agreement(exact, peer["edge_patching"]["scores"], factor, truth),
            "eap": score_agreement(zoo["eap"]["scores"], peer["eap"]["scores"], factor, truth),
            # auto-circuit sums its IG gradients over Z + 1 mask values; the zoo averages over Z.
            "eap_ig_inputs": score_agreement(zoo["eap_ig_inputs"]["scores"], peer["eap_ig"]["scores"],
                                             factor * (IG_STEPS + 1), truth),
            "eap_ig_activations": score_agreement(zoo["eap_ig_activations"]["scores"], peer["eap_ig"]["scores"],
                                                  factor * (IG_STEPS + 1), truth),
            "acdc": acdc_agreement(zoo["acdc"], peer["acdc"], order, taus),
            **({"acdc_native_order": acdc_agreement(zoo["acdc"], peer["acdc_native"], order, taus)}
               if "acdc_native" in peer else {})}


def acdc_agreement(zoo: dict[str, Any], peer: dict[str, Any], order: list[str], taus: list[float]) -> list[dict[str, Any]]:
    """Per τ: Jaccard of the kept edges and exact equality, over the edges both sides decided."""
    rows = []
    for run in peer["runs"]:
        t = taus.index(run["tau"])
        decided = order[:min(zoo["done"], run["done"])]
        z_removed, p_removed = set(zoo["removed"][t]), set(run["removed"])
        zk = {e for e in decided if e not in z_removed}
        pk = {e for e in decided if e not in p_removed}
        union = zk | pk
        rows.append({"tau": run["tau"], "edges_compared": len(decided), "kept_zoo": len(zk), "kept_peer": len(pk),
                     "jaccard_kept": round(len(zk & pk) / len(union), 4) if union else 1.0, "equal": zk == pk})
    return rows


def acdc_ref_agreement(zoo: dict[str, Any], ref: dict[str, Any], order: list[str],
                       taus: list[float]) -> list[dict[str, Any]]:
    """Per τ: Jaccard of kept edges and equality over the residual edges both sides decided."""
    rows = []
    for run in ref["runs"]:
        t = taus.index(run["tau"])
        ref_kept, ref_removed = set(run["kept"]), set(run["removed"])
        decided = [e for e in order[:zoo["done"]] if e in ref_kept or e in ref_removed]
        zk = {e for e in decided if e not in set(zoo["removed"][t])}
        rk = {e for e in decided if e in ref_kept}
        union = zk | rk
        rows.append({"tau": run["tau"], "edges_compared": len(decided), "kept_zoo": len(zk), "kept_ref": len(rk),
                     "jaccard_kept": round(len(zk & rk) / len(union), 4) if union else 1.0, "equal": zk == rk})
    return rows


def acdc_ref_report(zoo_runs: list[dict[str, Any]], ref_runs: list[dict[str, Any]], order: list[str],
                    taus: list[float], orders: dict[str, list], n_layers: int) -> dict[str, Any]:
    """Timing (median, extrapolated where capped) and agreement of the ACDC reference against the zoo."""
    zs = [extrapolate(r["acdc"]["wall_s"], r["acdc"]["done"], orders["acdc"], n_layers) for r in zoo_runs]
    rs = [acdc_ref_timing(r, len(taus)) for r in ref_runs]
    z, p = statistics.median(x["s"] for x in zs), statistics.median(x["s"] for x in rs)
    return {"acdc_ref": {"zoo_s": round(z, 3), "peer_s": round(p, 3), "ratio_peer_over_zoo": round(p / z, 2),
                         "zoo_runs": zs, "peer_runs": rs, "versions": ref_runs[-1]["versions"],
                         "agreement": acdc_ref_agreement(zoo_runs[-1]["acdc"], ref_runs[-1], order, taus)}}
