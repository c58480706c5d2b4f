"""The redundancy family's phenomenon in a trained model (issue 36: "the two redundant heads each move the
output on fewer than 10% of pairs and together on all"): SIIT with joint interchanges trains three copies
of which one alone never changes the answer and any two change it wherever the counterfactual's x_1
differs, and validation.json's logit_shifts reports one copy's logit shift beside the copies' together."""

from __future__ import annotations

import pytest
import torch

from planted import get_planted
from siit.interventions import interchange, node_activations


@pytest.fixture(scope="module")
def trained():
    from siit.config import ArchConfig, TrainConfig
    from siit.trainer import train

    # node-level strictness only (the family trains edge-exact by default): the phenomenon is about nodes;
    # flat busy targets, as the family trains (PlantedTask.distractor_profile)
    task = get_planted("redundancy")
    config = TrainConfig(n_val=256, epochs=160, strict_edges=False, distractor_profile=task.distractor_profile)
    return train(task, config, ArchConfig())


def test_one_copy_moves_under_10_percent_and_two_copies_every_differing_pair(trained):
    assert trained.met_criterion
    task = get_planted("redundancy")
    corr = trained.correspondence
    copies = [corr.mapping[n][0] for n in ("a0.h0", "a0.h1", "a0.h2")]
    seqs, src = task.case.sample(1000, 11), task.case.sample(1000, 12)
    tokens, mask = task.encoding.encode(seqs)
    src_tokens, src_mask = task.encoding.encode(src)
    labelled = mask.bool().clone()
    labelled[:, 0] = False
    model = trained.model.eval()
    with torch.no_grad():
        clean = model(tokens, mask)[0].argmax(-1)
        source = node_activations(model, src_tokens, src_mask)
        differs = (src_tokens[:, 1] != tokens[:, 1])[:, None] & labelled  # the counterfactual's x_1 differs

        def moved(nodes):
            out = interchange(model, tokens, mask, source, corr.low.mask(nodes)).argmax(-1)
            return (out != clean) & labelled

        for c in copies:
            assert float(moved([c])[labelled].float().mean()) < 0.10, c
        # two copies: every pair whose x_1 differs (IIA 1.0 on the validation pairs; on these 1000 fresh
        # inputs one position of ~3500 may still resist) and never one whose x_1 agrees
        for i, a in enumerate(copies):
            for b in copies[i + 1:]:
                both = moved([a, b])
                assert not (both & ~differs).any(), (a, b)
                assert float(both[differs].float().mean()) > 0.995, (a, b)


def test_iia_judges_every_joint_group(trained):
    final = trained.history[-1]["metrics"]["iia_per_node"]
    assert {"a0.h0+a0.h1", "a0.h0+a0.h2", "a0.h1+a0.h2", "a0.h0+a0.h1+a0.h2"} <= set(final)
    assert min(final.values()) == 1.0


def test_one_copy_moves_the_answers_logit_under_a_tenth_of_two_copies(trained):
    """The backup holds for the logits methods read, not only for the answer: the logits are trained to
    a template of the answer (PlantedTask.logit_template), so what leaves the answer leaves the logits."""
    task = get_planted("redundancy")
    assert task.logit_template is not None
    corr = trained.correspondence
    copies = [corr.mapping[n][0] for n in ("a0.h0", "a0.h1", "a0.h2")]
    tokens, mask = task.encoding.encode(task.case.sample(1000, 13))
    src_tokens, src_mask = task.encoding.encode(task.case.sample(1000, 14))
    labelled = mask.bool().clone()
    labelled[:, 0] = False
    model = trained.model.eval()
    with torch.no_grad():
        clean = model(tokens, mask)[0]
        answer = clean.argmax(-1, keepdim=True)
        source = node_activations(model, src_tokens, src_mask)

        def shift(nodes):
            out = interchange(model, tokens, mask, source, corr.low.mask(nodes))
            return float((out - clean).gather(-1, answer)[..., 0][labelled].abs().mean())

        alone = max(shift([c]) for c in copies)
        together = min(shift([a, b]) for i, a in enumerate(copies) for b in copies[i + 1:])
    assert alone < 0.1 * together, (alone, together)
