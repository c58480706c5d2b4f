"""`zoo train --all / --catalogue / --cases / --generated` (zoo.train_many): many entries in worker processes or
Ray tasks; entries that met their criterion are skipped; a failed case is a row of the summary, does
not stop the others and makes the exit code 1; one-line errors for bad input.

Budget: one epoch of batch 64, no distractors, criterion 0.995. With seed 0 case 8 meets it at
step 25 and case 3 does not (accuracy ~0.46 after 32 steps): one passing and one failing case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zoo.cli import main

TINY = ["--epochs", "1", "--batch-size", "64", "--no-distractors", "--criterion", "0.995"]


def _run(argv: list[str], capsys) -> tuple[int, dict]:
    code = main(["train", *argv, *TINY, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def _training(root: Path, name: str) -> dict:
    return json.loads((root / "entries" / name / "training.json").read_text())


@pytest.mark.parametrize("argv,needle", [
    (["--all", "case", "33"], "not both"),
    (["--cases", "8,999"], "unknown case '999'"),
    (["--cases", " , "], "no case ids"),
    (["--all", "--cases", "3"], "--all and --cases"),
    (["--all", "--catalogue"], "--all and --catalogue"),
    (["--generated", "0"], "--generated must be >= 1"),
    (["--all", "--out", "x"], "--out"),
    (["--all", "--jobs", "0"], "--jobs"),
    (["--all", "--ray", "not an address"], "--ray"),
    (["--all", "--ray", "127.0.0.1:1"], "no Ray head"),
    (["case", "33", "--jobs", "2"], "--jobs goes with"),
    ([], "needs `case <id>`"),
])
def test_bad_input_exits_2_with_one_line(argv, needle, tmp_path: Path, capsys) -> None:
    root = tmp_path / "root"
    assert main(["train", *argv, "--root", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("zoo: error:") and needle in err, err
    assert not root.exists()


def test_cases_write_every_entry_and_a_rerun_trains_only_what_is_missing(tmp_path: Path, capsys) -> None:
    root = tmp_path / "root"
    code, summary = _run(["--cases", "8,33", "--jobs", "2", "--root", str(root)], capsys)
    assert code == 0, summary
    assert [r["case"] for r in summary["rows"]] == ["8", "33"]
    assert all(r["status"] == "met" and r["met_criterion"] and r["steps"] > 0 for r in summary["rows"])
    for name in ("case-8", "case-33"):
        assert _training(root, name)["met_criterion"] is True
    assert json.loads((root / "train-all-summary.json").read_text()) == summary

    # a run killed after case 8: case 33's entry is missing; the rerun trains it alone
    import shutil

    shutil.rmtree(root / "entries" / "case-33")
    before = (root / "entries" / "case-8" / "model.safetensors").stat().st_mtime_ns
    code, again = _run(["--cases", "8,33", "--root", str(root)], capsys)
    assert code == 0
    rows = {r["case"]: r for r in again["rows"]}
    assert rows["8"]["status"] == "skipped" and rows["8"]["steps"] == summary["rows"][0]["steps"]
    assert rows["33"]["status"] == "met"
    assert again["trained"] == 1 and again["skipped"] == 1 and again["failed"] == []
    assert (root / "entries" / "case-8" / "model.safetensors").stat().st_mtime_ns == before
    assert _training(root, "case-33")["met_criterion"] is True


def test_training_options_reach_the_workers(tmp_path: Path, capsys) -> None:
    """--n-train (like --epochs and --batch-size) is the workers' too: one epoch of 128 sequences in
    batches of 64 is 2 steps, recorded in the entry."""
    root = tmp_path / "root"
    code, summary = _run(["--cases", "3", "--n-train", "128", "--min-d-head", "8", "--strict-edges", "--jobs", "1",
                          "--root", str(root)], capsys)
    assert code == 1 and summary["rows"][0]["steps"] == 2
    training = _training(root, "case-3")
    assert training["config"]["n_train"] == 128
    assert training["arch"]["overrides"]["min_d_head"] == 8 and training["arch"]["low_level_config"]["d_head"] == 8
    # the entry records the command that reproduces it, options included, not a bare `zoo train case 3`
    command = training["command"]
    assert command[:4] == ["zoo", "train", "case", "3"]
    assert {tuple(command[i:i + 2]) for i in range(4, len(command) - 1)} >= {
        ("--n-train", "128"), ("--min-d-head", "8"), ("--epochs", "1"), ("--batch-size", "64"), ("--criterion", "0.995")}
    assert "--no-distractors" in command and "--strict-edges" in command
    assert training["config"]["strict_edges"] is True


def test_a_cases_own_defaults_reach_the_workers(tmp_path: Path, capsys) -> None:
    """Case.strict_edges is the case's default in a many-case run as in `zoo train case ID`, and an
    explicit --no-strict-edges overrides it (case 13 trains edge-exact by default, case 33 does not)."""
    root = tmp_path / "root"
    code, summary = _run(["--cases", "33,13", "--n-train", "128", "--jobs", "1", "--root", str(root)], capsys)
    assert {r["case"] for r in summary["rows"]} == {"33", "13"}
    assert _training(root, "case-13")["config"]["strict_edges"] is True
    assert _training(root, "case-33")["config"]["strict_edges"] is False
    other = tmp_path / "other"
    _run(["--cases", "13", "--n-train", "128", "--no-strict-edges", "--jobs", "1", "--root", str(other)], capsys)
    assert _training(other, "case-13")["config"]["strict_edges"] is False
    # and its recorded command says so: a bare `zoo train case 13` would train edge-exact
    assert "--no-strict-edges" in _training(other, "case-13")["command"]


def test_a_failing_case_leaves_the_others_written_and_exits_1_with_its_row(tmp_path: Path, capsys,
                                                                            monkeypatch) -> None:
    root = tmp_path / "root"
    code = main(["train", "--cases", "8,3", *TINY, "--jobs", "2", "--root", str(root)])
    captured = capsys.readouterr()
    assert code == 1
    table = captured.out
    assert "not met" in table and "failed (3)" in table
    row3 = next(line for line in table.splitlines() if line.split()[:1] == ["3"])
    assert "not met" in row3 and "0.4" in row3  # its numbers, not just its name
    summary = json.loads((root / "train-all-summary.json").read_text())
    rows = {r["case"]: r for r in summary["rows"]}
    assert summary["failed"] == ["3"]
    assert rows["8"]["met_criterion"] is True
    assert rows["3"]["met_criterion"] is False and rows["3"]["accuracy"] < 0.995 and rows["3"]["steps"] == 32
    assert _training(root, "case-8")["met_criterion"] is True
    assert _training(root, "case-3")["met_criterion"] is False  # written, marked as failed

    # `zoo push --all` publishes the good entries only: not case-3, nor a `case-8.failed/`
    import shutil

    from hub_server import hub_environment

    shutil.copytree(root / "entries" / "case-3", root / "entries" / "case-8.failed")
    server = hub_environment(monkeypatch, tmp_path)
    try:
        code = main(["push", "--all", "--repo-id", "zoo-test/zoo", "--root", str(root), "--json"])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        pushed = json.loads(captured.out)
        assert pushed["entries"] == ["case-8"] and pushed["left_out"] == ["case-3"]
        assert "left out case-3" in captured.err
        assert not any(name.startswith(("case-3/", "case-8.failed/")) for name in server.files("zoo-test/zoo"))
    finally:
        server.stop()


def test_jobs_never_change_the_weights(tmp_path: Path, capsys) -> None:
    """`--cases 8 --jobs 1` gives its worker the thread count `zoo train case 8` uses (one unless
    --threads), not cores/jobs: the same weights, and training.json records the count."""
    many, one = tmp_path / "many", tmp_path / "one"
    code, _ = _run(["--cases", "8", "--jobs", "1", "--root", str(many)], capsys)
    assert code == 0
    assert main(["train", "case", "8", *TINY, "--json", "--root", str(one)]) == 0
    capsys.readouterr()
    weights = [(root / "entries" / "case-8" / "model.safetensors").read_bytes() for root in (many, one)]
    assert weights[0] == weights[1]
    assert _training(many, "case-8")["compute"]["torch_threads"] == 1 == _training(one, "case-8")["compute"]["torch_threads"]


def _dies_on_case_4(case_id: str, options):
    """A train_many job (module level: workers import it) whose process dies outright on case 4."""
    import os

    from zoo.train_summary import summary_row

    if case_id == "4":
        os._exit(3)
    return summary_row(case_id, "met", met=True), None


def test_a_worker_that_dies_makes_error_rows_not_a_traceback(tmp_path: Path, capsys) -> None:
    """A worker process that dies (a segfault, the OOM killer) breaks the process pool: its case and
    every case not yet started are error rows of the summary, the run exits 1, and the cases before
    it keep their rows."""
    from siit.config import ArchConfig, TrainConfig
    from zoo.train_entry import TrainOptions
    from zoo.train_many import train_many
    from zoo.train_workers import Engine

    options = TrainOptions(config=TrainConfig(), arch=ArchConfig(), root=str(tmp_path / "root"))
    summary = train_many(["3", "4", "8"], options, Engine(jobs=1, quiet=True), job=_dies_on_case_4,
                         met_criterion=lambda path: False)
    assert summary["failed"] == ["4", "8"]
    assert [(r["case"], r["status"]) for r in summary["rows"]] == [("3", "met"), ("4", "error"), ("8", "error")]
    assert all("worker died" in r["error"] for r in summary["rows"][1:])


def test_on_a_local_ray_instance(tmp_path: Path, capsys) -> None:
    ray = pytest.importorskip("ray", reason='Ray is not installed (pip install -e ".[ray]")')
    root = tmp_path / "root"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        code, summary = _run(["--cases", "8,3", "--ray", "auto", "--root", str(root)], capsys)
    finally:
        ray.shutdown()
    assert code == 1 and summary["engine"] == "ray auto"
    rows = {r["case"]: r for r in summary["rows"]}
    assert rows["8"]["status"] == "met" and rows["3"]["status"] == "not met" and summary["failed"] == ["3"]
    assert _training(root, "case-8")["met_criterion"] is True
    assert _training(root, "case-3")["met_criterion"] is False
    # rerun: case 8 met its criterion and is skipped without starting Ray
    code, again = _run(["--cases", "8", "--ray", "auto", "--root", str(root)], capsys)
    assert code == 0 and again["rows"][0]["status"] == "skipped" and again["trained"] == 0


def _children(pid: int) -> list[int]:
    """The processes whose parent is pid (Linux /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    """Running, not exited (a zombie waiting for its reaper counts as exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for(condition, timeout: float, what: str) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from Linux /proc")
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_a_killed_run_leaves_no_worker_training_and_keeps_its_checkpoint(sig: str, tmp_path: Path) -> None:
    """`kill` (SIGTERM: a scheduler's time limit) is handled as Ctrl-C: the workers stop at a step,
    keep their checkpoint and the run says how to resume; a parent that dies outright (SIGKILL)
    leaves no orphan training on for hours either (each worker watches its parent). The case queued
    behind the running one is never started: the pool used to hand its workers cases in advance,
    which they trained to the end after the interrupt while the parent waited."""
    import signal
    import subprocess
    import sys

    root = tmp_path / "root"
    # case 3 does not meet 0.995 at its first validation (step 25; TINY's docstring), so it is still training
    argv = [sys.executable, "-m", "zoo.cli", "train", "--cases", "3,4", "--epochs", "50", "--batch-size", "64",
            "--no-distractors", "--criterion", "0.995", "--jobs", "1", "--threads", "1", "--root", str(root)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    state = root / "entries" / ".case-3.checkpoint" / "state.json"
    try:
        _wait_for(lambda: state.is_file() or proc.poll() is not None, 300, "the first checkpoint")
        assert proc.poll() is None, proc.communicate()
        workers = [pid for pid in _children(proc.pid) if "spawn_main" in Path(f"/proc/{pid}/cmdline").read_text()]
        assert workers and all(_alive(pid) for pid in workers)
        proc.send_signal(getattr(signal, sig))
        _, err = proc.communicate(timeout=120)
        _wait_for(lambda: not any(_alive(pid) for pid in workers), 60, "the workers to exit")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert json.loads(state.read_text())["step"] >= 25  # a checkpoint to --resume from
    assert not (root / "entries" / "case-3").exists()
    assert not (root / "compiled" / "case-4").exists()  # case 4 was not even compiled
    if sig == "SIGTERM":
        assert proc.returncode == 130
        assert "--resume" in err and "zoo: interrupted" in err, err
