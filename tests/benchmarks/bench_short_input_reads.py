"""Does a layer-0 MLP read a layer-0 head outside the circuit on short inputs? Per entry, per layer-0 head,
per input length L (unpadded: BOS and the input only): the fraction of output positions that change when
only the head's write into `m0` (the edge head -> m0) is replaced by (mean_all) its mean over inputs of
every length, per position (validation's mean ablation, siit.bound_chunks.sample_means), (mean_same) its
mean over inputs of length L, (resample_same) another length-L input's value, (resample_any) an input's
of any length (validation's resample: sources drawn independently of the base's length). Classification
entries only (argmax at every real position but BOS). Prints one JSON object.

    python tests/benchmarks/bench_short_input_reads.py --root ROOT case-20 [case-11 ...]

Cases 11 and 20 trained with --strict-edges --min-d-head 8 fail validation's edge bound on `a0.h3->m0` /
`a0.h1->m0` on unpadded inputs (under resample and mean ablation; padded inputs stay within 0.02); this
measures that one edge apart from validation's machinery, length by length, and says which counterfactual
exposes it (docs/results.md, "Cases 11, 19, 20 and 21 with the source-attention floor"); per length also the
same flips with the head's write replaced at one position only (mean_all_at_position: where m0 reads it) and the
class counts of the outputs with and without it (mean_all_classes, clean_classes: whether removing the head
sends every input to one class). With --length-signal, per head also what differs at position 1 between
one-token inputs and the longest ones (five tokens in case 20) that start with the same word (length_signal: each layer-0 head's write,
and m0's output once the head's write is replaced by its mean): whether m0 misreads the word or passes on
the head's length. Not part of CI.

    python tests/benchmarks/bench_short_input_reads.py --root ROOT --length-signal case-20

With --paths, per head and length also which readers of m0's changed output carry the flips (paths): m0's
output with the head's write at its mean minus as it is (delta) is read by a chosen set of block 1's
readers only (a circuit head's q, k, v; the busy heads; block 1's MLP; the residual stream that goes on to
block 2) and every other reader reads m0 as it is. A flip that needs two readers at once (a circuit head
and the MLP, say) is a read that the rest of the circuit cancels when the head is ablated whole.

    python tests/benchmarks/bench_short_input_reads.py --root ROOT --paths case-20
"""

from __future__ import annotations

import argparse
import json


def measure(root: str, name: str, n: int = 3000, seed: int = 123, signal: bool = False,
            paths: bool = False) -> dict:
    import torch

    from siit.interventions import ablation_values
    from siit.transformer import Transformer
    from zoo.loader import load

    torch.set_grad_enabled(False)
    entry = load(name, root=root)
    model = Transformer.from_state_dict(entry.config, entry.state_dict)
    tokens, mask = entry.encoding.encode(entry.case.sample(n, seed))
    lengths = mask.sum(1) - 1
    acts = model(tokens, mask, return_acts=True)[1]  # padded sample: every length
    mean_all = ablation_values(acts, mask, "mean")[0, 0]  # [T, S, d]: layer 0's mean per position
    H, circuit = model.n_heads, {str(node) for node in entry.circuit.nodes}
    gen = torch.Generator().manual_seed(seed)
    out: dict = {"entry": name, "heads": {}}
    for head in [h for h in range(H) if f"a0.h{h}" not in circuit]:
        rows = {}
        for length in sorted(set(lengths.tolist())):
            t, m, logits, writes, embed = _unpadded(model, tokens, mask, length)
            x1 = _after_attention(model, embed, writes)
            own, clean = writes[:, :, head], logits.argmax(-1)[:, 1:]
            any_src = acts[0, torch.randint(0, len(tokens), (len(t),), generator=gen), : length + 1, head]
            swaps = {"mean_all": mean_all[None, : length + 1, head], "mean_same": own.mean(0, keepdim=True),
                     "resample_same": own[torch.randperm(len(t), generator=gen)], "resample_any": any_src}
            patched = {key: _patched(model, t, m, x1, own, value) for key, value in swaps.items()}
            row = {"n_inputs": len(t), **{key: _flips(y, clean) for key, y in patched.items()}}
            # where the read happens: the head's write replaced at one position only (mean_all), and
            # whether the patched outputs collapse onto one class (a read used as a bias, not noise)
            row["mean_all_at_position"] = [_flips(_patched(model, t, m, x1, own, swaps["mean_all"], only=p), clean)
                                           for p in range(length + 1)]
            row["mean_all_classes"] = patched["mean_all"].flatten().bincount().tolist()
            row["clean_classes"] = clean.flatten().bincount().tolist()
            if paths and model.n_layers > 1:
                delta = model.mlp_output(0, x1 - own + swaps["mean_all"]) - model.mlp_output(0, x1)
                row["paths"] = reader_paths(model, t, m, x1 + model.mlp_output(0, x1), delta, clean, circuit)
            rows[str(length)] = row
        out["heads"][f"a0.h{head}"] = rows
        if signal:
            out.setdefault("length_signal", {})[f"a0.h{head}"] = length_signal(model, tokens, mask, mean_all, head)
    return out


