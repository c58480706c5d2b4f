"""Base/source pairing must exercise every labelled node: a node whose interchange never changes
the high-level output cannot be trained or checked by IIT (e.g. case 26's Map(indices) takes the
same value at the same position of any two sequences)."""

from __future__ import annotations

import pytest
import torch

from rasp_programs.case import builtin_case_ids
from siit.config import TrainConfig
from siit.data import pair_sources, step_generator
from siit.interventions import interchange
from siit.losses import targets_from_logits
from siit.trainer import prepare


def _nodes_never_changing_output(s, task: str, pairing: str) -> list[str]:
    d = s.train_set
    sources = pair_sources(d.lengths, torch.arange(len(d)), pairing, step_generator(0, -3))
    inert = []
    with torch.no_grad():
        clean = targets_from_logits(s.high(d.tokens, d.mask)[0], task)
        for name, node_mask in zip(s.corr.high_nodes, s.high_masks):
            out = targets_from_logits(interchange(s.high, d.tokens, d.mask, d.high_acts[:, sources], node_mask), task)
            changed = (out != clean) if task == "classification" else (out - clean).abs() > 1e-6
            if not changed[d.label_mask].any():
                inert.append(name)
    return inert


@pytest.mark.parametrize("case_id", builtin_case_ids())
def test_resolved_pairing_exercises_every_high_level_node(case_id, compiled):
    cc = compiled(case_id)
    s = prepare(cc, TrainConfig(n_train=1024, n_val=64))
    assert s.pairing in ("source_not_shorter", "independent")
    assert _nodes_never_changing_output(s, cc.case.task_kind, s.pairing) == []


def test_auto_pairing_switches_only_where_needed(compiled):
    position_only = prepare(compiled("26"), TrainConfig(n_train=1024, n_val=64))
    assert position_only.pairing == "independent"
    assert _nodes_never_changing_output(position_only, "classification", "source_not_shorter") == ["m0"]
    assert prepare(compiled("33"), TrainConfig(n_train=1024, n_val=64)).pairing == "source_not_shorter"
    explicit = prepare(compiled("26"), TrainConfig(n_train=1024, n_val=64, pairing="source_not_shorter"))
    assert explicit.pairing == "source_not_shorter", "an explicit choice is kept"
