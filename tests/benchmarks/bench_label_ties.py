"""How many interchange labels of a compiled (Tracr) high-level model are ties: per case and high-level
node, the share of labelled positions where, with that node taken from a source paired as training
pairs them (the case's resolved TrainConfig.pairing), the compiled model's top two logits are equal to
float rounding (siit.high_level.TracrHighLevel.interchange_ties, the rule of validation.json's
`iit_label_ties`, on the training pairs rather than the validation's). One JSON object.

A tie's argmax is whatever float rounding leaves first: such an IIT label is not the program's output
but an artefact of the compiled weights on a state the program never makes (a node's value read off a
source position that does not exist), and summing the same terms in another order moves some of them.
`at_missing_source` counts the ties at positions the source does not have (source shorter than it).

Usage: python tests/benchmarks/bench_label_ties.py [--cases 3,4,...] [--n 1024] [--seed 0]
(default: the 16 main cases; regression cases are reported as such).
"""

from __future__ import annotations

import argparse
import json
import tempfile

MAIN = "3,4,8,11,13,18,19,20,21,26,29,33,34,35,36,37"


def case_ties(case_id: str, n: int, seed: int, root: str) -> dict:
    import torch

    from siit.config import TrainConfig
    from siit.data import pair_sources, step_generator
    from siit.trainer import prepare
    from zoo.high_level_source import resolve_case
    from zoo.train_entry import compiled_task

    case = resolve_case("case", case_id)
    if case.task_kind != "classification":
        return {"task_kind": case.task_kind}
    s = prepare(compiled_task(root, case), TrainConfig(n_train=n, seed=seed))
    d, high = s.train_set, s.high
    sources = pair_sources(d.lengths, torch.arange(len(d.lengths)), s.pairing, step_generator(seed, -4))
    position = torch.arange(d.tokens.shape[1])[None]
    missing = position >= d.mask[sources].sum(1, keepdim=True)  # [N, T] positions the source lacks
    nodes = {}
    for i, name in enumerate(s.corr.interventions):  # the rule validation.json's iit_label_ties reports
        tie = high.interchange_ties(d.tokens, d.mask, d.high_acts[:, sources], s.high_masks[i]) & d.label_mask
        nodes[name] = {"labels": int(d.label_mask.sum()), "ties": int(tie.sum()),
                       "share": round(float(tie.sum()) / max(int(d.label_mask.sum()), 1), 4),
                       "at_missing_source": int((tie & missing).sum())}
    return {"pairing": s.pairing, "nodes": nodes}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=MAIN)
    parser.add_argument("--n", type=int, default=1024, help="training sequences drawn per case (default 1024)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as root:  # compiled cases come from the user compile cache
        result = {c: case_ties(c, args.n, args.seed, root) for c in args.cases.split(",")}
    with_ties = {c: r for c, r in result.items() if any(v["ties"] for v in r.get("nodes", {}).values())}
    print(json.dumps({"n": args.n, "seed": args.seed, "cases": result, "cases_with_ties": sorted(with_ties)}, indent=1))


if __name__ == "__main__":
    main()
