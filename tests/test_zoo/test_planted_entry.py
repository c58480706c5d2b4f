"""A planted entry trained as `zoo train planted` does (test size; its speed is a benchmark's, not this test's): it meets its criterion with the
circuit's nodes mattering and nothing else, and passes what case entries pass: sha256
verification, pickle refusal, the entry checks (case.json rebuilt from the planted name, never
code from the entry), `zoo validate`, `zoo eval`, push / pull / zoo.load round trip."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from hub_server import hub_environment

from zoo.artifact import ArtifactError, read_entry, verify_entry, write_entry
from zoo.cli import main

NAME = "causal-bench-2x2"
ENTRY = f"planted-{NAME}"
REPO = "zoo-test/zoo"


TEST_SIZE = {"n_train": 1024, "n_val": 256, "criterion": 0.99, "epochs": 150}
"""A test-size run: half the data, criterion 0.99 (the issue's target; `zoo train`'s default is 1.0)."""


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """(zoo root holding the entry, summary): causal-bench-2x2 with 8-wide heads
    trained by the library and written by the code `zoo train` writes with."""
    from planted import get_planted
    from siit.config import ArchConfig, TrainConfig
    from siit.trainer import train
    from siit.validation import validate_model
    from zoo.train_entry import entry_summary as _summary, with_patching_checks, write_entry_files as _write

    root = tmp_path_factory.mktemp("planted-root")
    task = get_planted(NAME)
    result = train(task, TrainConfig(**TEST_SIZE), ArchConfig(d_head=8))
    validation = with_patching_checks(validate_model(result.model, result.evaluator, task), task, result)
    dest = _write(root / "entries" / ENTRY, task, result=result, validation=validation,
                  command=["zoo", "train", "planted", NAME])
    return root, _summary(task.case, dest, result, validation)


@pytest.fixture()
def entry(trained, tmp_path: Path) -> Path:
    """A private copy of the trained entry (tests tamper with it)."""
    copy = tmp_path / "entries" / ENTRY
    shutil.copytree(trained[0] / "entries" / ENTRY, copy)
    return copy


def test_zoo_train_planted_meets_its_criterion_with_the_circuit_alone_mattering(trained) -> None:
    root, summary = trained
    assert summary["met_criterion"]
    assert min(summary["accuracy"], summary["iia_min"], summary["siia_min"]) >= 0.99
    validation = json.loads((root / "entries" / ENTRY / "validation.json").read_text())
    rows = validation["node_effects"]
    assert sum(r["in_circuit"] for r in rows) == 5 and len(rows) == 6
    assert min(r["resample"] for r in rows if r["in_circuit"]) > 0.05
    assert max(r["resample"] for r in rows if not r["in_circuit"]) <= 0.01
    case = json.loads((root / "entries" / ENTRY / "case.json").read_text())
    assert case["family"] == "planted" and case["id"] == NAME


def test_planted_entry_verifies_and_a_changed_byte_fails(entry: Path) -> None:
    assert set(verify_entry(entry)) == {"model.safetensors", "config.json", "circuit.json", "case.json",
                                        "training.json", "validation.json", "README.md"}
    data = bytearray((entry / "model.safetensors").read_bytes())
    data[-2] ^= 0x01
    (entry / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="model.safetensors does not match its sha256"):
        verify_entry(entry)


def test_pickle_in_a_planted_entry_is_refused_unread(entry: Path, tmp_path: Path, monkeypatch) -> None:
    marker = tmp_path / "UNPICKLED"

    class Canary:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (entry / "model.safetensors").write_bytes(pickle.dumps(Canary(), protocol=4))
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: (_ for _ in ()).throw(AssertionError("unpickled")))
    with pytest.raises(ArtifactError, match="pickle data"):
        verify_entry(entry)
    assert not marker.exists()


def _rewrite(entry: Path, **changes) -> None:
    """Rewrite the entry with changed JSON files and fresh sha256 sums (a consistent forgery)."""
    files = read_entry(entry)
    from safetensors.torch import load as load_safetensors

    json_files = {n: files.json(n) for n in ("config.json", "circuit.json", "case.json", "training.json",
                                              "validation.json")}
    json_files.update(changes)
    write_entry(entry, state_dict=load_safetensors(files.data["model.safetensors"]), json_files=json_files,
                readme=files.data["README.md"].decode())


def test_case_json_that_contradicts_the_planted_model_is_refused(entry: Path, monkeypatch) -> None:
    import zoo

    case = json.loads((entry / "case.json").read_text())
    _rewrite(entry, **{"case.json": {**case, "causal": False}})
    monkeypatch.setenv("ZOO_HOME", str(entry.parent.parent))
    with pytest.raises(ArtifactError, match="differs from planted model"):
        zoo.load(ENTRY, source="local")
    _rewrite(entry, **{"case.json": {**case, "id": "nope"}})
    with pytest.raises(ArtifactError, match="unknown planted model 'nope'"):
        zoo.load(ENTRY, source="local")


def test_zoo_load_validate_and_eval_a_planted_entry(trained, entry: Path, capsys, monkeypatch) -> None:
    import zoo
    from siit.transformer import Transformer

    root = entry.parent.parent
    monkeypatch.setenv("ZOO_HOME", str(root))
    loaded = zoo.load(ENTRY)
    assert loaded.case.family == "planted" and loaded.case.entry_name == ENTRY
    seqs = loaded.case.sample(32, seed=3)
    tokens, mask = loaded.encoding.encode(seqs)
    ours, _ = Transformer.from_state_dict(loaded.config, loaded.state_dict)(tokens, mask)
    with torch.no_grad():
        theirs = loaded.model(tokens, attention_mask=mask)
    assert torch.allclose(ours, theirs, atol=1e-4)
    before = (entry / "validation.json").read_bytes()
    assert main(["validate", "planted", NAME, "--root", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] >= 0.99
    assert json.loads((entry / "validation.json").read_bytes()) == json.loads(before)
    assert main(["eval", "planted", NAME, "--root", str(root), "--method", "ablation_scan", "--n", "20",
                 "--stability-seeds", "1", "--permutations", "5", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert json.dumps(report).count(ENTRY) >= 1


def test_push_pull_load_round_trip_of_a_planted_entry(trained, tmp_path: Path, capsys, monkeypatch) -> None:
    import zoo

    hub = hub_environment(monkeypatch, tmp_path)
    try:
        src = trained[0]
        assert main(["push", "planted", NAME, "--repo-id", REPO, "--root", str(src)]) == 0
        assert f"{ENTRY}/model.safetensors" in hub.files(REPO)
        capsys.readouterr()
        fresh = tmp_path / "fresh"
        code = main(["pull", "planted", NAME, "--repo-id", REPO, "--root", str(fresh), "--json"])
        out = capsys.readouterr()
        assert code == 0, out.err
        assert "vs the planted high-level model" in json.loads(out.out)["checks"][ENTRY]  # checked, not skipped
        pulled = fresh / "entries" / ENTRY
        assert {p.name: p.read_bytes() for p in pulled.iterdir()} == {
            p.name: p.read_bytes() for p in (src / "entries" / ENTRY).iterdir()}
        monkeypatch.setenv("ZOO_HOME", str(tmp_path / "empty"))
        remote = zoo.load(ENTRY, repo_id=REPO)
        local = zoo.load(ENTRY, root=src)
        assert remote.circuit == local.circuit and remote.case.metadata() == local.case.metadata()
        assert all(torch.equal(remote.state_dict[k], local.state_dict[k]) for k in local.state_dict)
    finally:
        hub.stop()


def test_zoo_realism_reports_a_planted_entry_without_a_tracr_column(trained, tmp_path: Path, capsys) -> None:
    """The realism report applies to planted entries unchanged, less what needs a Tracr model: the
    activity heuristics and targets of the entry, and the KL table of natural, SIIT and IIT models."""
    root = tmp_path / "root"
    shutil.copytree(trained[0], root)
    argv = ["realism", "planted", NAME, "--root", str(root), "--epochs", "1", "--n", "300"]
    assert main([*argv, "--json", "--plots", str(tmp_path / "plots")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["family"] == "planted" and report["case"] == NAME
    assert set(report["activity"]) == {"siit"}
    siit = report["activity"]["siit"]
    assert set(siit["circuit"]) == {"a0.h0", "a0.h1", "m0", "a1.h0", "m1"}  # the 2x2's five planted nodes
    assert all(0.5 <= h["separation"] <= 1.0 for h in siit["heuristics"].values())
    assert report["weight_kl"]["order"] == ["natural", "siit", "iit"]
    assert report["targets"]["kl_natural_siit_below_natural_tracr"]["met"] is None  # no Tracr model to compare
    assert report["targets"]["max_heuristic_separation"]["met"] in (True, False)
    assert sorted(Path(p).name for p in report["plots"]) == ["node_activity_siit.png", "weight_histograms.png"]
    for kind in ("natural", "iit"):
        assert (root / "realism" / ENTRY / kind / "model.safetensors").is_file()
    assert main(argv) == 0  # the text report, comparison models from the cache
    text = capsys.readouterr().out
    assert text.startswith(f"planted {NAME} (") and "no Tracr-compiled model" in text
