"""The high-level graph of a compiled model: which components compute something and what feeds what.

The rule, read off the compiled weights (Tracr writes every RASP value into its own named
residual directions, so reads and writes are exact):

- A node is a head `a{l}.h{h}` or MLP `m{l}` with at least one non-zero weight. It *reads* the
  residual directions whose rows of W_Q, W_K, W_V (head) or W_in (MLP) are non-zero, and *writes*
  the directions whose columns of W_O or W_out are non-zero.
- `input` writes the token and position directions (`tokens:*`, `indices:*`). Two directions
  carry no information about the input and give no edge: `one` (constant 1 everywhere, Tracr's
  bias) and `tokens:BOS` (always at position 0, the attention sink Tracr adds to every head).
- Edge writer -> reader when the reader comes later in the forward pass (a head of layer l
  reads what layers < l wrote; the MLP of layer l also reads the heads of layer l) and reads a
  direction the writer writes. Edge `input` -> node when the node reads an input direction.
- Edge node -> `logits` when the node writes a direction that the unembedding reads.
- Finally, nodes that lie on no path from `input` to `logits` are dropped with their edges.
  A head that reads only `one`/`tokens:BOS` and constants (e.g. the attention of a SelectorWidth
  over an all-true selector) still depends on the input through how many positions it attends to;
  such a head keeps an `input` edge, because its output changes with the input's length.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from eval.core.circuit import INPUT, LOGITS, Circuit, head_node, mlp_node, node_sort_key

_CONSTANT_DIRECTIONS = ("one", "tokens:BOS")
_TOL = 1e-9


def _rows(w: torch.Tensor) -> set[int]:
    """Indices along the first axis (d_model) with any non-zero entry; w is [d_model, ...]."""
    return set(torch.nonzero(w.reshape(w.shape[0], -1).abs().amax(dim=1) > _TOL).flatten().tolist())


def component_reads_writes(
    state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any]
) -> dict[str, tuple[set[int], set[int]]]:
    """{node: (directions read, directions written)} for every component with non-zero weights.

    `state_dict` uses TransformerLens names: W_Q/W_K/W_V [H, d_model, d_head], W_O [H, d_head,
    d_model], W_in [d_model, d_mlp], W_out [d_mlp, d_model].
    """
    out: dict[str, tuple[set[int], set[int]]] = {}
    for layer in range(config["n_layers"]):
        w = lambda name: state_dict[f"blocks.{layer}.{name}"]  # noqa: E731
        for h in range(config["n_heads"]):
            reads = _rows(w("attn.W_Q")[h]) | _rows(w("attn.W_K")[h]) | _rows(w("attn.W_V")[h])
            writes = _rows(w("attn.W_O")[h].T)
            if reads or writes:
                out[head_node(layer, h)] = (reads, writes)
        reads, writes = _rows(w("mlp.W_in")), _rows(w("mlp.W_out").T)
        if reads or writes or w("mlp.b_out").abs().max() > _TOL:
            out[mlp_node(layer)] = (reads, writes)
    return out


def high_level_graph(
    state_dict: Mapping[str, torch.Tensor],
    config: Mapping[str, Any],
    residual_labels: Sequence[str],
    expression_labels: Mapping[str, str],
) -> Circuit:
    """The ground-truth graph of a Tracr-compiled HookedTransformer (rule in the module doc)."""
    labels = list(residual_labels)
    constant = {i for i, lab in enumerate(labels) if lab in _CONSTANT_DIRECTIONS}
    input_dirs = {
        i for i, lab in enumerate(labels)
        if lab.startswith(("tokens:", "indices:")) and i not in constant
    }
    output_dirs = _rows(state_dict["unembed.W_U"])
    components = component_reads_writes(state_dict, config)
    order = sorted(components, key=node_sort_key)

    edges: set[tuple[str, str]] = set()
    for i, dst in enumerate(order):
        reads = components[dst][0]
        if reads & input_dirs:
            edges.add((INPUT, dst))
        for src in order[:i]:
            if _feeds(src, dst) and components[src][1] & reads:
                edges.add((src, dst))
        if components[dst][1] & output_dirs:
            edges.add((dst, LOGITS))
    for node in order:  # heads whose only dependence on the input is the number of positions
        if node.startswith("a") and not any(d == node for _, d in edges) and components[node][0] - constant == set():
            edges.add((INPUT, node))

    keep = _on_input_logits_paths(order, edges)
    edges = {(s, d) for s, d in edges if s in keep | {INPUT} and d in keep | {LOGITS}}
    # in node order: `keep` is a set, whose order changes with PYTHONHASHSEED (circuit.json's bytes would too)
    node_labels = {n: _describe(components[n][1], labels, expression_labels) for n in sorted(keep, key=node_sort_key)}
    return Circuit.build(keep, edges, node_labels)


def _feeds(src: str, dst: str) -> bool:
    """Whether src's output can reach dst's input in one residual hop (src strictly earlier)."""
    return node_sort_key(src) < node_sort_key(dst) and not (
        src.startswith("a") and dst.startswith("a") and node_sort_key(src)[0] == node_sort_key(dst)[0]
    )


def _on_input_logits_paths(nodes: Sequence[str], edges: set[tuple[str, str]]) -> set[str]:
    forward, backward = {INPUT}, {LOGITS}
    for node in nodes:  # nodes are in forward order, edges go forward
        if any((s, node) in edges for s in forward):
            forward.add(node)
    for node in reversed(nodes):
        if any((node, d) in edges for d in backward):
            backward.add(node)
    return (forward & backward) - {INPUT, LOGITS}


def _describe(writes: set[int], labels: list[str], expression_labels: Mapping[str, str]) -> str:
    """The RASP expressions a node writes, e.g. `frac_prevs = Aggregate(...) [numerical]`."""
    sops: list[str] = []
    for i in sorted(writes):
        sop = labels[i].partition(":")[0]
        if sop not in sops:
            sops.append(sop)
    parts = [expression_labels[sop] for sop in sops if sop in expression_labels]
    if parts:  # an MLP that finishes an expression also cleans up its hidden direction: omit it
        return "; ".join(parts)
    hidden = []
    for sop in sops:  # an internal direction of a multi-block expression (e.g. SelectorWidth's head)
        owner = max((n for n in expression_labels if sop.startswith(n + "_")), key=len, default=None)
        hidden.append(f"{sop} (hidden part of {owner})" if owner else sop)
    return "; ".join(hidden)
