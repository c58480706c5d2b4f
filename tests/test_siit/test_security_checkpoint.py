"""Checkpoints are written atomically: a kill (os._exit in a forked child) injected before every
file-system operation of `save_checkpoint` leaves a checkpoint that resumes to exactly the old or
exactly the new state (both on the uninterrupted run's path), never a mixture; a mixture made by
hand is refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import eval.core.directory_swap as directory_swap
from eval.core.tlens import hooked_config
from siit.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from siit.optim import Adam
from siit.transformer import Transformer

CONFIG = hooked_config(n_layers=1, d_model=8, n_heads=2, d_head=4, d_mlp=16, d_vocab=5, d_vocab_out=3, n_ctx=4,
                       causal=True, act_fn="gelu")
KILLED = 137


def state(step: int) -> tuple[Transformer, Adam]:
    """Model and optimiser after `step` optimiser steps (deterministic)."""
    torch.manual_seed(0)
    model = Transformer(CONFIG)
    for p in model.parameters():
        torch.nn.init.normal_(p)
    opt = Adam(model.parameters(), lr=1e-2, betas=(0.9, 0.9))
    tokens = torch.tensor([[0, 1, 2, 3]])
    for _ in range(step):
        opt.zero_grad()
        model(tokens, torch.ones_like(tokens))[0].square().mean().backward()
        opt.step()
    return model, opt


def fresh() -> tuple[Transformer, Adam]:
    model = Transformer(CONFIG)
    return model, Adam(model.parameters(), lr=1e-2, betas=(0.9, 0.9))


def tensors(model: Transformer, opt: Adam) -> dict[str, torch.Tensor]:
    return {**{f"m.{k}": v for k, v in model.state_dict().items()},
            **{f"o.{k}": v for k, v in opt.state_tensors().items()}}


def _counting(kill_at: int) -> None:
    """Every file-system operation that can change the checkpoint counts; the kill_at-th one is
    never reached (the process dies just before it, as under kill -9). Patched in the forked child
    only, which then exits."""
    count = [0]

    def wrap(func):
        def wrapped(*args, **kwargs):
            count[0] += 1
            if count[0] == kill_at:
                os._exit(KILLED)
            return func(*args, **kwargs)
        return wrapped

    import safetensors.torch

    for name in ("mkdir", "rename", "replace", "rmdir", "unlink", "remove", "fsync"):
        setattr(os, name, wrap(getattr(os, name)))
    Path.write_text = wrap(Path.write_text)
    safetensors.torch.save_file = wrap(safetensors.torch.save_file)
    directory_swap.exchange = wrap(directory_swap.exchange)


def _save_in_child(path: Path, kill_at: int) -> int:
    model, opt = state(2)
    pid = os.fork()
    if pid == 0:  # child: save step 2 over step 1, dying before operation kill_at
        code = 1
        try:
            _counting(kill_at)
            save_checkpoint(path, model=model, optimizer=opt, meta={"step": 2})
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def kill_everywhere(base: Path) -> dict:
    """Save step 1, then save step 2 killed before its 1st, 2nd, ... operation until one save
    completes; after each kill the checkpoint must load as exactly step 1 or exactly step 2."""
    old, new = tensors(*state(1)), tensors(*state(2))
    assert any(not torch.equal(old[k], new[k]) for k in old)
    outcomes = []
    kill_at = 1
    while True:
        path = base / f"run-{kill_at}" / ".case-33.checkpoint"
        model, opt = state(1)
        save_checkpoint(path, model=model, optimizer=opt, meta={"step": 1})
        code = _save_in_child(path, kill_at)
        assert code in (0, KILLED), code
        model, opt = fresh()
        meta = load_checkpoint(path, model=model, optimizer=opt)
        assert meta is not None and meta["step"] in (1, 2)
        got = tensors(model, opt)
        want = old if meta["step"] == 1 else new
        assert all(torch.equal(got[k], want[k]) for k in want), f"kill before operation {kill_at}: mixed state"
        assert opt.steps == meta["step"]
        outcomes.append(meta["step"])
        # the next save (a resumed run) clears whatever the killed one left beside the checkpoint
        save_checkpoint(path, model=model, optimizer=opt, meta={"step": meta["step"]})
        assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
        if code == 0:
            return {"kill_points": kill_at - 1, "outcomes": outcomes}
        kill_at += 1


def test_a_kill_between_any_two_writes_leaves_the_old_or_the_new_checkpoint(tmp_path) -> None:
    # in a fresh single-threaded process: forking one that runs JAX's threads could deadlock
    proc = subprocess.run([sys.executable, __file__, str(tmp_path)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["kill_points"] >= 6  # temp dir, tensors, metadata, fsyncs, the swap, the clean-up
    assert result["outcomes"][0] == 1 and result["outcomes"][-1] == 2
    assert set(result["outcomes"]) == {1, 2} and len(result["outcomes"]) == result["kill_points"] + 1


def test_a_mixture_of_two_writes_is_refused(tmp_path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    save_checkpoint(a, model=state(1)[0], optimizer=state(1)[1], meta={"step": 1})
    save_checkpoint(b, model=state(2)[0], optimizer=state(2)[1], meta={"step": 2})
    shutil.copy(a / "state.json", b / "state.json")  # what renaming the two files one by one could leave
    with pytest.raises(CheckpointError, match="different writes"):
        load_checkpoint(b, model=fresh()[0], optimizer=fresh()[1])
    (b / "state.json").unlink()
    with pytest.raises(CheckpointError, match="incomplete checkpoint"):
        load_checkpoint(b, model=fresh()[0], optimizer=fresh()[1])
    assert load_checkpoint(tmp_path / "none", model=fresh()[0], optimizer=fresh()[1]) is None



def test_a_checkpoint_of_other_tensors_is_refused_in_one_line(tmp_path) -> None:
    """A checkpoint whose tensors this run does not hold (a version that trained other buffers, e.g. busy
    components before siit.busy_ranks) is a CheckpointError, not a traceback from load_state_dict."""
    model, opt = state(1)
    save_checkpoint(tmp_path / "c", model=model, optimizer=opt, meta={"step": 1})
    other = Transformer(hooked_config(n_layers=1, d_model=8, n_heads=2, d_head=4, d_mlp=16, d_vocab=5, d_vocab_out=3,
                                      n_ctx=4, causal=True, act_fn="gelu"))
    other.register_buffer("extra_state", torch.zeros(2))
    with pytest.raises(CheckpointError, match="other tensors than this run trains"):
        load_checkpoint(tmp_path / "c", model=other, optimizer=Adam(other.parameters(), lr=1e-2, betas=(0.9, 0.9)))


if __name__ == "__main__":
    torch.set_num_threads(1)
    print(json.dumps(kill_everywhere(Path(sys.argv[1]))))
