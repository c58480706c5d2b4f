"""Where a multi-task bundle's views miss the criterion: for each view of a training checkpoint, the
wrong labelled positions of every IIA and SIIA group of its check (the view's own validation pairs,
paired as the check pairs them: siit.metrics.Evaluator.agreement), counted by position and input
length. Prints one JSON object.

    python tests/benchmarks/bench_view_failures.py CHECKPOINT --bundle mt-4x4 [--patch a0.h0,a0.h1 ...]

CHECKPOINT is `<root>/entries/.planted-<view>.checkpoint` of a run that has not met its criterion
(bench_multi_task.from_checkpoint). mt-4x4's views missed only under SIIA "all" (every node outside
the view's circuit patched at once), at answers another task's components also carry
(docs/results.md, "mt-4x4"). `--patch` adds groups of its own: each names nodes patched together on
every view's rows whose circuit holds none of them (as SIIA patches: sources of the view's own rows),
to test which other task's components carry a view's answer. Not part of CI.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path


def run(checkpoint: Path, bundle_name: str, patch: list[str] | None = None) -> dict:
    import torch

    from planted.registry import get_bundle

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_multi_task import from_checkpoint

    torch.set_num_threads(1)
    step, model, s = from_checkpoint(checkpoint, get_bundle(bundle_name))
    views = {}
    for view in s.views:
        ev = view.evaluator
        d, lm = ev.data, ev.data.label_mask
        names, masks = ev.groups()
        low, own = ev.correspondence.low, set(view.corr.aligned)
        for group in patch or []:
            nodes = group.split(",")
            if not own & set(nodes):
                names, masks = names + [f"siia:{group}"], torch.cat([masks, low.mask(nodes)[None]])
        agreed = ev.agreement(model, names, masks)  # the check's own pairings (strict sources for SIIA)
        groups = {}
        for name, ok in zip(names, agreed):
            at = (~ok & lm).nonzero().tolist()
            if at:
                groups[name] = {"wrong": len(at), "labelled": int(lm.sum()),
                                "by_position_and_length": dict(Counter(
                                    f"position {p}, length {int(d.lengths[r])}" for r, p in at).most_common(8))}
        views[view.name] = groups
    return {"checkpoint": str(checkpoint), "step": step, "views": views}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--bundle", default="mt-4x4")
    parser.add_argument("--patch", nargs="*", default=[], help="node sets patched together, e.g. a0.h0,a0.h1")
    args = parser.parse_args()
    print(json.dumps(run(args.checkpoint, args.bundle, args.patch), indent=1))


if __name__ == "__main__":
    main()
