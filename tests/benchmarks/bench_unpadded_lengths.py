"""Exactness on unpadded inputs of every length, one length at a time: for each trained entry under
ROOT and each input length n, 300 sampler inputs of exactly length n fed unpadded (BOS + n tokens);
accuracy against the high-level labels, and the share of label positions whose output changes when
one out-of-circuit node is resampled (from another input of the same length) or mean-ablated (mean
over those inputs). validation.json pools every length, which can hide a length where a node leaks
(the issue's target: <= 0.01 at every length). Prints one line per case, and every node and
length over 0.01. `exactness` is the same check for one entry (bench_zoo_count.py --exact uses it).

    python tests/benchmarks/bench_unpadded_lengths.py ROOT [3,4,8,...]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

MAIN = "3,4,8,11,13,18,19,20,21,26,29,33,34,35,36,37"
LEAK = 0.01
"""Share of changed positions above which a node and length are printed."""


def exactness(root: Path, case_id: str, report: Callable[[str], None] = lambda line: None) -> dict:
    """{"acc_min", "resample", "mean", "lengths", "attention_dir"} of the entry of `case_id` under
    `root` (its compiled cache: root/compiled): the lowest accuracy over the unpadded lengths and
    the largest share of positions one out-of-circuit node changes at one length."""
    import torch
    from safetensors.torch import load_file

    from rasp_programs.lookup import get_case
    from rasp_programs.compile import compile_case
    from siit.high_level import as_task
    from siit.losses import agree, predictions
    from siit.transformer import Patch, Transformer

    d = root / "entries" / f"case-{case_id}"
    cfg = json.loads((d / "config.json").read_text())
    circ = set(json.loads((d / "circuit.json").read_text())["nodes"])
    m = Transformer.from_state_dict(cfg, load_file(d / "model.safetensors")).eval()
    cc = compile_case(get_case(case_id), root / "compiled")
    high = as_task(cc).high_level()
    seqs = cc.case.sample(4000, 7)
    tok, mask = cc.encoding.encode(seqs)
    with torch.no_grad():
        labels = high.run(tok, mask)[0]
    lengths = mask.sum(1) - 1
    H, L = m.n_heads, m.n_layers
    slots = [(layer, s) for layer in range(L) for s in range(H + 1)]
    names = [f"a{layer}.h{s}" if s < H else f"m{layer}" for layer, s in slots]
    outside = [i for i, n in enumerate(names) if n not in circ]
    kind = cc.case.task_kind
    worst = {"acc_min": 1.0, "resample": 0.0, "mean": 0.0, "lengths": [], "attention_dir": cfg["attention_dir"]}
    for n in sorted(set(lengths.tolist())):
        rows = (lengths == n).nonzero().flatten()[:300]
        if len(rows) < 2:
            continue
        t, mk, lab = tok[rows, : n + 1], mask[rows, : n + 1], labels[rows, : n + 1]  # unpadded: BOS + n tokens
        lm = mk.bool().clone()
        lm[:, 0] = False
        with torch.no_grad():
            logits, acts = m(t, mk, return_acts=True)
        pred = predictions(logits, kind)
        acc = agree(pred, lab, kind, 0.05)[lm].float().mean().item()
        worst["acc_min"] = min(worst["acc_min"], acc)
        worst["lengths"].append(n)
        src = torch.roll(torch.arange(len(rows)), 1)
        for ablation in ("resample", "mean"):
            vals = acts[:, src] if ablation == "resample" else acts.mean(1, keepdim=True)
            for i in outside:
                layer, s = slots[i]
                patch_mask = torch.zeros(len(rows), L, H + 1, dtype=torch.bool)
                patch_mask[:, layer, s] = True
                with torch.no_grad():
                    lg, _ = m(t, mk, Patch(mask=patch_mask, values=vals))
                changed = (~agree(predictions(lg, kind), pred, kind, 0.05))[lm].float().mean().item()
                worst[ablation] = max(worst[ablation], changed)
                if changed > LEAK:
                    report(f"    {case_id} len {n} {ablation} {names[i]} {round(changed, 4)}")
    return worst


def main(argv: list[str]) -> int:
    import torch

    torch.set_num_threads(1)
    root = Path(argv[0])
    for c in (argv[1] if len(argv) > 1 else MAIN).split(","):
        w = exactness(root, c, report=print)
        print(c, w["attention_dir"], "lengths", f"{min(w['lengths'])}-{max(w['lengths'])}",
              "acc_min %.4f" % w["acc_min"], "max out resample %.4f" % w["resample"], "mean %.4f" % w["mean"],
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
