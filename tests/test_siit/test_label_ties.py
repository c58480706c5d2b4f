"""Validation reports the IIT labels that are ties of the compiled high-level model (siit.validation's
`iit_label_ties`), and the card says so: case 26 reads its m0 and a1.h0 off source positions that do
not exist on about a quarter of its labelled positions; case 33's labels are all its program's."""

from __future__ import annotations

from siit.config import TrainConfig
from siit.trainer import prepare
from siit.validation import _label_ties
from zoo.card import _tie_lines


def test_case_26_has_tied_iit_labels_and_case_33_none(compiled) -> None:
    ties = {}
    for case_id in ("26", "33"):
        s = prepare(compiled(case_id), TrainConfig(n_train=128, n_val=128))
        ties[case_id] = _label_ties(s.final_evaluator, s.high)
    case26 = ties["26"]["per_node"]
    assert ties["26"]["any"] and set(case26) == {"m0", "a1.h0"}
    for v in case26.values():  # about a quarter (28% on 1024 training sequences)
        assert 0.1 < v["ties"] / v["labels"] < 0.5
    assert not ties["33"]["any"] and all(v["ties"] == 0 for v in ties["33"]["per_node"].values())


def test_card_warns_only_where_labels_tie() -> None:
    assert _tie_lines(None) == [] and _tie_lines({"any": False, "per_node": {"m0": {"ties": 0, "labels": 9}}}) == []
    text = "\n".join(_tie_lines({"any": True, "per_node": {"m0": {"ties": 3, "labels": 9}, "m1": {"ties": 0, "labels": 9}}}))
    assert "m0: 3 of 9" in text and "m1" not in text and "iit_label_ties" in text
