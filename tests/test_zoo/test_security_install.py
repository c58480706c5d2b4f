"""Writing and reading entries: installs are atomic for a concurrent reader (never "no entry", never
a mixture), `zoo.load` raises ArtifactError on malformed content (never a raw TypeError / KeyError /
RecursionError), NaN is never written, and a run that misses its criterion never replaces an
entry that met it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch
from hub_server import build_entry
from test_security_pull import _set, edited, weights

import zoo
from zoo.artifact import ArtifactError, install_files, read_entry, write_entry


@pytest.fixture(scope="module")
def versions(compiled, tmp_path_factory) -> dict[str, dict[str, bytes]]:
    """Two valid versions of entry case-33 whose every file differs (A and B)."""
    files = build_entry(compiled("33"), tmp_path_factory.mktemp("v") / "entries")
    good = {p.name: p.read_bytes() for p in files.iterdir()}
    out = {}
    for tag, shift in (("A", 0.0), ("B", 0.25)):
        out[tag] = edited(good, training_json=_set("probe_version", tag), validation_json=_set("probe_version", tag),
                          config_json=_set("seed", 1 if tag == "A" else 2), circuit_json=_set("labels", {"v": tag}),
                          case_json=_set("notes", tag),
                          model_safetensors=weights(good, lambda t: t["unembed.b_U"].add_(shift)))
    return out


WRITER = """
import sys, json, time
from pathlib import Path
from zoo.artifact import install_files
versions = {k: {n: bytes.fromhex(v) for n, v in d.items()} for k, d in json.load(open(sys.argv[1])).items()}
dest, seconds = Path(sys.argv[2]), float(sys.argv[3])
end, n = time.monotonic() + seconds, 0
while time.monotonic() < end:
    install_files(versions["AB"[n % 2]], dest)
    n += 1
