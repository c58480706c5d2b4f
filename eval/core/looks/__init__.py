"""A model's activations, gradients and weights + its circuit -> how well looks that never intervene
find the circuit (issue 32, item 3: the battery of no-intervention looks).

A benchmark model is realistic only if nothing simple reads its circuit off: a researcher who looks at
a model before patching it ranks nodes by how loud they are, how many directions they use, who reads
them, how their weights compose, how the output's gradient flows, what a probe decodes from them.
Each look here is one such ranking; its node AUROC against the circuit is reported as the
*separation* max(AUROC, 1 - AUROC) (ranking the circuit last gives it away as well as first), beside
the separation that random labels of the same graph reach (a permutation band: on a graph of ten nodes
a separation of 0.8 is not evidence).

- `inputs`: `LookInputs`, what every look reads (one clean run, one backward, the weights);
- `activations`: looks at node outputs and attention patterns;
- `weights`: looks at weights only (norms, gauge-invariant products, composition with readers);
- `readouts`: looks that read the output (gradients, probes, direct logit attribution) and the
  architecture's own priors (layer, kind);
- `battery`: the registry of looks (`LOOKS`) and `battery`, which runs them and scores each with its
  chance band.

Pure torch; part of eval.core, so siit's validation and zoo's realism report run it alike.
"""

from eval.core.looks.battery import LOOKS, Look, battery
from eval.core.looks.inputs import LookInputs

__all__ = ["LOOKS", "Look", "LookInputs", "battery"]
