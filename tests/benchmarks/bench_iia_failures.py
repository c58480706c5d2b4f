"""Where an entry misses its criterion, by input: the wrong labelled positions of the clean run and of
every IIA and SIIA intervention of its final validation, counted by base input length (with the
input shape and the source's length), next to how much of each length's input space the training
set covered. Prints one JSON object.

    python tests/benchmarks/bench_iia_failures.py CASE [--root DIR]

CASE is a case id with a trained entry in the zoo root (e.g. gen-1-0.L2-3). The validation pairs
are the entry's own (rebuilt from its training config, as `zoo validate` does). Generated cases
that miss by a few positions miss them on the longest inputs, the length whose input space the 2048
training draws cover least (docs/results.md). Not part of CI (it reads a trained entry).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case")
    parser.add_argument("--root", default=None, help="zoo root (default $ZOO_HOME or ~/.cache/zoo)")
    args = parser.parse_args()

    import torch

    from siit.data import SHAPES
    from zoo.validate_entry import trained_entry

    torch.set_num_threads(1)
    case, entry, setup, model = trained_entry(args.case, args.root)
    ev = setup.final_evaluator
    d, lm = ev.data, ev.data.label_mask
    names, masks = ev.groups()
    agreed = ev.agreement(model, names, masks)  # as validation pairs them (strict sources for SIIA)
    seen = set(setup.train_set.seqs)
    groups = {}
    for name, ok in zip(names, agreed):
        wrong = ~ok & lm
        rows = wrong.nonzero()[:, 0].tolist()
        src = ev.strict_sources if name.startswith("siia:") else ev.sources
        groups[name] = {
            "wrong": int(wrong.sum()), "labelled": int(lm.sum()),
            "wrong_with_base_in_training": sum(d.seqs[r] in seen for r in rows),
            "wrong_with_source_in_training": sum(d.seqs[int(src[r])] in seen for r in rows),
            "by_base_length": dict(sorted(Counter(int(d.lengths[r]) for r in rows).items())),
            "by_shape_base_source_length": dict(Counter(
                f"{SHAPES[int(d.shape_ids[r])]} {int(d.lengths[r])} {int(d.lengths[src[r]])}" for r in rows
            ).most_common(12)),
        }
    # how much of each length's input space the training set holds (distinct sequences / possible)
    train = Counter(len(s) for s in seen)
    coverage = {n: {"distinct_in_training": train.get(n, 0), "possible": len(case.vocab) ** n,
                    "share": round(train.get(n, 0) / len(case.vocab) ** n, 4)}
                for n in range(case.min_seq_len, case.max_seq_len + 1)}
    print(json.dumps({"case": case.id, "met_criterion": entry.training.get("met_criterion"),
                      "validation_base_lengths": dict(sorted(Counter(d.lengths.tolist()).items())),
                      "training_coverage": coverage,
                      "groups": {k: v for k, v in groups.items() if v["wrong"]}}, indent=1))


if __name__ == "__main__":
    main()
