"""Inputs sized before they are read (issue 31): score files that are not regular files or are too
large or too deep, and an entry whose behaviour check would need gigabytes of activations. Each is
one line (exit 2 on the CLI), fast, and reads nothing it does not need."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
import torch
from test_security_pull import REPO, _set, assert_refused, edited, good, hub, plant, probe, pull, root, weights  # noqa: F401

from eval.core.graph import ComputationGraph
from eval.methods.interface import MethodError, read_score_file
from eval.methods.score_input import MAX_SCORE_FILE_BYTES
from zoo.behaviour_check import MAX_ACTIVATION_BYTES, activation_bytes

GRAPH = ComputationGraph(n_layers=2, n_heads=2)


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "scores.json"
    os.mkfifo(path)
    return path


def _sparse(tmp_path: Path) -> Path:
    path = tmp_path / "huge.json"
    with open(path, "wb") as fh:  # sparse: no disk, no time
        fh.truncate(MAX_SCORE_FILE_BYTES + 1)
    return path


def _deep(tmp_path: Path) -> Path:
    path = tmp_path / "deep.json"
    path.write_text('{"edges": ' + "[" * 100_000 + "]" * 100_000 + "}")
    return path


def _nested(tmp_path: Path) -> Path:
    path = tmp_path / "nested.json"
    path.write_text('{"edges": {"input->m0": {"score": ' + "[" * 40 + "]" * 40 + "}}}")
    return path


@pytest.mark.parametrize("make,needle", [
    (_fifo, "is not a regular file"),
    (lambda tmp_path: Path("/dev/zero"), "is not a regular file"),
    (_sparse, f"over the limit of {MAX_SCORE_FILE_BYTES >> 20} MiB"),
    (_deep, "nested too deeply"),
    (_nested, "nests deeper than 32 levels"),
])
def test_unsafe_score_files_are_refused_at_once(make, needle, tmp_path) -> None:
    path = make(tmp_path)
    done: list[BaseException] = []

    def read() -> None:
        try:
            read_score_file(path, GRAPH)
        except BaseException as exc:  # noqa: BLE001 (handed to the test thread)
            done.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=20)
    if reader.is_alive():  # unblock a reader stuck on the FIFO before failing
        with open(path, "wb", buffering=0) if path.is_fifo() else open(os.devnull) as _:
            pass
        pytest.fail(f"reading {path} did not return within 20 s")
    assert len(done) == 1 and isinstance(done[0], MethodError), done
    assert needle in str(done[0]) and "\n" not in str(done[0])


def test_cli_refuses_a_fifo_and_a_device_as_score_files(tmp_path, capsys) -> None:
    from zoo.cli import main

    for path in (_fifo(tmp_path), Path("/dev/zero")):
        code = main(["eval", "case", "4", "--model", "compiled", "--root", str(tmp_path / "root"),
                     "--scores", str(path)])
        _, err = capsys.readouterr()
        assert_refused(code, err, "is not a regular file or a folder")


def _long_context(files: dict[str, bytes], n_ctx: int) -> dict[str, bytes]:
    """case-33's entry as a data-only case with a context of n_ctx: kilobytes of weights."""
    def case(data: dict) -> None:
        data["id"], data["max_seq_len"], data["encoding"]["max_seq_len"] = "x:y", n_ctx - 1, n_ctx - 1

    d_model = json.loads(files["config.json"])["d_model"]
    return edited(files, config_json=_set("n_ctx", n_ctx), case_json=case,
                  model_safetensors=weights(files, lambda t: t.update({"pos_embed.W_pos": torch.zeros(n_ctx, d_model)})))


def test_activation_bound_refuses_a_long_context_before_running_it(hub, good, root, tmp_path, capsys) -> None:
    config = json.loads(good["case-33"]["config.json"])
    assert activation_bytes(config, 256, 1024) > MAX_ACTIVATION_BYTES  # what the probe asked: 3.6 GB
    plant(hub, "case-x-y", _long_context(good["case-33"], 1024))
    # refused from the numbers: the forward pass (3.6 GB, 30 s) would have ended in an install, not this error
    probe(capsys, tmp_path, root, ["case", "x:y"], f"over the bound of {MAX_ACTIVATION_BYTES >> 20} MiB")


def test_activation_estimate_is_an_upper_bound_on_a_small_model() -> None:
    """The estimate is at least the float32 attention tensors that one forward pass must hold."""
    config = {"n_heads": 4, "d_head": 8, "d_model": 32, "d_mlp": 64, "d_vocab_out": 10}
    assert activation_bytes(config, 256, 20) >= 4 * 256 * 4 * 20 * 20 * 2
    assert activation_bytes(config, 256, 400) > 3.5 * activation_bytes(config, 256, 200)  # quadratic in width
