"""Where an entry's interchange accuracy fails, by position: each high-level node interchanged at every
position (what IIA measures), at every position but BOS, and at BOS alone, in every input shape.
Prints one JSON row per node.

    python tests/benchmarks/bench_position_interchange.py CASE [--root DIR]

CASE is a case id with a trained entry in the zoo root (e.g. gen-0-4). Each target is the
high-level model's output under the same partial interchange. A node whose value at BOS is the same
in every input (a Map or SequenceMap of tokens and indices: BOS is the same token at the same
index everywhere) leaves the high-level output unchanged when interchanged at BOS alone; where the
low-level output changes then, the low-level node carries at BOS something of its context that the
rest of the circuit reads, and its whole-node interchange works only where base and source contexts
agree (generated cases' `m0` on unpadded inputs of different lengths, docs/results.md).
Not part of CI (it reads a trained entry).
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case")
    parser.add_argument("--root", default=None, help="zoo root (default $ZOO_HOME or ~/.cache/zoo)")
    args = parser.parse_args()

    import torch

    from siit.data import SHAPES
    from siit.interventions import node_activations
    from siit.losses import agree, predictions
    from siit.transformer import Patch
    from zoo.validate_entry import trained_entry

    torch.set_num_threads(1)
    case, _, setup, model = trained_entry(args.case, args.root)
    ev = setup.final_evaluator
    d = ev.data
    with torch.no_grad():
        acts = node_activations(model, d.tokens, d.mask, d.present)  # [L, N, T, S, d_model]
    source = acts[:, ev.sources]
    T = d.tokens.shape[1]
    where = {"all": torch.ones(T, dtype=torch.bool), "all_but_bos": torch.arange(T) > 0,
             "bos_only": torch.arange(T) == 0}
    for i, node in enumerate(ev.correspondence.high_nodes):
        low = ev.correspondence.low_masks()[i]  # bool [L, S]: the node's low-level image
        row: dict = {"node": node}
        for label, positions in where.items():
            at = positions[None, None, :, None, None]
            with torch.no_grad():  # both models under the same partial interchange
                logits = model(d.tokens, d.mask, Patch(mask=low.expand(len(d), *low.shape).clone(),
                                                       values=torch.where(at, source, acts)), present=d.present)[0]
                high_values = torch.where(at, d.high_acts[:, ev.sources], d.high_acts)
                target = setup.high.interchange(d.tokens, d.mask, high_values, setup.high_masks[i])
            ok = agree(predictions(logits, ev.task_kind), target, ev.task_kind, ev.tolerance)
            row[label] = {}
            for k, shape in enumerate(SHAPES):
                rows = d.shape_ids == k
                if bool(rows.any()):
                    row[label][shape] = round(float(ok[rows][d.label_mask[rows]].float().mean()), 4)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
