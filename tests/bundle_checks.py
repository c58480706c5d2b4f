"""Checks every multi-task bundle must pass, planted (planted.multi_task) or built around a case
(planted.case_bundles): shared by tests/test_planted/test_multi_task.py and test_case_bundles.py."""

from __future__ import annotations

import torch


def run_task(task, n: int, seed: int):
    """(inputs, tokens, mask, labels, node values, labelled positions) of n inputs of `task`'s sampler."""
    seqs = task.case.sample(n, seed)
    tokens, mask = task.encoding.encode(seqs)
    labels, values = task.model.run(tokens, mask)
    positions = mask.bool().clone()
    positions[:, 0] = False
    return seqs, tokens, mask, labels, values, positions


def check_strict_by_construction(bundle, n: int) -> None:
    """Per-task strictness is in the high-level model: on view T's rows, interchanging any other task's
    node, with sources from every task, leaves T's labels alone, while each of T's own nodes changes them
    on some pair."""
    model = bundle.task().model
    _, _, _, _, src_values, _ = run_task(bundle.task(), n, seed=2)
    for k in range(len(bundle.view_names)):
        view = bundle.task(k)
        _, tokens, mask, clean, _, positions = run_task(view, n, seed=1)
        own = set(view.graph.nodes)
        for i, node in enumerate(model.nodes):
            select = torch.zeros(len(model.nodes), dtype=torch.bool)
            select[i] = True
            out = model.interchange(tokens, mask, src_values, select)
            changed = ((out != clean) & positions).any(1).float().mean().item()
            if node in own:
                assert changed > 0, f"{view.case.id}: its node {node} never matters"
            else:
                assert changed == 0, f"{view.case.id}: {node} of another task moved {changed:.3f} of its outputs"
