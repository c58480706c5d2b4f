"""A siit Transformer + inputs -> eval.core.looks.LookInputs: one clean run (node outputs, attention
patterns) and one backward of the model's own answer, for the battery of no-intervention looks.

The gradient at a node's output is the gradient at the residual stream where the node adds into it:
every head of a layer writes into the same sum (hook_attn_out), the MLP into hook_mlp_out, so one
backward through `run_with_hooks` gives every node's gradient without patching anything (heads of one
layer share it).
"""

from __future__ import annotations

from collections.abc import Collection

import torch

from eval.core.circuit import TaskKind
from eval.core.looks import LookInputs
from siit.transformer import Transformer


def look_inputs(model: Transformer, tokens: torch.Tensor, mask: torch.Tensor, circuit: Collection[str],
                task_kind: TaskKind, label_positions: torch.Tensor | None = None) -> LookInputs:
    """LookInputs of `model` on padded inputs tokens, mask [batch, pos]; label_positions bool [batch,
    pos] default: every real position but BOS. The model's answer is its argmax (classification) or
    its output (regression); the gradient is of the answer's log-probability, or of the output,
    summed over labelled positions."""
    real = mask.bool()
    if label_positions is None:
        label_positions = real.clone()
        label_positions[:, 0] = False
    with torch.no_grad():
        logits, acts = model(tokens, mask, return_acts=True)
        patterns = model.attention_patterns(tokens, mask, acts)
    labels = logits.argmax(-1) if task_kind == "classification" else logits[..., 0]
    grads = _node_grads(model, tokens, mask, labels, label_positions, task_kind)
    cpu = lambda t: t.detach().cpu()  # noqa: E731  (the looks are cheap; they run where the weights are read)
    return LookInputs(config=model.config, state_dict={k: cpu(v) for k, v in model.state_dict().items()},
                      acts=cpu(acts), grads=cpu(grads), patterns=cpu(patterns), positions=cpu(real),
                      label_positions=cpu(label_positions), labels=cpu(labels), task_kind=task_kind,
                      circuit=frozenset(circuit))


def _node_grads(model: Transformer, tokens: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor,
                where: torch.Tensor, task_kind: TaskKind) -> torch.Tensor:
    """[n_layers, batch, pos, n_heads + 1, d_model]: gradient of the answer at every node's output."""
    seen: dict[str, torch.Tensor] = {}

    def keep(act: torch.Tensor, hook: str) -> torch.Tensor:
        # a zero added where the node writes: its gradient is the gradient there, and the paths
        # from earlier nodes through this one stay intact (a detached copy would cut them)
        seen[hook] = torch.zeros_like(act, requires_grad=True)
        return act + seen[hook]

    points = [f"blocks.{l}.{p}" for l in range(model.n_layers) for p in ("hook_attn_out", "hook_mlp_out")]
    params = [p.requires_grad for p in model.parameters()]
    try:
        for p in model.parameters():
            p.requires_grad_(False)  # only the activations' gradients are wanted
        with torch.enable_grad():
            logits = model.run_with_hooks(tokens, attention_mask=mask, fwd_hooks=[(n, keep) for n in points])
            if task_kind == "classification":
                answer = torch.log_softmax(logits, -1).gather(-1, labels[..., None])[..., 0]
            else:
                answer = logits[..., 0]
            answer[where].sum().backward()
    finally:
        for p, flag in zip(model.parameters(), params):
            p.requires_grad_(flag)
    H = model.n_heads
    per_layer = [torch.cat([seen[f"blocks.{l}.hook_attn_out"].grad[:, :, None].expand(-1, -1, H, -1),
                            seen[f"blocks.{l}.hook_mlp_out"].grad[:, :, None]], dim=2) for l in range(model.n_layers)]
    return torch.stack(per_layer)
