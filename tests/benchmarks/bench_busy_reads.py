"""Do busy nodes use the busy heads they read (siit.busy_reads, `zoo train --busy-reads N`)? For each reader
of each entry of a zoo root: siit.busy_reads.read_effect of resampling the heads it reads together, each
alone, and each other busy head alone (the readout of the reader's target moves by about 2 of its variance
where the read heads alone determine it, near 0 where the reader does not use a head). Entries trained
without reads (their nodes compute on tokens) are the baseline: the readout of the target each node was
trained to, under the heads a `--busy-reads N` draw would give it. One JSON line per reader, then a
summary per kind of reader (MLP, head).

    python tests/benchmarks/bench_busy_reads.py --root ROOT [--cases 3,4,...] [--reads 3] [--n 1000]

Reads entries only (train them first: `zoo train --all [--busy-reads 3] --root ROOT`); not part of CI.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path

MAIN_CASES = "3,4,8,11,13,18,19,20,21,26,29,33,34,35,36,37"


def entry_reads(root: Path, ident: str, reads: int, n: int, seed: int) -> list[dict]:
    """One row per reader of case `ident`'s entry (none where the entry is missing)."""
    import torch

    from rasp_programs.compile import compile_case
    from siit.busy_reads import layer_of, read_effect
    from siit.export import config_from_training_json
    from siit.train_setup import prepare
    from siit.transformer import Transformer
    from zoo.high_level_source import resolve_case
    from zoo.realism_report import load_siit_entry

    torch.set_num_threads(1)
    case = resolve_case("case", ident)
    entry_dir = root / "entries" / case.entry_name
    if not (entry_dir / "training.json").is_file():
        return []
    entry = load_siit_entry(entry_dir, case)
    training = json.loads((entry_dir / "training.json").read_text())
    config, arch = config_from_training_json(training)
    compiled = compile_case(case, root / "compiled")
    trained_reads = config.distractor_reads
    targets = prepare(compiled, config, arch).targets  # what the model was trained to compute
    # which heads to resample: those read, or for the baseline those a reads draw would give its nodes
    drawn = targets if trained_reads else prepare(compiled, dataclasses.replace(config, distractor_reads=reads),
                                                  arch).targets
    model = Transformer.from_state_dict(entry.config, entry.state_dict)
    tokens, mask = entry.encoding.encode(case.sample(n, seed))
    z_all = targets.standardised(tokens, mask)
    rows = []
    for i, d in enumerate(drawn.distractors):
        if not d.reads:
            continue
        effect = lambda nodes: round(read_effect(model, tokens, mask, d.node, z_all[i], nodes, seed), 4)  # noqa: E731
        read = [r.node for r in d.reads]
        before = (lambda n: layer_of(n) <= layer_of(d.node)) if d.node.startswith("m") else (  # noqa: E731
            lambda n: layer_of(n) < layer_of(d.node))  # the heads that write before the reader reads
        others = [x.node for x in targets.distractors if x.node.startswith("a") and x.node not in read and before(x.node)]
        rows.append({"entry": case.entry_name, "reader": d.node, "trained_with_reads": trained_reads, "reads": read,
                     "together": effect(read), "each_read": {x: effect([x]) for x in read},
                     "each_other": {x: effect([x]) for x in others}})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, required=True, help="zoo root holding the trained entries")
    ap.add_argument("--cases", default=MAIN_CASES, help="case ids (default: the 16 main cases)")
    ap.add_argument("--reads", type=int, default=3, help="the baseline's reads draw for entries trained without")
    ap.add_argument("--n", type=int, default=1000, help="sampler inputs per entry")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rows = []
    for ident in [c for c in args.cases.split(",") if c]:
        for row in entry_reads(args.root, ident, args.reads, args.n, args.seed):
            rows.append(row)
            print(json.dumps(row), flush=True)
    median = lambda v: round(statistics.median(v), 4) if v else None  # noqa: E731
    summary = {}
    for kind in ("m", "a"):
        mine = [r for r in rows if r["reader"].startswith(kind)]
        summary["mlps" if kind == "m" else "heads"] = {
            "readers": len(mine), "together_median": median([r["together"] for r in mine]),
            "each_read_median": median([v for r in mine for v in r["each_read"].values()]),
            "each_other_median": median([v for r in mine for v in r["each_other"].values()])}
    print(json.dumps({"summary": summary}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
