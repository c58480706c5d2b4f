"""zoo.artifact verification: sha256 sums, refusal of pickles / zips / unexpected files before
anything is parsed, atomic install. Entries are built from a compiled case (no training)."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest
from hub_server import build_entry

from zoo.artifact import ArtifactError, check_entry_name, install_entry, verify_entry
from zoo.errors import ZooError


class _Canary:
    """Unpickling this creates a file: proof that something unpickled it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def canary_pickle(tmp_path: Path) -> tuple[bytes, Path]:
    marker = tmp_path / "UNPICKLED"
    return pickle.dumps(_Canary(marker), protocol=4), marker


@pytest.fixture()
def no_unpickling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to unpickle fails the test loudly."""

    def refuse(*args, **kwargs):
        raise AssertionError("something tried to unpickle")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    import torch

    monkeypatch.setattr(torch, "load", refuse)


@pytest.fixture()
def entry(compiled, tmp_path: Path) -> Path:
    return build_entry(compiled("33"), tmp_path / "entries")


def test_fresh_entry_verifies(entry: Path) -> None:
    files = verify_entry(entry)
    assert set(files) == {"model.safetensors", "config.json", "circuit.json", "case.json", "training.json",
                          "validation.json", "README.md"}


@pytest.mark.parametrize("name", ["model.safetensors", "circuit.json", "README.md"])
def test_one_changed_byte_fails_verification(entry: Path, name: str) -> None:
    path = entry / name
    data = bytearray(path.read_bytes())
    data[-2] ^= 0x01  # past the safetensors header: the file still looks like what it claims to be
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match=rf"{name} does not match its sha256"):
        verify_entry(entry)


def test_error_is_a_zoo_error_and_a_value_error(entry: Path) -> None:
    (entry / "config.json").write_text('{"n_layers": 99}\n')
    with pytest.raises(ZooError) as info:
        verify_entry(entry)
    assert isinstance(info.value, ValueError)


def test_pickle_disguised_as_safetensors_is_refused_unread(entry: Path, tmp_path: Path, no_unpickling) -> None:
    payload, marker = canary_pickle(tmp_path)
    (entry / "model.safetensors").write_bytes(payload)
    with pytest.raises(ArtifactError, match="model.safetensors is not a safetensors file \\(pickle data\\)"):
        verify_entry(entry)
    assert not marker.exists()


def test_pickle_disguised_as_json_is_refused(entry: Path, tmp_path: Path, no_unpickling) -> None:
    payload, marker = canary_pickle(tmp_path)
    (entry / "validation.json").write_bytes(payload)
    with pytest.raises(ArtifactError, match="validation.json is not a JSON object \\(pickle data\\)"):
        verify_entry(entry)
    assert not marker.exists()


def test_torch_zip_is_refused(entry: Path) -> None:
    import torch

    torch.save({"w": torch.zeros(2)}, entry / "model.safetensors")
    with pytest.raises(ArtifactError, match="zip archive"):
        verify_entry(entry)


def test_unexpected_file_is_refused_before_it_is_opened(entry: Path, tmp_path: Path, monkeypatch) -> None:
    payload, marker = canary_pickle(tmp_path)
    bad = entry / "pytorch_model.bin"
    bad.write_bytes(payload)
    opened: list[str] = []
    real_open = open

    def spy(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", spy)
    with pytest.raises(ArtifactError, match=r"unexpected files \['pytorch_model.bin'\]"):
        verify_entry(entry)
    assert str(bad) not in opened
    assert opened == []  # refused on names alone, before any file was read
    assert not marker.exists()


def test_allowed_file_missing_from_manifest_is_refused(entry: Path) -> None:
    shutil.copy(entry / "training.json", entry / "validation.json")
    import json

    manifest = json.loads((entry / "manifest.json").read_text())
    del manifest["files"]["validation.json"]
    (entry / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="not in the manifest"):
        verify_entry(entry)


def test_install_is_atomic_and_keeps_the_old_entry_on_failure(entry: Path, tmp_path: Path) -> None:
    dest_root = tmp_path / "root"
    installed = install_entry(entry, dest_root / entry.name)
    assert verify_entry(installed) == verify_entry(entry)
    before = {p.name: p.read_bytes() for p in installed.iterdir()}
    (entry / "case.json").write_text("{}\n")  # tamper with the source
    with pytest.raises(ArtifactError, match="case.json does not match"):
        install_entry(entry, dest_root / entry.name)
    assert {p.name: p.read_bytes() for p in installed.iterdir()} == before
    assert sorted(p.name for p in dest_root.iterdir()) == [entry.name]  # no temporary leftovers


@pytest.mark.parametrize("name", ["../case-33", "case-33/..", "case-..", "model", "case-", "case-3 3", "/etc"])
def test_bad_entry_names_are_refused(name: str) -> None:
    with pytest.raises(ArtifactError, match="invalid entry name"):
        check_entry_name(name)


@pytest.mark.parametrize("name", ["case-33", "planted-ioi", "case-mypkg.mod-make_case"])
def test_good_entry_names_pass(name: str) -> None:
    assert check_entry_name(name) == name
