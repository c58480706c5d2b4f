"""Only eval.patching.hooks knows hook points: no other file names TransformerLens 3.x's per-head result or
split q/k/v-input hooks, which transformer-lens 4.x's TransformerBridge does not have.

Allowed: eval/patching/hooks.py (it explains why it does not use them), tests/test_eval/test_hooks.py (it compares
the adapter with them under 3.x), this file, and siit/ (its own pure-torch model, whose docstrings
say which 3.x hook each activation slot equals; it never hooks TransformerLens), and
tests/benchmarks/peer_acdc.py (it reads the ACDC reference implementation's own edge names, in that
peer's venv on its own TransformerLens 1.x, never the zoo's models). OTHERS lists files
that still name them and are not yet moved onto eval.patching.hooks; the test fails on any new one.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMES = re.compile(r"hook_result|hook_[qkv]_input")
ALLOWED = {"eval/patching/hooks.py", "tests/test_eval/test_hooks.py", "tests/test_eval/test_hook_names.py",
           "tests/benchmarks/peer_acdc.py"}
ALLOWED_DIRS = ("siit/",)
OTHERS: dict[str, str] = {}
"""Files that still name the hooks and are not yet moved onto eval.patching.hooks (none today)."""
SKIP_DIRS = {"__pycache__", "node_modules", "venv", "build", "dist"}
SUFFIXES = {".py", ".md", ".toml", ".json", ".cfg", ".txt", ".yaml", ".yml"}


def _project_files() -> list[Path]:
    out = []
    for folder, dirs, names in os.walk(ROOT):
        # pruned in place: virtual environments and build output are not the project's
        dirs[:] = [d for d in dirs if not (d.startswith(".") or d in SKIP_DIRS or d.endswith(".egg-info"))]
        out += [Path(folder) / n for n in names if Path(n).suffix in SUFFIXES]
    return out


def test_only_eval_hooks_names_3x_only_hook_points() -> None:
    files = _project_files()
    assert any(p.relative_to(ROOT).as_posix() == "eval/patching/hooks.py" for p in files)  # the scan sees the code
    naming = {p.relative_to(ROOT).as_posix() for p in files if NAMES.search(p.read_text(errors="replace"))}
    assert "eval/patching/hooks.py" in naming  # the pattern finds what it is meant to find
    offenders = sorted(n for n in naming if n not in ALLOWED and n not in OTHERS and not n.startswith(ALLOWED_DIRS))
    assert not offenders, f"name 3.x-only hook points outside eval.patching.hooks: {offenders} (use eval.patching.hooks' Adapter)"
