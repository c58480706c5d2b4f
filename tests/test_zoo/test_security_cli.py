"""Bad input on the command line: NaN / inf options, and case factories that exit, abort, raise or
return something else. One line, exit 2, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from zoo.cli import main


def exits():
    raise SystemExit(0)


def interrupts_generator():
    raise GeneratorExit


def returns_a_dict():
    return {"id": "33"}


@pytest.mark.parametrize("argv,needle", [
    (["--lr", "inf"], "--lr must be a finite number, got inf"),
    (["--lr", "nan"], "--lr must be a finite number, got nan"),
    (["--strict-weight", "nan"], "--strict-weight must be a finite number, got nan"),
    (["--strict-weight=-inf"], "--strict-weight must be a finite number"),
    (["--criterion", "inf"], "--criterion must be a finite number"),
])
def test_nan_and_inf_options_are_bad_input(argv, needle, tmp_path: Path, capsys) -> None:
    root = tmp_path / "root"
    code = main(["train", "case", "33", *argv, "--root", str(root)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("zoo: error: ") and needle in err[0], err
    assert not root.exists()


@pytest.mark.parametrize("spec,needle", [
    ("sys:exit", "exit is a built-in or a class, not a Python function"),
    ("os:abort", "abort is a built-in or a class"),
    ("builtins:object", "object is a built-in or a class"),
    ("test_security_cli:exits", "exits() raised SystemExit"),
    ("test_security_cli:interrupts_generator", "interrupts_generator() raised GeneratorExit"),
    ("test_security_cli:returns_a_dict", "returned dict, not a Case"),
    ("zoo_probe_exits_on_import:make", "importing 'zoo_probe_exits_on_import' raised SystemExit"),
    ("../etc:passwd", "expected package.module:function"),
    (".relative:make", "expected package.module:function"),
])
def test_case_factories_that_exit_or_misbehave_are_one_line(spec, needle, tmp_path, capsys, monkeypatch) -> None:
    (tmp_path / "zoo_probe_exits_on_import.py").write_text("raise SystemExit(0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    root = tmp_path / "root"
    for verb in ("train", "show"):
        code = main([verb, "case", spec, "--root", str(root)])  # a SystemExit would escape main
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and err[0].startswith("zoo: error: ") and needle in err[0], err
    assert not root.exists()


def test_os_abort_does_not_kill_the_cli(tmp_path) -> None:
    """In a separate process, since calling os.abort would end this one (rc 134)."""
    env = {**os.environ, "ZOO_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-m", "zoo.cli", "train", "case", "os:abort"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "zoo: error: case 'os:abort': abort is a built-in or a class, not a Python function"]
    assert not (tmp_path / "home").exists()
