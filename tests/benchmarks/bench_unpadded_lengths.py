"""Exactness on unpadded inputs of every length, one length at a time: for each trained entry under
ROOT and each input length n, 300 sampler inputs of exactly length n fed unpadded (BOS + n tokens);
accuracy against the high-level labels, and the share of label positions whose output changes when
one out-of-circuit node is resampled (from another input of the same length) or mean-ablated (mean
over those inputs). validation.json pools every length, which can hide a length where a node leaks
(the issue's target: <= 0.01 at every length). Prints one line per case, and every node and
length over 0.01.

    python tests/benchmarks/bench_unpadded_lengths.py ROOT [3,4,8,...]
"""
import json
import sys

import torch
from pathlib import Path
from safetensors.torch import load_file
torch.set_num_threads(1)
from rasp_programs.case import get_case
from rasp_programs.compile import compile_case
from siit.high_level import as_task
from siit.transformer import Transformer, Patch
from siit.losses import predictions, agree
root = Path(sys.argv[1])
MAIN = "3,4,8,11,13,18,19,20,21,26,29,33,34,35,36,37"
out = {}
for c in (sys.argv[2] if len(sys.argv) > 2 else MAIN).split(","):
    d = root / "entries" / f"case-{c}"
    cfg = json.load(open(d / "config.json")); circ = set(json.load(open(d / "circuit.json"))["nodes"])
    m = Transformer.from_state_dict(cfg, load_file(d / "model.safetensors")).eval()
    cc = compile_case(get_case(c), root / "compiled"); task = as_task(cc); high = task.high_level()
    seqs = cc.case.sample(4000, 7)
    tok, mask = cc.encoding.encode(seqs)
    with torch.no_grad():
        labels = high.run(tok, mask)[0]
    lengths = mask.sum(1) - 1
    H, L = m.n_heads, m.n_layers
    slots = [(l, s) for l in range(L) for s in range(H + 1)]
    names = [f"a{l}.h{s}" if s < H else f"m{l}" for l, s in slots]
    outside = [i for i, n in enumerate(names) if n not in circ]
    worst = {"acc_min": 1.0, "resample": 0.0, "mean": 0.0, "lengths": []}
    for n in sorted(set(lengths.tolist())):
        rows = (lengths == n).nonzero().flatten()[:300]
        if len(rows) < 2: continue
        t, mk, lab = tok[rows, : n + 1], mask[rows, : n + 1], labels[rows, : n + 1]  # unpadded: BOS + n tokens
        lm = mk.bool().clone(); lm[:, 0] = False
        with torch.no_grad():
            logits, acts = m(t, mk, return_acts=True)
        pred = predictions(logits, cc.case.task_kind)
        acc = agree(pred, lab, cc.case.task_kind, 0.05)[lm].float().mean().item()
        worst["acc_min"] = min(worst["acc_min"], acc); worst["lengths"].append(n)
        src = torch.roll(torch.arange(len(rows)), 1)
        for kind in ("resample", "mean"):
            vals = acts[:, src] if kind == "resample" else acts.mean(1, keepdim=True)
            for i in outside:
                l, s = slots[i]
                mask_ = torch.zeros(len(rows), L, H + 1, dtype=torch.bool); mask_[:, l, s] = True
                with torch.no_grad():
                    lg, _ = m(t, mk, Patch(mask=mask_, values=vals))
                changed = (~agree(predictions(lg, cc.case.task_kind), pred, cc.case.task_kind, 0.05))[lm].float().mean().item()
                worst[kind] = max(worst[kind], changed)
                if changed > 0.01: print("   ", c, "len", n, kind, names[i], round(changed, 4))
    out[c] = worst
    print(c, cfg["attention_dir"], "lengths", f"{min(worst['lengths'])}-{max(worst['lengths'])}", "acc_min %.4f" % worst["acc_min"], "max out resample %.4f" % worst["resample"], "mean %.4f" % worst["mean"], flush=True)
