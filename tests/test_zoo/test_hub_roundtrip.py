"""Push / pull / zoo.load through the real huggingface_hub client against tests/hub_server.py on
127.0.0.1: round trip with equal model outputs, merged benchmark table, offline loading from the
cache in a fresh process, and the failures (missing entry, wrong repo, server down, pickle in the
repository, tampered file): one line each, exit 2, nothing half-written in the zoo root."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hub_server import build_entry, hub_environment, seed_compile_cache

from zoo.cli import main

REPO = "zoo-test/zoo"


@pytest.fixture()
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    server = hub_environment(monkeypatch, tmp_path)
    yield server
    server.stop()


@pytest.fixture()
def src_root(compiled, tmp_path: Path) -> Path:
    """A zoo root holding case-33 and case-3 (compiled weights, invented training records)."""
    root = tmp_path / "src-root"
    for case_id in ("33", "3"):
        build_entry(compiled(case_id), root / "entries")
    return root


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def entries_state(root: Path) -> list[str]:
    """Everything under the zoo root's entries folder (temporary leftovers included)."""
    entries = root / "entries"
    return sorted(str(p.relative_to(entries)) for p in entries.rglob("*")) if entries.exists() else []


def outputs(model, seqs, encoding) -> torch.Tensor:
    tokens, mask = encoding.encode(seqs)
    with torch.no_grad():
        return model(tokens, attention_mask=mask)


def test_push_pull_load_round_trip(hub, src_root, compiled, compile_cache, tmp_path, capsys, monkeypatch) -> None:
    code, out, err = run(capsys, "push", "case", "33", "--repo-id", REPO, "--root", str(src_root))
    assert code == 0, err
    assert out.startswith("pushed case-33 to zoo-test/zoo@")
    code, _, err = run(capsys, "push", "case", "3", "--repo-id", REPO, "--root", str(src_root), "--json")
    assert code == 0, err
    files = hub.files(REPO)
    assert {"case-33/model.safetensors", "case-3/manifest.json", "README.md", "benchmark_metadata.json",
            "benchmark_metadata.csv"} <= set(files)
    table = json.loads(files["benchmark_metadata.json"])
    assert [r["entry"] for r in table["entries"]] == ["case-3", "case-33"]  # merged, one push each
    local_sums = json.loads((src_root / "entries/case-33/manifest.json").read_text())["files"]
    row33 = table["entries"][1]
    assert {k: v["sha256"] for k, v in row33["files"].items() if k != "manifest.json"} == local_sums
    assert row33["validation"]["accuracy"] == 1.0 and row33["architecture"]["n_layers"] >= 1
    assert "case-33" in files["benchmark_metadata.csv"].decode()
    commits = [c.message for c in hub.repos[REPO].commits]
    assert commits[1:] == ["zoo push case-33", "zoo push case-3"]  # one commit per push

    # pull into a fresh zoo root: verified copy of exactly the pushed files
    fresh = tmp_path / "fresh-root"
    seed_compile_cache(fresh, compile_cache, ["33"])  # pull runs the model against the compiled case
    code, out, err = run(capsys, "pull", "case", "33", "--repo-id", REPO, "--root", str(fresh))
    assert code == 0, err
    pulled = fresh / "entries/case-33"
    assert {p.name: p.read_bytes() for p in pulled.iterdir()} == {
        p.name: p.read_bytes() for p in (src_root / "entries/case-33").iterdir()}

    # zoo.load from the Hub (empty local root): same outputs as the compiled model
    import zoo

    monkeypatch.setenv("ZOO_HOME", str(tmp_path / "empty-root"))
    entry = zoo.load("case-33", repo_id=REPO)
    assert "hf-home" in str(entry.path)  # came from the Hugging Face cache, not a zoo root
    original = compiled("33")
    seqs = entry.case.sample(64, seed=1)
    assert torch.equal(outputs(entry.model, seqs, entry.encoding), outputs(original.model, seqs, original.encoding))
    assert entry.circuit.to_json() == original.graph.to_json()
    assert all(method != "POST" or path.startswith("/api/") for method, path in hub.requests)


