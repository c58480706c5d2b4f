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
exposes it (docs/results.md, "Cases 11, 19, 20 and 21 with the source-attention floor"). Not part of CI.
"""

from __future__ import annotations

import argparse
import json


def measure(root: str, name: str, n: int = 3000, seed: int = 123) -> dict:
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
            pick = lengths == length
            t, m = tokens[pick][:, : length + 1], mask[pick][:, : length + 1]  # unpadded
            logits, a = model(t, m, return_acts=True)
            x1 = model._embed(t, m.bool()) + a[0, :, :, :H].sum(2) + model.blocks[0].attn.b_O
            own, clean = a[0, :, :, head], logits.argmax(-1)[:, 1:]
            any_src = acts[0, torch.randint(0, len(tokens), (len(t),), generator=gen), : length + 1, head]
            swaps = {"mean_all": mean_all[None, : length + 1, head], "mean_same": own.mean(0, keepdim=True),
                     "resample_same": own[torch.randperm(len(t), generator=gen)], "resample_any": any_src}
            row = {"n_inputs": len(t)}
            for key, value in swaps.items():
                m0 = model.mlp_output(0, x1 - own + value)
                patched = model(t, m, start=(1, x1 + m0))[0].argmax(-1)[:, 1:]
                row[key] = round(float((patched != clean).float().mean()), 4)
            rows[str(length)] = row
        out["heads"][f"a0.h{head}"] = rows
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", required=True)
    p.add_argument("entries", nargs="+", help="entry names, e.g. case-20")
    args = p.parse_args()
    print(json.dumps({"results": [measure(args.root, name) for name in args.entries]}, indent=1))


if __name__ == "__main__":
    main()