print(n)
"""


def test_concurrent_reader_always_sees_one_whole_entry(versions, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("ZOO_REPO_ID", raising=False)  # falling through to the Hub would raise
    root = tmp_path / "root"
    dest = root / "entries" / "case-33"
    install_files(versions["A"], dest)
    spec = tmp_path / "versions.json"
    spec.write_text(json.dumps({k: {n: d.hex() for n, d in v.items()} for k, v in versions.items()}))
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(spec), str(dest), "4"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    seen = {"A": 0, "B": 0}
    missing = 0
    try:
        while writer.poll() is None:
            # a tight probe of the name: a swap done as two renames leaves moments without it
            missing += sum(not dest.is_dir() for _ in range(2000))
            entry = zoo.load("case-33", root=root)  # never "not in the local root", never a mixture
            tag = entry.training["probe_version"]
            assert entry.validation["probe_version"] == tag and entry.case_json["notes"] == tag
            assert entry.circuit_json["labels"] == {"v": tag} and entry.config["seed"] == (1 if tag == "A" else 2)
            assert torch.equal(entry.state_dict["unembed.b_U"], read_b_u(versions[tag]))
            seen[tag] += 1
    finally:
        out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err
    assert missing == 0
    assert int(out) >= 10 and seen["A"] > 0 and seen["B"] > 0, (out, seen)
    assert sorted(p.name for p in dest.parent.iterdir()) == ["case-33"]  # no leftovers


def test_a_read_that_spans_many_installs_waits_and_returns_one_whole_entry(versions, tmp_path, monkeypatch) -> None:
    """On a loaded machine one read can overlap several back-to-back installs: the read starts over
    (a little later each time) until it gets a whole version, rather than giving up after a few
    quick retries (`.ci/run` saw "kept changing while it was read" with five)."""
    import zoo.artifact as artifact

    dest = tmp_path / "root" / "entries" / "case-33"
    install_files(versions["A"], dest)
    real, calls = artifact._read_once, []

    def racing(entry_dir, label):
        files = real(entry_dir, label)
        if entry_dir == dest:  # not install_files' own check of what it wrote
            calls.append(1)
            if len(calls) <= 8:  # an install lands during each of the first eight reads: B, A, B, ...
                install_files(versions["B" if len(calls) % 2 else "A"], dest)
        return files

    monkeypatch.setattr(artifact, "_read_once", racing)
    entry = read_entry(dest)
    assert len(calls) == 9
    assert entry.data == versions["A"] | {"manifest.json": entry.data["manifest.json"]}  # the eighth install's

    # an entry replaced during every read: one line once the patience is spent, not a hang
    calls.clear()
    monkeypatch.setattr(artifact, "_READ_PATIENCE_S", 0.05)
    monkeypatch.setattr(artifact, "_read_once", lambda d, label: (calls.clear(), racing(d, label))[1])
    with pytest.raises(ArtifactError, match="kept changing while it was read"):
        read_entry(dest)


def read_b_u(files: dict[str, bytes]):
    from safetensors.torch import load

    return load(files["model.safetensors"])["unembed.b_U"]


@pytest.mark.parametrize("change,needle", [
    ({"config_json": _set("n_layers", "2")}, "n_layers must be an integer"),
    ({"circuit_json": _set("edges", [[1, 2]])}, "edges must be a list of [src, dst] name pairs"),
    ({"circuit_json": _set("nodes", ["a0.h0\n"])}, "node names may hold only"),
    ({"circuit_json": _set("correspondence", {"x": "a0.h0"})}, "correspondence must map"),
    ({"case_json": lambda c: c.pop("encoding")}, "encoding is missing"),
    ({"case_json": _set("encoding", {"input_vocab": 3})}, "input_vocab must be a list"),
    ({"case_json": _set("id", 33)}, "id must be a string"),
    ({"case_json": _set("max_seq_len", 10**9)}, "max_seq_len must be an integer"),
    ({"validation_json": _set("metrics", {"accuracy": "high"})}, "metrics.accuracy must be a number"),
    ({"training_json": _set("met_criterion", "yes")}, "met_criterion must be true or false"),
    ({"training_json": b"[" * 100000 + b"]" * 100000}, "not a JSON object"),
    ({"training_json": b'{"x":' + b"[" * 100000 + b"]" * 100000 + b"}"}, "nested too deeply"),
    ({"config_json": b'{"n_layers": 1e999}'}, "number out of range"),
    ({"manifest_json": b'{"format": "zoo/1", "files": {"config.json": 5}}'}, "has no file table"),
    ({"nan_weights": True}, "hold NaN or infinite values"),
    ({"case_json": b'{"id": "33", "notes": "\\ud800"}'}, "not Unicode text (a lone surrogate)"),
    ({"case_json": b'{"\\udfff": 1}'}, "key that is not Unicode text"),
    ({"circuit_json": _set("labels", {f"n{i}": "x" * 40 for i in range(400_000)})}, "circuit.json is larger than 16 MiB"),
    ({"dotfile": True}, "unexpected files ['.hidden']"),
])
def test_load_raises_the_documented_error_on_malformed_content(change, needle, versions, tmp_path) -> None:
    if "nan_weights" in change:  # zoo eval once ran on such weights and reported null metrics
        change = {"model_safetensors": weights(versions["A"], lambda t: t["embed.W_E"].fill_(float("nan")))}
    files = edited(versions["A"], **{k: v for k, v in change.items() if k not in ("manifest_json", "dotfile")})
    if "dotfile" in change:  # ignored once: an entry folder holds nothing unlisted, hidden or not
        files[".hidden"] = b"x"
    if "manifest_json" in change:
        files["manifest.json"] = change["manifest_json"]
    dest = tmp_path / "root" / "entries" / "case-33"
    dest.mkdir(parents=True)
    for name, data in files.items():  # as if copied by hand: no install-time checks
        (dest / name).write_bytes(data)
    with pytest.raises(ArtifactError) as info:
        zoo.load("case-33", root=tmp_path / "root")
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_write_entry_refuses_nan_and_changes_nothing(versions, tmp_path) -> None:
    dest = tmp_path / "entries" / "case-33"
    install_files(versions["A"], dest)
    before = {p.name: p.read_bytes() for p in dest.iterdir()}
    entry = zoo.load("case-33", root=tmp_path)
    json_files = {"config.json": entry.config, "circuit.json": entry.circuit_json, "case.json": entry.case_json,
                  "training.json": {"final_metrics": {"siia_min": float("nan")}}}
    with pytest.raises(ArtifactError, match=r"training.json holds a NaN or infinite number at final_metrics.siia_min"):
        write_entry(dest, state_dict=entry.state_dict, json_files=json_files, readme="x")
    bad = dict(entry.state_dict, **{"embed.W_E": entry.state_dict["embed.W_E"] * float("inf")})
    json_files["training.json"] = {}
    with pytest.raises(ArtifactError, match="hold NaN or infinite values"):
        write_entry(dest, state_dict=bad, json_files=json_files, readme="x")
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before
    assert sorted(p.name for p in dest.parent.iterdir()) == ["case-33"]
    assert read_entry(dest).json("training.json")["probe_version"] == "A"


def test_install_over_a_symlinked_entry_leaves_no_stray_link(versions, tmp_path) -> None:
    elsewhere = tmp_path / "elsewhere" / "case-33"
    install_files(versions["A"], elsewhere)
    dest = tmp_path / "entries" / "case-33"
    dest.parent.mkdir()
    dest.symlink_to(elsewhere, target_is_directory=True)
    install_files(versions["B"], dest)
    assert not dest.is_symlink() and read_entry(dest).data == versions["B"]
    assert [p.name for p in dest.parent.iterdir()] == ["case-33"]  # no `.case-33.tmp.*` link left
    assert read_entry(elsewhere).data == versions["A"]  # the link's target is not touched


def test_failed_name_is_not_an_entry_name() -> None:
    from zoo.artifact import check_entry_name

    with pytest.raises(ArtifactError, match="not ending in .failed"):
        check_entry_name("case-33.failed")
    assert check_entry_name("case-mypkg.failedcases-make") == "case-mypkg.failedcases-make"


def test_a_run_that_misses_its_criterion_never_replaces_one_that_met_it(compiled, tmp_path, capsys) -> None:
    import dataclasses

    from siit.config import TrainConfig
    from siit.trainer import train
    from siit.validation import validate_model
    from zoo.train_entry import write_entry_files as _write

    cc = compiled("33")
    result = train(cc, TrainConfig(n_train=64, n_val=32, batch_size=32, epochs=1, eval_every=2))
    assert not result.met_criterion
    validation = validate_model(result.model, result.evaluator)
    good = tmp_path / "entries" / "case-33"
    build_entry(cc, tmp_path / "entries")
    install_files(edited({p.name: p.read_bytes() for p in good.iterdir()},
                         training_json=lambda t: t.update(met_criterion=True)), good)
    kept = {p.name: p.read_bytes() for p in good.iterdir()}

    written = _write(good, cc, result=result, validation=validation, command=None)
    assert written == tmp_path / "entries" / "case-33.failed"
    assert {p.name: p.read_bytes() for p in good.iterdir()} == kept
    assert read_entry(written, name="case-33").json("training.json")["met_criterion"] is False
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "kept the entry in" in err[0] and "case-33.failed" in err[0]
    assert sorted(p.name for p in good.parent.iterdir()) == ["case-33", "case-33.failed"]

    # an entry that did not meet its criterion is replaced; a run that met it replaces any entry
    install_files(edited(kept, training_json=lambda t: t.update(met_criterion=False)), good)
    assert _write(good, cc, result=result, validation=validation, command=None) == good
    assert read_entry(good).json("training.json")["met_criterion"] is False
    met = dataclasses.replace(result, met_criterion=True)
    install_files(kept, good)
    assert _write(good, cc, result=met, validation=validation, command=None) == good
    assert read_entry(good).json("training.json")["met_criterion"] is True

    # a good entry without training.json (it loads and pulls: a pulled or hand-made entry) is kept too
    shutil.rmtree(good.parent / "case-33.failed")
    pulled = {n: d for n, d in kept.items() if n not in ("training.json", "manifest.json")}
    install_files(pulled, good)
    before = {p.name: p.read_bytes() for p in good.iterdir()}
    assert _write(good, cc, result=result, validation=validation, command=None) == good.parent / "case-33.failed"
    assert {p.name: p.read_bytes() for p in good.iterdir()} == before
