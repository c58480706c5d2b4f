"""A hostile Hub repository (tests/hub_server.py serving hand-made entries whose manifests are
consistent, so only content checks can catch them) against `zoo pull` and `zoo.load`.

Each probe asserts: exit 2 with one `zoo: error:` line, nothing installed or changed in the zoo
root, nothing written outside the zoo root and the Hugging Face cache (directory listings before
and after), and no marker file from publisher code.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from hub_server import build_entry, hub_environment, seed_compile_cache
from safetensors.torch import load as st_load, save as st_save

from zoo.cli import main

REPO = "zoo-test/zoo"


# ---------------------------------------------------------------------------------------------
# fixtures and helpers


@pytest.fixture(scope="module")
def good(compiled, tmp_path_factory) -> dict[str, dict[str, bytes]]:
    """Files of honest entries case-33 and case-3 (compiled weights, validation accuracy 1.0)."""
    out = {}
    for case_id in ("33", "3"):
        path = build_entry(compiled(case_id), tmp_path_factory.mktemp("good") / "entries")
        out[path.name] = {p.name: p.read_bytes() for p in path.iterdir()}
    return out


@pytest.fixture()
def hub(monkeypatch, tmp_path):
    server = hub_environment(monkeypatch, tmp_path)
    yield server
    server.stop()


@pytest.fixture()
def root(tmp_path, compile_cache, compiled) -> Path:
    """A zoo root whose compile cache already holds cases 33 and 3 (pull compiles to check)."""
    path = tmp_path / "root"
    for case_id in ("33", "3"):
        compiled(case_id)
    seed_compile_cache(path, compile_cache, ("33", "3"))
    return path


def edited(files: dict[str, bytes], **changes: Callable[[dict], None] | bytes) -> dict[str, bytes]:
    """A copy of entry files with some replaced (bytes) or edited (a function on the parsed JSON),
    and a manifest that matches them: the sha256 sums cannot tell."""
    out = dict(files)
    for key, change in changes.items():
        name = key.replace("_json", ".json").replace("_safetensors", ".safetensors")
        if callable(change):
            data = json.loads(out[name])
            change(data)
            out[name] = json.dumps(data).encode()
        else:
            out[name] = change
    sums = {n: hashlib.sha256(d).hexdigest() for n, d in out.items() if n != "manifest.json"}
    out["manifest.json"] = json.dumps({"format": "zoo/1", "files": sums}).encode()
    return out


def plant(hub, folder: str, files: dict[str, bytes]) -> None:
    hub.put_files(REPO, {f"{folder}/{n}": d for n, d in files.items()})


def weights(files: dict[str, bytes], change: Callable[[dict], None]) -> bytes:
    tensors = st_load(files["model.safetensors"])
    change(tensors)
    return st_save(tensors, metadata={"format": "zoo/1"})


def outside(tmp_path: Path) -> list[str]:
    """Everything under tmp_path except the zoo root and the Hugging Face cache."""
    skip = (tmp_path / "root", tmp_path / "hf-home")
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")
                  if not any(p == s or s in p.parents for s in skip))


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()} \
        if path.exists() else {}


def pull(capsys, root: Path, *argv: str) -> tuple[int, str, str]:
    code = main(["pull", *argv, "--repo-id", REPO, "--root", str(root)])
    out, err = capsys.readouterr()
    return code, out, err


def assert_refused(code: int, err: str, needle: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("zoo: error: ") and needle in lines[0], lines[0]


def probe(capsys, tmp_path: Path, root: Path, argv: list[str], needle: str) -> None:
    """Run `zoo pull argv`: refused, and nothing changed anywhere but the Hugging Face cache."""
    before_outside, before_root = outside(tmp_path), tree(root)
    code, out, err = pull(capsys, root, *argv)
    assert_refused(code, err, needle)
    assert out == ""
    assert tree(root) == before_root
    assert outside(tmp_path) == before_outside


def _set(path: str, value):
    def change(data: dict) -> None:
        *parents, last = path.split(".")
        for p in parents:
            data = data[p]
        data[last] = value
    return change


def _header_claims_short_range(files: dict[str, bytes]) -> bytes:
    """A safetensors file whose header gives embed.W_E fewer bytes than its shape needs."""
    data = files["model.safetensors"]
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + n])
    header["embed.W_E"]["data_offsets"][1] -= 4
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data[8 + n :]


# ---------------------------------------------------------------------------------------------
# probes: one hostile entry each


PROBES: dict[str, tuple[Callable[[dict], dict], str]] = {
    "config runs remote code": (lambda f: edited(f, config_json=lambda c: c.update(
        tokenizer_name="zoo-test/evil-tokenizer", trust_remote_code=True)), "not allowed"),
    "config negative layers": (lambda f: edited(f, config_json=_set("n_layers", -3)), "n_layers must be an integer"),
    "config terabyte vocabulary": (lambda f: edited(f, config_json=_set("d_vocab", 10**13)), "d_vocab must be an integer"),
    "config unknown act_fn": (lambda f: edited(f, config_json=_set("act_fn", "silu")), "act_fn must be one of"),
    "weights do not fit config": (lambda f: edited(f, model_safetensors=weights(
        f, lambda t: t.update({"unembed.W_U": torch.zeros(3, 3)}))), "tensor unembed.W_U has shape [3, 3]"),
    "weights missing a tensor": (lambda f: edited(f, model_safetensors=weights(
        f, lambda t: t.pop("blocks.0.mlp.b_in"))), "does not fit config.json (missing ['blocks.0.mlp.b_in']"),
    "weights float64": (lambda f: edited(f, model_safetensors=weights(
        f, lambda t: t.update({"embed.W_E": t["embed.W_E"].double()}))), "must be float32"),
    "safetensors header lies about a range": (lambda f: edited(f, model_safetensors=_header_claims_short_range(f)),
                                              "byte range does not match its shape"),
    "safetensors trailing bytes": (lambda f: edited(f, model_safetensors=f["model.safetensors"] + b"\0" * 64),
                                   "its header accounts for"),
    "NaN weights": (lambda f: edited(f, model_safetensors=weights(
        f, lambda t: t["embed.W_E"].__setitem__((0, 0), float("nan")))), "hold NaN or infinite values"),
    "inf weights": (lambda f: edited(f, model_safetensors=weights(
        f, lambda t: t["unembed.b_U"].__setitem__(0, float("inf")))), "hold NaN or infinite values"),
    "circuit node not in the model": (lambda f: edited(f, circuit_json=lambda c: c["nodes"].append("a5.h0")),
                                      "'a5.h0' is not in the model"),
    "circuit edge backwards": (lambda f: edited(f, circuit_json=lambda c: c["edges"].append(["logits", "m0"])),
                               "is not in the model's graph"),
    "circuit wrong types": (lambda f: edited(f, circuit_json=_set("nodes", 5)), "nodes must be a list"),
    "case id sys:exit": (lambda f: edited(f, case_json=_set("id", "sys:exit")), "holds the entry of case 'sys:exit'"),
    "case id os:abort": (lambda f: edited(f, case_json=_set("id", "os:abort")), "holds the entry of case 'os:abort'"),
    "case vocab differs from built-in": (lambda f: edited(f, case_json=lambda c: c["vocab"].append("zzz")),
                                         "vocab differs from built-in case 33"),
    "case missing vocab": (lambda f: edited(f, case_json=lambda c: c.pop("vocab")), "vocab must be a list"),
    "encoding vocab swapped": (lambda f: edited(f, case_json=lambda c: c["encoding"]["input_vocab"].reverse()),
                               "encoding differs from the compiled case 33"),
    "validation NaN": (lambda f: edited(f, validation_json=b'{"metrics": {"accuracy": NaN}}'),
                       "NaN is not a JSON number"),
    "training deeply nested": (lambda f: edited(f, training_json=b'{"a": ' + b"[" * 200 + b"]" * 200 + b"}"),
                               "nested deeper than 64 levels"),
    "training recursion bomb": (lambda f: edited(f, training_json=b'{"a": ' + b"[" * 200000 + b"]" * 200000 + b"}"),
                                "nested too deeply"),
    "number out of range": (lambda f: edited(f, validation_json=b'{"metrics": {"accuracy": 1e999}}'),
                            "holds a number out of range"),
    "accuracy claimed, not delivered": (lambda f: edited(f, model_safetensors=weights(
        f, lambda t: (t["unembed.W_U"].zero_(), t["unembed.b_U"].zero_()))), "validation.json records 1.0000"),
    "accuracy understated": (lambda f: edited(f, validation_json=_set("metrics.accuracy", 0.5)),
                             "validation.json records 0.5000"),
    "circuit is not the ground truth": (lambda f: edited(f, circuit_json=lambda c: c["edges"].pop()),
                                        "is not case 33's ground truth"),
}


@pytest.mark.parametrize("name", sorted(PROBES))
def test_hostile_entry_is_refused_and_nothing_changes(name, hub, good, root, tmp_path, capsys) -> None:
    make, needle = PROBES[name]
    plant(hub, "case-33", make(good["case-33"]))
    probe(capsys, tmp_path, root, ["case", "33"], needle)


def test_folder_holding_another_cases_entry_is_refused(hub, good, root, tmp_path, capsys) -> None:
    plant(hub, "case-3", edited(good["case-33"]))
    probe(capsys, tmp_path, root, ["case", "3"], "entry case-3 holds the entry of case '33'")


def test_refused_update_keeps_the_installed_entry(hub, good, root, tmp_path, capsys) -> None:
    honest = edited(good["case-33"])
    plant(hub, "case-33", honest)
    code, out, err = pull(capsys, root, "case", "33")
    assert code == 0, err
    assert "accuracy 1.0000 on 256 inputs vs the compiled program (validation.json: 1.0000)" in out
    installed = tree(root / "entries")
    assert {k.split("/")[1]: v for k, v in installed.items()} == honest
    plant(hub, "case-33", PROBES["NaN weights"][0](good["case-33"]))
    probe(capsys, tmp_path, root, ["case", "33"], "hold NaN or infinite values")
    assert tree(root / "entries") == installed


def test_pull_all_installs_nothing_unless_every_entry_passes(hub, good, root, tmp_path, capsys) -> None:
    plant(hub, "case-3", edited(good["case-3"]))
    plant(hub, "case-33", PROBES["NaN weights"][0](good["case-33"]))
    plant(hub, "case-x-y", edited(good["case-33"], case_json=_set("id", "x:y")))
    probe(capsys, tmp_path, root, ["--all"], "[entry 2 of 3; nothing was installed]")
    assert not (root / "entries").exists()
    plant(hub, "case-33", edited(good["case-33"]))
    code, out, err = pull(capsys, root, "--all")
    assert code == 0, err
    assert sorted(p.name for p in (root / "entries").iterdir()) == ["case-3", "case-33", "case-x-y"]
    assert "accuracy not checked: a data-only case has no program" in out


def test_pull_all_says_which_entries_an_install_failure_left(hub, good, root, tmp_path, capsys, monkeypatch) -> None:
    import zoo.pull

    plant(hub, "case-3", edited(good["case-3"]))
    plant(hub, "case-33", edited(good["case-33"]))
    real, calls = zoo.pull.install_files, []

    def full_disk(files, dest):
        calls.append(dest.name)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(files, dest)

    monkeypatch.setattr(zoo.pull, "install_files", full_disk)
    code, _, err = pull(capsys, root, "--all")
    assert_refused(code, err, "installing case-33 failed (")
    assert "installed: case-3; not installed: case-33" in err
    assert sorted(p.name for p in (root / "entries").iterdir()) == ["case-3"]


# ---------------------------------------------------------------------------------------------
# revisions and server answers that would become paths


@pytest.mark.parametrize("revision", ["../../../../REV-ESCAPE", "main/../../x", "..", "a/b", "refs/pr/1/../..",
                                      "x.lock", "-rf"])
def test_unsafe_revision_is_refused_before_any_request(revision, hub, good, root, tmp_path, capsys) -> None:
    plant(hub, "case-33", edited(good["case-33"]))
    n = len(hub.requests)
    probe(capsys, tmp_path, root, ["case", "33", f"--revision={revision}"], "invalid revision")
    assert len(hub.requests) == n
    import zoo
    from zoo.errors import ZooError

    with pytest.raises(ZooError, match="invalid revision"):
        zoo.load("case-33", repo_id=REPO, revision=revision, source="hub")
    assert outside(tmp_path) == []


@pytest.mark.parametrize("sha", ["../../../SHA-ESCAPE", "ABCDEF" + "0" * 34, "0" * 39, "g" * 40])
def test_server_commit_that_is_not_40_hex_is_refused(sha, hub, good, root, tmp_path, capsys) -> None:
    plant(hub, "case-33", edited(good["case-33"]))
    hub.info_sha = sha
    probe(capsys, tmp_path, root, ["case", "33"], "not 40 hex characters; refused")
    assert not any("resolve" in path for _, path in hub.requests)  # nothing was downloaded


@pytest.mark.parametrize("header,value", [
    ("ETag", '"../../../../ETAG-ESCAPE"'),
    ("X-Repo-Commit", "../../../../COMMIT-ESCAPE"),
    ("X-Linked-Etag", '"../../../../LINKED-ESCAPE"'),
])
def test_download_answer_that_would_become_a_path_is_refused(header, value, hub, good, root, tmp_path,
                                                              capsys) -> None:
    plant(hub, "case-33", edited(good["case-33"]))
    hub.resolve_headers = {header: value}
    probe(capsys, tmp_path, root, ["case", "33"], f"answered a download with {header} " if header != "X-Repo-Commit"
          else "answered a download with commit")
    assert not list((tmp_path / "hf-home").rglob("*ESCAPE*"))


# ---------------------------------------------------------------------------------------------
# publisher code never runs


def test_case_id_naming_a_module_never_imports_it(hub, good, root, tmp_path, capsys, monkeypatch) -> None:
    """An entry whose case id names an importable module that writes a marker: the module is never
    imported, by pull, load, the case, its sampler or evaluation; the case is data-only."""
    marker = tmp_path / "MARKER-IMPORTED"
    payload = tmp_path / "payload"
    payload.mkdir()
    (payload / "zoo_probe_payload.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        f"def run():\n    open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(payload))
    plant(hub, "case-zoo_probe_payload-run", edited(good["case-33"], case_json=_set("id", "zoo_probe_payload:run")))
    code, out, err = pull(capsys, root, "case", "zoo_probe_payload:run")
    assert code == 0, err
    assert "accuracy not checked: a data-only case has no program" in out

    import zoo
    from rasp_programs.case import CaseError

    entry = zoo.load("case-zoo_probe_payload-run", root=root)
    assert entry.case.id == "zoo_probe_payload:run" and len(entry.case.sample(4, seed=0)) == 4
    with pytest.raises(CaseError, match="holds no program"):
        entry.case.program
    with pytest.raises(CaseError, match="holds no program"):
        zoo.evaluate(entry, ["random"], root=root)
    assert not marker.exists()
    import sys

    assert "zoo_probe_payload" not in sys.modules


def test_case_id_sys_exit_and_os_abort_are_data(hub, good, root, tmp_path, capsys) -> None:
    """`sys:exit` / `os:abort` as case ids of correctly named folders: pulled as data-only cases;
    loading them and their case never calls anything."""
    for case_id in ("sys:exit", "os:abort"):
        folder = "case-" + case_id.replace(":", "-")
        plant(hub, folder, edited(good["case-33"], case_json=_set("id", case_id)))
        code, _, err = pull(capsys, root, "case", case_id)
        assert code == 0, err
        import zoo

        entry = zoo.load(folder, root=root)  # a SystemExit here would fail the test
        assert entry.case.sample(2, seed=0)


def test_remote_code_config_installed_by_an_older_zoo_cannot_run(hub, good, root, tmp_path, monkeypatch) -> None:
    """An entry already in the zoo root (written by an older version, bypassing pull) whose config
    asks for a remote-code tokenizer that the hub serves: loading refuses before any model is
    built, and the tokenizer's code never runs."""
    marker = tmp_path / "MARKER-TOKENIZER"
    hub.put_files("zoo-test/evil-tokenizer", {
        "tokenizer_config.json": json.dumps({"auto_map": {"AutoTokenizer": ["tokenization_evil.EvilTokenizer",
                                                                            None]}}).encode(),
        "tokenization_evil.py": f"open({str(marker)!r}, 'w').close()\n".encode(),
    })
    from zoo.artifact import ArtifactError, install_files

    bad = PROBES["config runs remote code"][0](good["case-33"])
    install_files(bad, root / "entries" / "case-33")
    import zoo

    with pytest.raises(ArtifactError, match="'tokenizer_name', 'trust_remote_code' not allowed"):
        zoo.load("case-33", root=root)
    code = main(["eval", "case", "33", "--method", "random", "--root", str(root), "--n", "4",
                 "--stability-seeds", "1", "--permutations", "1"])
    assert code == 2
    assert not marker.exists()
    assert not any("evil-tokenizer" in path for _, path in hub.requests)
