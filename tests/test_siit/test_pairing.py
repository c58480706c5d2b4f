"""Base/source pairing must exercise every labelled node: a node whose interchange never changes
the high-level output cannot be trained or checked by IIT (e.g. case 26's Map(indices) takes the
same value at the same position of any two sequences)."""

from __future__ import annotations

import pytest
import torch

from case_table import case_params
from siit.config import TrainConfig
from siit.data import inert_high_nodes, pair_sources, step_generator
from siit.trainer import prepare


def _nodes_never_changing_output(s, task: str, pairing: str) -> list[str]:
    d = s.train_set
    sources = pair_sources(d.lengths, torch.arange(len(d)), pairing, step_generator(0, -3))
    return inert_high_nodes(d, s.high, s.high_masks, s.corr.high_nodes, sources, task)


@pytest.mark.parametrize("case_id", case_params())
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
