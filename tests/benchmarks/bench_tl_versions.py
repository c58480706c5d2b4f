"""The same trained entries under TransformerLens 3.x and 4.x: logits, AUROCs, cost; JSON on stdout.

Run once in each environment with the same --dir, then compare:

    .venv/bin/python     tests/benchmarks/bench_tl_versions.py run --root /tmp/tl_root --dir /tmp/tlbench
    .venv-tl4/bin/python tests/benchmarks/bench_tl_versions.py run --root /tmp/tl_root --dir /tmp/tlbench
    .venv/bin/python     tests/benchmarks/bench_tl_versions.py compare --dir /tmp/tlbench

`run` records, per entry (cases 3, 11, 33 by default): logits of the entry's model on 512 padded
inputs (and their max difference from siit's pure-torch model, which both majors share); the
node and edge AUROC of every built-in method from `zoo eval`'s default settings, with its wall
time; `--repeats` timings of a lighter evaluation (n=200, 2 stability runs, 100 permutations) and
of a short `zoo train` run (a subprocess each; training never imports TransformerLens).
`--logits-only 4 8 ...` adds entries whose logits only are recorded. `compare` prints logit
differences across majors (absolute and relative to the largest logit), the AUROC table and the
4.x / 3.x cost ratios of medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

METHODS = ["random", "activation_patching", "gradient_attribution", "ablation_scan", "greedy"]


def run(args: argparse.Namespace) -> dict:
    import importlib.metadata

    import torch
    from safetensors.torch import save_file

    torch.set_num_threads(1)
    start = time.perf_counter()
    import transformer_lens  # noqa: F401  (timed: every command that builds a model pays it)

    import_s = time.perf_counter() - start
    from eval.core.tlens import tl_major
    from siit.transformer import Transformer
    from zoo.entry import load_entry_dir
    from zoo.paths import entries_dir
    from zoo.targets import evaluate, resolve_target

    major = tl_major()
    out_dir = Path(args.dir) / f"tl{major}"
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict = {"transformer_lens": importlib.metadata.version("transformer-lens"), "torch": torch.__version__,
                    "torch_threads": 1, "import_transformer_lens_s": round(import_s, 2), "entries": {}}
    for case in [*args.cases, *[c for c in args.logits_only if c not in args.cases]]:
        entry = load_entry_dir(entries_dir(Path(args.root)) / f"case-{case}")
        row: dict = {"met_criterion": (entry.training or {}).get("met_criterion")}
        start = time.perf_counter()
        model = entry.model
        row["build_model_s"] = round(time.perf_counter() - start, 3)
        row["model_type"] = type(model).__name__
        tokens, mask = entry.encoding.encode(entry.case.sample(512, seed=0))
        with torch.no_grad():
            logits = model(tokens, attention_mask=mask)
            ours, _ = Transformer.from_state_dict(entry.config, entry.state_dict)(tokens, mask)
        row["logits_max_diff_vs_siit"] = float((logits - ours).abs().max())
        row["logits_max_abs"] = float(logits.abs().max())
        save_file({"logits": logits.contiguous()}, str(out_dir / f"logits-case-{case}.safetensors"))
        if case not in args.cases:  # --logits-only
            result["entries"][case] = row
            continue
        target = resolve_target(entry, "trained", args.root)
        start = time.perf_counter()
        report = evaluate(target, METHODS)  # zoo eval's defaults
        row["eval_default_s"] = round(time.perf_counter() - start, 2)
        row["auroc"] = {m.key: {"node": m.node.auroc, "edge": m.edge.auroc} for m in report.methods}
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            evaluate(target, METHODS, n=200, stability_seeds=2, permutations=100)
            times.append(time.perf_counter() - start)
        row["eval_light_s"] = [round(t, 2) for t in times]
        result["entries"][case] = row
    train_times = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.repeats):
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "zoo.cli", "train", "case", args.train_case, "--epochs",
                                   str(args.train_epochs), "--root", args.root, "--out", f"{tmp}/e{k}", "--json"],
                                  capture_output=True, text=True)
            train_times.append(time.perf_counter() - start)
            if done.returncode not in (0, 1):
                raise SystemExit(f"zoo train failed: {done.stderr.strip().splitlines()[-1:]}")
    result["train"] = {"case": args.train_case, "epochs": args.train_epochs, "wall_s": [round(t, 2) for t in train_times]}
    (out_dir / "result.json").write_text(json.dumps(result, indent=1))
    return result


def compare(args: argparse.Namespace) -> dict:
    from safetensors.torch import load_file

    base = Path(args.dir)
    r3, r4 = (json.loads((base / f"tl{m}" / "result.json").read_text()) for m in (3, 4))
    med = statistics.median
    out: dict = {"versions": [r3["transformer_lens"], r4["transformer_lens"]], "entries": {}}
    for case in r3["entries"]:
        e3, e4 = r3["entries"][case], r4["entries"][case]
        l3, l4 = (load_file(str(base / f"tl{m}" / f"logits-case-{case}.safetensors"))["logits"] for m in (3, 4))
        diff = float((l3 - l4).abs().max())
        row = out["entries"][case] = {
            "met_criterion": e3["met_criterion"],
            "logits_max_diff_tl3_vs_tl4": diff,
            "logits_max_abs": float(l3.abs().max()),
            "logits_max_diff_relative": diff / max(float(l3.abs().max()), 1e-30),
            "logits_max_diff_vs_siit": {"tl3": e3["logits_max_diff_vs_siit"], "tl4": e4["logits_max_diff_vs_siit"]},
        }
        if "auroc" not in e3:  # --logits-only
            continue
        row.update({
            "auroc_identical": e3["auroc"] == e4["auroc"],
            "auroc": {k: {"tl3": e3["auroc"][k], "tl4": e4["auroc"][k]} for k in e3["auroc"]},
            "eval_default_s": {"tl3": e3["eval_default_s"], "tl4": e4["eval_default_s"]},
            "eval_light_median_s": {"tl3": med(e3["eval_light_s"]), "tl4": med(e4["eval_light_s"])},
            "eval_light_ratio_tl4_over_tl3": round(med(e4["eval_light_s"]) / med(e3["eval_light_s"]), 3),
        })
    out["train_median_s"] = {"tl3": med(r3["train"]["wall_s"]), "tl4": med(r4["train"]["wall_s"])}
    out["train_ratio_tl4_over_tl3"] = round(med(r4["train"]["wall_s"]) / med(r3["train"]["wall_s"]), 3)
    out["import_transformer_lens_s"] = {"tl3": r3["import_transformer_lens_s"], "tl4": r4["import_transformer_lens_s"]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["run", "compare"])
    parser.add_argument("--dir", required=True, help="where each major's results go (tl3/, tl4/)")
    parser.add_argument("--root", default=None, help="zoo root holding the trained entries")
    parser.add_argument("--cases", nargs="+", default=["3", "11", "33"])
    parser.add_argument("--logits-only", nargs="*", default=[],
                        help="further cases whose logits only are compared (no evaluation)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--train-case", default="33")
    parser.add_argument("--train-epochs", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(run(args) if args.mode == "run" else compare(args), indent=1))


if __name__ == "__main__":
    main()