def length_signal(model, tokens, mask, mean_all, head: int) -> dict:
    """Per first word present at length 1 and at the sample's longest length (unpadded): the mean norm of the
    difference at position 1 between the two lengths of the embedding, of each layer-0 head's write, and of
    m0's output as it is and with `head`'s write replaced by mean_all [T, S, d] (validation's mean)."""
    H = model.n_heads
    short, long = 1, int((mask.sum(1) - 1).max())
    at = {}  # length -> what position 1 holds, one row per input of that length
    for length in (short, long):
        t, _, _, writes, embed = _unpadded(model, tokens, mask, length)
        writes, embed = writes[:, 1], embed[:, 1]  # position 1: [n, H, d], [n, d]
        clean = _after_attention(model, embed, writes)
        at_mean = clean - writes[:, head] + mean_all[1, head]
        at[length] = {"word": t[:, 1], "embedding": embed, "writes": writes,
                      "m0": model.mlp_output(0, clean[:, None])[:, 0],
                      "m0_with_head_at_mean": model.mlp_output(0, at_mean[:, None])[:, 0]}
    out = {}
    for word in sorted(set(at[short]["word"].tolist()) & set(at[long]["word"].tolist())):
        a, b = (at[L]["word"] == word for L in (short, long))
        one, many = ({k: v[rows] for k, v in at[L].items()} for L, rows in ((short, a), (long, b)))
        diff = lambda x, y: round(float((x - y).norm(dim=-1).mean()), 4)  # noqa: E731  (one-token inputs are one word)
        out[str(word)] = {"n_longest": int(b.sum()), "embedding": diff(one["embedding"][:1], many["embedding"]),
                          "m0": diff(one["m0"][:1], many["m0"]),
                          "m0_with_head_at_mean": diff(one["m0_with_head_at_mean"][:1], many["m0_with_head_at_mean"]),
                          "m0_norm": round(float(one["m0_with_head_at_mean"][0].norm()), 4),
                          "heads": {f"a0.h{h}": diff(one["writes"][:1, h], many["writes"][:, h]) for h in range(H)}}
    return out


def reader_paths(model, t, m, x, delta, clean, circuit: set) -> dict:
    """Flips when only some of block 1's readers read x + delta [n, T, d] (x: block 1's input) and the
    others x: each reader set of `_reader_sets` (its name -> the fraction of outputs that change)."""
    import torch

    H, a = model.n_heads, model.blocks[1].attn
    allowed = model.allowed_keys(m)
    out = {}
    for name, use in _reader_sets(H, circuit).items():
        heads = []
        for h in range(H):
            q, k, v = (torch.einsum("btd,dk->btk", x + delta if (c, h) in use else x, W[h]) + b[h]
                       for c, W, b in (("q", a.W_Q, a.b_Q), ("k", a.W_K, a.b_K), ("v", a.W_V, a.b_V)))
            heads.append(model._attend(q[:, None], k[:, None], v[:, None], allowed)[:, 0] @ a.W_O[h])
        mid = x + sum(heads) + a.b_O
        leaving = mid + (delta if "residual" in use else 0) + model.mlp_output(1, mid + (delta if "mlp" in use else 0))
        out[name] = _flips(model(t, m, start=(2, leaving))[0].argmax(-1)[:, 1:], clean)
    return out


def _reader_sets(H: int, circuit: set) -> dict:
    """Named sets of block 1's readers: ("q"|"k"|"v", head) pairs, "mlp" (block 1's MLP) and "residual"
    (what goes on to block 2 unread by block 1): each alone, each circuit head's q, k, v together and with
    each of the MLP and the residual stream, and everything."""
    busy = {(c, h) for c in "qkv" for h in range(H) if f"a1.h{h}" not in circuit}
    sets: dict = {"everything": busy | {(c, h) for c in "qkv" for h in range(H)} | {"mlp", "residual"},
                  "busy_heads": busy, "mlp": {"mlp"}, "residual": {"residual"}, "mlp+residual": {"mlp", "residual"}}
    for h in (h for h in range(H) if f"a1.h{h}" in circuit):
        qkv = {(c, h) for c in "qkv"}
        sets.update({f"a1.h{h}<{c}>": {(c, h)} for c in "qkv"})
        sets.update({f"a1.h{h}<qkv>": qkv, f"a1.h{h}<qkv>+mlp": qkv | {"mlp"}, f"a1.h{h}<qkv>+residual": qkv | {"residual"}})
    return sets


def _unpadded(model, tokens, mask, length: int):
    """The sample's inputs of `length`, unpadded (BOS and the input only): tokens, mask, their logits,
    layer 0's head writes [n, T, H, d] and the embedding [n, T, d]."""
    pick = (mask.sum(1) - 1) == length
    t, m = tokens[pick][:, : length + 1], mask[pick][:, : length + 1]
    logits, acts = model(t, m, return_acts=True)
    return t, m, logits, acts[0, :, :, : model.n_heads], model._embed(t, m.bool())


def _after_attention(model, embed, writes):
    """The residual stream after block 0's attention (m0's input) from the embedding and the heads' writes."""
    return embed + writes.sum(-2) + model.blocks[0].attn.b_O


def _patched(model, t, m, x1, own, value, only: int | None = None):
    """Outputs [n, length] (BOS dropped) with the head's write into m0 (`own` [n, T, d]) replaced by
    `value` (at position `only` alone when given)."""
    if only is not None:
        at_one = own.clone()
        at_one[:, only] = value.expand_as(own)[:, only]
        value = at_one
    m0 = model.mlp_output(0, x1 - own + value)
    return model(t, m, start=(1, x1 + m0))[0].argmax(-1)[:, 1:]


def _flips(patched, clean) -> float:
    """The fraction of output positions that `patched` changes."""
    return round(float((patched != clean).float().mean()), 4)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", required=True)
    p.add_argument("--length-signal", action="store_true",
                   help="also compare one-token and the longest inputs that start with the same word")
    p.add_argument("--paths", action="store_true",
                   help="also which of block 1's readers of m0's changed output carry the flips")
    p.add_argument("entries", nargs="+", help="entry names, e.g. case-20")
    args = p.parse_args()
    print(json.dumps({"results": [measure(args.root, name, signal=args.length_signal, paths=args.paths) for name in args.entries]},
                     indent=1))


if __name__ == "__main__":
    main()
