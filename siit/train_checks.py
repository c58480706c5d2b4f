"""The model being trained + its Setup -> validation metrics during training, and whether they
meet the criterion: cheap checks while the criterion is far, the full proof when it is near.

A periodic check first evaluates the first CHECK_ROWS padded validation pairs (siit.train_setup);
only when accuracy, IIA and SIIA meet the criterion there (within FRACTION_MARGIN when it is
below 1), and every distractor's R² is within R2_MARGIN of its floor, does it evaluate all the padded pairs, and only when those meet it every
input shape. With the default criterion 1.0 the fractions never delay a stop (a fraction below 1
on a subset is below 1 on the whole); R² on a subset is not bounded by R² on the whole, hence the
margin (a wrong gate would only delay the stop to a later check, never pass a model). A run is judged by the full evaluation in every shape, and the entry by siit.validation
afterwards; the cheap numbers only steer the adaptation (siit.adaptation) while the run is far.
"""

from __future__ import annotations

from typing import Any

import torch

from siit.config import TrainConfig
from siit.data import SHAPES
from siit.distractors import r_squared, readout
from siit.metrics import Evaluator, meets_criterion
from siit.train_setup import Setup, Trainee
from siit.train_step import drawn_padded

R2_MARGIN = 0.05
"""How far below its floor a distractor's R² on the subset may be for the full check to run."""
FRACTION_MARGIN = 0.02
"""With a criterion below 1: how far below it accuracy, IIA and SIIA on the subset may be."""


def check(trainee: Trainee, s: Setup, config: TrainConfig) -> tuple[dict[str, Any], bool, str]:
    """(metrics, met, what they were measured on) of a periodic check: the cheapest evaluation
    that settles it (see above)."""
    judged = config.judged_metrics
    # a fraction of 1 on the whole is 1 on the subset; a criterion below 1 has no such bound
    subset_floor = config.criterion if config.criterion >= 1.0 else config.criterion - FRACTION_MARGIN
    full = (config.criterion, config.distractor_r2)
    chain = [("subset", s.check_evaluator, (subset_floor, max(0.0, config.distractor_r2 - R2_MARGIN))),
             ("padded", s.evaluator, full)]
    if s.vary_shapes:  # causal models compute the same in every shape
        chain.append(("every_shape", s.final_evaluator, full))
    for name, evaluator, (floor, r2_floor) in chain:
        if evaluator is None:
            continue
        metrics = evaluate_trainee(trainee, s, evaluator)
        if not meets_criterion(metrics, judged, floor, r2_floor):
            return metrics, False, name
    return metrics, True, name


def evaluate_trainee(trainee: Trainee, s: Setup, evaluator: Evaluator) -> dict[str, Any]:
    """The evaluator's metrics, plus each distractor's R² on the validation inputs."""
    metrics = evaluator.evaluate(trainee.model)
    targets = s.targets
    if targets is not None:
        d = evaluator.data
        with torch.no_grad():
            acts = trainee.model(d.tokens, d.mask, return_acts=True, present=d.present)[1]
            padded = None if d.shape_ids is None else drawn_padded(s, d.shape_ids)
            target = trainee.loudness.targets(targets, d.tokens, d.mask, padded)
            pred = readout(acts, targets.slots, trainee.probes)
            r2 = r_squared(pred, target, d.label_mask)
            for shape, part in metrics.get("by_shape", {}).items():
                rows = d.shape_ids == SHAPES.index(shape)
                r2_shape = r_squared(pred[:, rows], target[:, rows], d.label_mask[rows])
                worst = int(r2_shape.argmin())
                part.update(distractor_r2_min=round(float(r2_shape[worst]), 6),
                            worst_distractor=targets.distractors[worst].node)
        per_node = {x.node: round(float(v), 6) for x, v in zip(targets.distractors, r2)}
        metrics.update(distractor_r2_min=min(per_node.values()), distractor_r2_per_node=per_node)
    return metrics
