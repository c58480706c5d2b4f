"""Shared fixtures: an isolated zoo root per test, a compile cache shared by a test session,
one torch thread per xdist worker (the suite runs with -n 2 on 2 cores)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass


@pytest.fixture(autouse=True)
def _isolated_zoo_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test reads or writes the user's real zoo root or compiled-case cache."""
    home = tmp_path / "zoo-home"
    monkeypatch.setenv("ZOO_HOME", str(home))
    monkeypatch.setenv("ZOO_COMPILE_CACHE", str(tmp_path / "user-compiled"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return home


@pytest.fixture(scope="session")
def compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Compile cache shared by all xdist workers of one run (their basetemps share a parent)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path = shared / "zoo-compiled"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session")
def compiled(compile_cache: Path):
    """compiled(case_id) -> CompiledCase; each case is compiled once per run, under a file lock
    so that two workers wait for each other instead of compiling the same case twice."""
    from rasp_programs.lookup import get_case
    from rasp_programs.compile import compile_case

    memo: dict[str, object] = {}

    def get(case_id: str):
        if case_id not in memo:
            with open(compile_cache / f".lock-{case_id.replace(':', '-')}", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                memo[case_id] = compile_case(get_case(case_id), compile_cache)
        return memo[case_id]

    return get


@pytest.fixture
def compiled_root(compiled, compile_cache: Path, tmp_path: Path):
    """compiled_root(case_id) -> a zoo root (tmp_path/root) whose compiled/ is the session's compile
    cache, with that case compiled: what CLI tests run `--model compiled` against."""
    def make(case_id: str) -> Path:
        compiled(case_id)
        root = tmp_path / "root"
        if not root.exists():
            root.mkdir()
            (root / "compiled").symlink_to(compile_cache)
        return root

    return make


@pytest.fixture
def zoo_cli(capsys: pytest.CaptureFixture[str]):
    """zoo_cli(argv) -> (exit code, stdout, stderr) of `zoo ARGV`, run in this process."""
    def run(argv: list[str]) -> tuple[int, str, str]:
        from zoo.cli import main

        code = main(argv)
        out, err = capsys.readouterr()
        return code, out, err

    return run
