"""The one benchmark runner (`python -m tests.benchmarks NAME`): it finds every bench_*.py, each of
which runs as a script, and records any script's stdout in one JSON shape. (The benchmarks themselves
are not tests: they measure, and are not part of CI.)"""

from __future__ import annotations

import ast
import importlib

runner = importlib.import_module("benchmarks.__main__")  # tests/ is on the path: conftest's folder


def test_every_benchmark_is_found_and_runs_as_a_script():
    found = runner.benchmarks()
    assert {"edge_methods", "train_all", "score_files"} <= set(found)
    for name, path in found.items():
        tree = ast.parse(path.read_text())
        assert ast.get_docstring(tree), f"{path.name}: no docstring (the runner lists its first line)"
        mains = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
        assert mains, f"{path.name}: no `if __name__ == \"__main__\":` block for the runner to run"


def test_output_is_read_as_one_document_json_lines_or_text():
    assert runner.parse_output('{"a": 1}\n') == {"a": 1}
    assert runner.parse_output('{"a": 1}\n{"a": 2}\n') == [{"a": 1}, {"a": 2}]
    assert runner.parse_output("not json\n") == "not json\n"