def test_offline_load_from_cache_after_server_stops(hub, src_root, compile_cache, tmp_path, capsys) -> None:
    assert run(capsys, "push", "--all", "--repo-id", REPO, "--root", str(src_root))[0] == 0
    import zoo

    entry = zoo.load("case-3", repo_id=REPO, source="hub")  # fills the HF cache
    seqs = entry.case.sample(16, seed=2)
    expected = outputs(entry.model, seqs, entry.encoding)
    hub.stop()
    n_requests = len(hub.requests)
    script = (
        "import json, sys, torch, zoo\n"
        "e = zoo.load('case-3')\n"
        "seqs = e.case.sample(16, seed=2)\n"
        "t, m = e.encoding.encode(seqs)\n"
        "print(json.dumps({'path': str(e.path), 'out': e.model(t, attention_mask=m).tolist()}))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ZOO_HOME": str(tmp_path / "offline-root"), "ZOO_REPO_ID": REPO}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "hf-home" in result["path"]
    assert torch.equal(torch.tensor(result["out"]), expected)
    assert len(hub.requests) == n_requests

    # the CLI pulls from the cache offline too; an entry never downloaded is one clear error
    env_root = tmp_path / "offline-pull"
    seed_compile_cache(env_root, compile_cache, ["3"])
    pull = [sys.executable, "-m", "zoo.cli", "pull", "case", "3", "--root", str(env_root)]
    proc = subprocess.run(pull, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (env_root / "entries/case-3/model.safetensors").is_file()
    proc = subprocess.run(pull[:-3] + ["33", "--root", str(env_root)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"zoo: error: entry case-33 of {REPO}@main is not in the Hugging Face cache "
        f"({tmp_path / 'hf-home' / 'hub'}) and HF_HUB_OFFLINE is set"]
    assert sorted(p.name for p in (env_root / "entries").iterdir()) == ["case-3"]


def assert_one_line_error(code: int, err: str, pattern: str) -> None:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("zoo: error: ") and pattern in lines[0], lines[0]


def test_missing_entry_wrong_repo_and_server_down(hub, src_root, tmp_path, capsys) -> None:
    assert run(capsys, "push", "case", "33", "--repo-id", REPO, "--root", str(src_root))[0] == 0
    root = tmp_path / "target"
    code, _, err = run(capsys, "pull", "case", "99", "--repo-id", REPO, "--root", str(root))
    assert_one_line_error(code, err, "entry case-99 is not in zoo-test/zoo@main (entries there: case-33)")
    code, _, err = run(capsys, "pull", "case", "33", "--repo-id", "zoo-test/nope", "--root", str(root))
    assert_one_line_error(code, err, "repository zoo-test/nope on http://127.0.0.1")
    code, _, err = run(capsys, "pull", "case", "33", "--repo-id", "not a repo", "--root", str(root))
    assert_one_line_error(code, err, "invalid repository id 'not a repo'")
    hub.stop()
    code, _, err = run(capsys, "pull", "case", "33", "--repo-id", REPO, "--root", str(root))
    assert_one_line_error(code, err, "is not in the Hugging Face cache")
    assert "cannot reach the Hub at http://127.0.0.1" in err
    code, _, err = run(capsys, "push", "case", "33", "--repo-id", REPO, "--root", str(src_root))
    assert_one_line_error(code, err, "pushing: cannot reach the Hub")
    assert entries_state(root) == []


def test_pickle_in_repository_folder_is_refused_unopened(hub, src_root, tmp_path, capsys, monkeypatch) -> None:
    assert run(capsys, "push", "case", "33", "--repo-id", REPO, "--root", str(src_root))[0] == 0
    marker = tmp_path / "UNPICKLED"

    class Canary:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    payload = pickle.dumps(Canary(), protocol=4)
    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, lambda *a, **k: pytest.fail("something tried to unpickle"))
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was called"))
    root = tmp_path / "target"

    hub.put_file(REPO, "case-33/pytorch_model.bin", payload)
    code, _, err = run(capsys, "pull", "case", "33", "--repo-id", REPO, "--root", str(root))
    assert_one_line_error(code, err, "unexpected files ['pytorch_model.bin']; refused without downloading")
    assert not any("pytorch_model.bin" in path for _, path in hub.requests)  # never even downloaded

    # a pickle under an allowed name is downloaded but refused on its first bytes, never parsed
    hub.files(REPO)  # sanity: repository is readable
    files = hub.repos[REPO].head.files
    del files["case-33/pytorch_model.bin"]
    files["case-33/model.safetensors"] = payload
    code, _, err = run(capsys, "pull", "case", "33", "--repo-id", REPO, "--root", str(root))
    assert_one_line_error(code, err, "model.safetensors is not a safetensors file (pickle data)")
    assert not marker.exists()
    assert entries_state(root) == []


def test_tampered_remote_file_keeps_the_installed_entry(hub, src_root, compile_cache, tmp_path, capsys) -> None:
    assert run(capsys, "push", "case", "33", "--repo-id", REPO, "--root", str(src_root))[0] == 0
    root = tmp_path / "target"
    seed_compile_cache(root, compile_cache, ["33"])
    assert run(capsys, "pull", "case", "33", "--repo-id", REPO, "--root", str(root))[0] == 0
    before = {p.name: p.read_bytes() for p in (root / "entries/case-33").iterdir()}
    config = bytearray(hub.files(REPO)["case-33/config.json"])
    config[-3] ^= 0x01  # one changed byte
    hub.put_file(REPO, "case-33/config.json", bytes(config))
    code, _, err = run(capsys, "pull", "case", "33", "--repo-id", REPO, "--root", str(root))
    assert_one_line_error(code, err, "config.json does not match its sha256")
    assert {p.name: p.read_bytes() for p in (root / "entries/case-33").iterdir()} == before
    assert entries_state(root) == sorted(["case-33", *(f"case-33/{n}" for n in before)])


def test_push_refuses_a_tampered_local_entry_and_commits_nothing(hub, src_root, capsys) -> None:
    (src_root / "entries/case-33/circuit.json").write_text('{"schema_version": 1}\n')
    code, _, err = run(capsys, "push", "case", "33", "--repo-id", REPO, "--root", str(src_root))
    assert_one_line_error(code, err, "circuit.json does not match its sha256")
    assert REPO not in hub.repos


def test_push_needs_a_repo_id_and_an_entry(hub, src_root, capsys, monkeypatch) -> None:
    monkeypatch.delenv("ZOO_REPO_ID")
    code, _, err = run(capsys, "push", "case", "33", "--root", str(src_root))
    assert_one_line_error(code, err, "no repository given")
    code, _, err = run(capsys, "push", "--repo-id", REPO, "--root", str(src_root))
    assert_one_line_error(code, err, "needs `<kind> <id>`")
    assert hub.requests == []
