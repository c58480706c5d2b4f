"""`python -m tests.benchmarks [NAME [ARGS...]]`: run the benchmark tests/benchmarks/bench_NAME.py as
its own script would run (`python tests/benchmarks/bench_NAME.py ARGS`), and record what it printed
in one JSON shape, on stdout and in tests/benchmarks/results/NAME-<UTC time>.json:

    {"benchmark": NAME, "command": "python -m tests.benchmarks NAME ARGS", "argv": [...],
     "date": UTC ISO time, "git_commit": ..., "machine": {...}, "wall_s": ..., "exit_code": ...,
     "result": the script's stdout as JSON (one document, or a list of JSON lines), or its text}

Without NAME: the list of benchmarks with the first line of each docstring. A new benchmark is a
file `bench_NAME.py` here whose `if __name__ == "__main__":` block runs it and prints JSON on stdout.
Benchmarks are not tests: they print what they measure and are not part of CI.
"""

from __future__ import annotations

import ast
import contextlib
import datetime
import io
import json
import os
import platform
import runpy
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def benchmarks() -> dict[str, Path]:
    """Benchmark name -> its script: every bench_NAME.py in this folder."""
    return {p.stem.removeprefix("bench_"): p for p in sorted(HERE.glob("bench_*.py"))}


def summary_line(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return doc.splitlines()[0] if doc else ""


def parse_output(text: str) -> Any:
    """The script's stdout as JSON: one document, else one per line, else the text itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        return [json.loads(line) for line in lines]
    except json.JSONDecodeError:
        return text


class _Tee(io.TextIOBase):
    """Stdout that still reaches the terminal while it is recorded."""

    def __init__(self, out: Any) -> None:
        self.out, self.buffer_text = out, io.StringIO()

    def write(self, text: str) -> int:
        self.out.write(text)
        return self.buffer_text.write(text)

    def flush(self) -> None:
        self.out.flush()


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def run(name: str, argv: list[str]) -> dict[str, Any]:
    """Run one benchmark as a script (its folder and tests/ on sys.path, as the scripts expect) and
    return the record; the record is also written under results/."""
    script = benchmarks()[name]
    for path in (str(HERE.parent), str(HERE)):  # tests/ (hub_server) and the benchmarks (shared helpers)
        if path not in sys.path:
            sys.path.insert(0, path)
    saved_argv, sys.argv = sys.argv, [str(script), *argv]
    tee = _Tee(sys.stdout)
    start, code = time.perf_counter(), 0
    try:
        with contextlib.redirect_stdout(tee):
            runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = saved_argv
    now = datetime.datetime.now(datetime.timezone.utc)
    record = {
        "benchmark": name, "command": " ".join(["python -m tests.benchmarks", name, *argv]), "argv": argv,
        "date": now.isoformat(timespec="seconds"), "git_commit": _git_commit(),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
                    "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None},
        "wall_s": round(time.perf_counter() - start, 3), "exit_code": code,
        "result": parse_output(tee.buffer_text.getvalue()),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}-{now.strftime('%Y%m%dT%H%M%SZ')}.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def main(argv: list[str]) -> int:
    known = benchmarks()
    if not argv or argv[0] in ("-h", "--help", "list"):
        width = max(map(len, known))
        print("\n".join(f"{name:{width}}  {summary_line(path)}" for name, path in known.items()))
        return 0
    name, rest = argv[0], argv[1:]
    if name not in known:
        print(f"benchmarks: unknown benchmark {name!r}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    record = run(name, rest)
    print(json.dumps({k: v for k, v in record.items() if k != "result"}, indent=1), file=sys.stderr)
    return record["exit_code"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
