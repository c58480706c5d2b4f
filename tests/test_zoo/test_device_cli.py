"""`--device` on every verb that runs a model (issue 33), on a machine without a GPU: cuda is one
line and exit 2 before anything is written, auto is the CPU path, and `--device cpu` trains the
same bytes as the default; the device is recorded beside the numbers it produced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from zoo.cli import main

FAST = ["--epochs", "1", "--batch-size", "64"]
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer on a machine without a GPU")


@no_gpu
@pytest.mark.parametrize("argv", [
    ["train", "case", "33"],
    ["train", "--cases", "33"],
    ["validate", "case", "33"],
    ["realism", "case", "33"],
    ["eval", "case", "33", "--method", "random"],
    ["bench", "--cases", "33", "--method", "random"],
])
def test_cuda_without_a_gpu_is_one_line_exit_2_and_writes_nothing(argv, tmp_path: Path, capsys) -> None:
    root = tmp_path / "root"
    code = main([*argv, "--device", "cuda", "--root", str(root)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "no CUDA GPU" in err, err
    assert not root.exists()


def test_unknown_device_is_refused_by_the_parser(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["train", "case", "33", "--device", "tpu"])
    assert exc.value.code == 2 and "--device" in capsys.readouterr().err


@no_gpu
def test_device_cpu_trains_the_default_bytes_and_records_the_device(tmp_path: Path, capsys) -> None:
    entries = {}
    for device in ("auto", "cpu"):
        out = tmp_path / device / "case-33"
        main(["train", "case", "33", *FAST, "--device", device, "--out", str(out), "--root", str(tmp_path / "r")])
        capsys.readouterr()
        entries[device] = out
    weights = {d: (p / "model.safetensors").read_bytes() for d, p in entries.items()}
    assert weights["auto"] == weights["cpu"]
    training = json.loads((entries["cpu"] / "training.json").read_text())
    assert training["compute"]["device"] == "cpu" and training["compute"]["dtype"] == "float32"
    assert {h["device"] for h in training["history"]} == {"cpu"}
    validation = json.loads((entries["cpu"] / "validation.json").read_text())
    assert validation["compute"]["device"] == "cpu"


def test_load_puts_the_model_where_asked(tmp_path: Path, capsys) -> None:
    import zoo

    root = tmp_path / "r"
    main(["train", "case", "33", *FAST, "--root", str(root)])
    capsys.readouterr()
    entry = zoo.load("case-33", root=root, device="cpu")
    assert entry.device == "cpu"
    assert {p.device.type for p in entry.model.parameters()} == {"cpu"}
    if not torch.cuda.is_available():
        from zoo.errors import ZooError

        with pytest.raises(ZooError, match="no CUDA GPU"):
            zoo.load("case-33", root=root, device="cuda")
