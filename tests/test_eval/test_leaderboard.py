"""`zoo bench` (issue 10, item 2): methods x entries, a JSON cell cache that a changed entry, method
option or setting invalidates, an interrupted bench that reruns only what is missing, the
leaderboard files, outside methods and score folders on the same board, one-line bad options.
Entries are the compiled case 3 (cached for the session by the `compiled` fixture)."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from pathlib import Path

import pytest

pytest.importorskip("transformer_lens")

from eval.leaderboard.cells import BenchEntry, BenchMethod, BenchSettings, run_bench  # noqa: E402
from eval.leaderboard.fingerprints import method_fingerprint  # noqa: E402
from eval.methods.interface import Method  # noqa: E402

SETTINGS = BenchSettings(n=16, chance_draws=20)


# --- methods the tests run (importable as test_leaderboard:NAME) ------------------------------------------

def scaled_method(model, task, *, graph, scale: float = 1.0):
    """Deterministic node scores; `scale` stands for a method option."""
    return {"nodes": {c: scale * (i + 1) for i, c in enumerate(graph.components)}}


def logged_method(model, task, *, graph):
    """Appends one line per call to $ZOO_TEST_CALLS; raises KeyboardInterrupt (a user's Ctrl-C) on
    the call numbered $ZOO_TEST_INTERRUPT_AT."""
    log = Path(os.environ["ZOO_TEST_CALLS"])
    with log.open("a") as f:
        f.write("call\n")
    if os.environ.get("ZOO_TEST_INTERRUPT_AT") == str(len(log.read_text().splitlines())):
        raise KeyboardInterrupt
    return scaled_method(model, task, graph=graph)


# --- the library ----------------------------------------------------------------------------------

def _entry(target, name: str, fingerprint: str = "v1") -> BenchEntry:
    return BenchEntry(name=name, model="compiled", fingerprint=fingerprint, load=lambda: target)


def _method(key: str, function) -> BenchMethod:
    m = Method(key=key, name=key, function=function)
    return BenchMethod(key=key, source="outside", method=m, fingerprint=method_fingerprint(m))


@pytest.fixture
def case3(compiled):
    from zoo.targets import resolve_target

    return resolve_target(compiled("3"), "compiled")


def test_rerun_reads_the_cache_and_changes_recompute_only_their_cells(case3, tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    monkeypatch.setenv("ZOO_TEST_CALLS", str(calls))
    entries = [_entry(case3, "case-3"), _entry(case3, "copy-3")]
    methods = [_method("logged", logged_method), _method("scaled", functools.partial(scaled_method, scale=2.0))]
    first = run_bench(entries, methods, SETTINGS, tmp_path / "cache")
    assert (first.computed, first.reused) == (4, 0) and all(c.status == "ok" for c in first.cells)
    assert [c.edge_auroc for c in first.cells[:2]] == [c.edge_auroc for c in first.cells[2:]]
    again = run_bench(entries, methods, SETTINGS, tmp_path / "cache")
    assert (again.computed, again.reused) == (0, 4) and again.cells == first.cells
    assert len(calls.read_text().splitlines()) == 2  # the logged method ran once per entry, not again

    changed_entry = [entries[0], _entry(case3, "copy-3", fingerprint="v2")]
    assert run_bench(changed_entry, methods, SETTINGS, tmp_path / "cache").computed == 2  # copy-3's two cells
    changed_option = [methods[0], _method("scaled", functools.partial(scaled_method, scale=3.0))]
    assert run_bench(changed_entry, changed_option, SETTINGS, tmp_path / "cache").computed == 2  # scaled's two
    other_n = BenchSettings(n=17, chance_draws=20)
    assert run_bench(changed_entry, changed_option, other_n, tmp_path / "cache").computed == 4


def test_a_corruption_is_part_of_a_cells_key_and_resample_keeps_the_old_keys(case3, tmp_path):
    from eval.leaderboard.cells import cell_key

    method = _method("scaled", scaled_method)
    plain, shifted = _entry(case3, "case-3"), dataclasses.replace(_entry(case3, "case-3"), corruption="token:1")
    keys = {cell_key(plain, method, SETTINGS), cell_key(plain, method, dataclasses.replace(SETTINGS, corruption="resample")),
            cell_key(shifted, method, dataclasses.replace(SETTINGS, corruption="resample"))}
    assert len(keys) == 1  # resample, named or not, is the key cells had before corruptions existed
    token = cell_key(shifted, method, SETTINGS)  # the entry's own corruption applies
    assert token not in keys and token == cell_key(plain, method, dataclasses.replace(SETTINGS, corruption="token:1"))
    run = run_bench([shifted], [method], SETTINGS, tmp_path / "cache")
    assert run.cells[0].status == "ok" and run_bench([plain], [method], SETTINGS, tmp_path / "cache").computed == 1
    too_far = dataclasses.replace(shifted, corruption="token:9")  # beyond case 3's shortest input: an error cell
    cell = run_bench([too_far], [method], SETTINGS, tmp_path / "cache").cells[0]
    assert cell.status == "error" and "at most" in cell.message


def test_an_interrupted_bench_rerun_computes_only_what_is_missing(case3, tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    monkeypatch.setenv("ZOO_TEST_CALLS", str(calls))
    monkeypatch.setenv("ZOO_TEST_INTERRUPT_AT", "2")  # Ctrl-C during the second entry
    entries = [_entry(case3, f"e{i}") for i in range(3)]
    methods = [_method("scaled", scaled_method), _method("logged", logged_method)]
    with pytest.raises(KeyboardInterrupt):
        run_bench(entries, methods, SETTINGS, tmp_path / "cache")
    monkeypatch.delenv("ZOO_TEST_INTERRUPT_AT")
    rerun = run_bench(entries, methods, SETTINGS, tmp_path / "cache")
    # done before the interruption: e0 (both methods) and e1's scaled cell; missing: e1 logged, e2 both
    assert (rerun.computed, rerun.reused) == (3, 3)
    assert len(calls.read_text().splitlines()) == 2 + 2  # two before (one interrupted), e1 and e2 now
    assert not list((tmp_path / "cache").rglob("*.tmp"))


def test_a_failing_method_is_an_error_cell_and_is_not_cached(case3, tmp_path):
    def broken(model, task):
        raise RuntimeError("no\nluck")

    run = run_bench([_entry(case3, "case-3")], [_method("broken", broken)], SETTINGS, tmp_path / "cache")
    (cell,) = run.cells
    assert cell.status == "error" and "raised RuntimeError: no | luck" in cell.message
    assert not list((tmp_path / "cache").rglob("*.json"))


# --- the CLI --------------------------------------------------------------------------------------

@pytest.fixture
def cli_root(compiled_root) -> Path:
    return compiled_root("3")


def _bench(argv, capsys):
    from zoo.cli import main

    code = main(["bench", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_leaderboard_with_outside_method_and_score_folder_and_a_cached_rerun(cli_root, tmp_path, capsys,
                                                                                 monkeypatch):
    monkeypatch.setenv("ZOO_TEST_CALLS", str(tmp_path / "calls"))
    from zoo.cli import main

    scores = tmp_path / "mine"  # a score folder as `zoo eval --save-scores` writes it, one file per entry
    assert main(["eval", "case", "3", "--model", "compiled", "--root", str(cli_root), "--method", "eap", "--n", "16",
                 "--stability-seeds", "1", "--permutations", "5", "--save-scores", str(tmp_path / "saved")]) == 0
    scores.mkdir()
    (tmp_path / "saved" / "eap.json").rename(scores / "case-3.json")
    capsys.readouterr()
    out_dir = tmp_path / "board"
    argv = ["--cases", "3", "--model", "compiled", "--method", "random,eap", "--method", "test_leaderboard:logged_method",
            "--scores", str(scores), "--root", str(cli_root), "--out", str(out_dir), "--n", "16", "--json"]
    code, out, err = _bench(argv, capsys)
    assert code == 0, err
    board = json.loads(out)
    assert [r["method"] for r in board["rows"]] == ["random", "eap", "test_leaderboard:logged_method", "scores:mine"]
    assert (board["computed"], board["reused"]) == (4, 0)
    rows = {r["method"]: r for r in board["rows"]}
    assert rows["scores:mine"]["edge_auroc"]["mean"] == rows["eap"]["edge_auroc"]["mean"]  # same scores, same board
    assert all(r["edge_chance"]["mean"] is not None for r in board["rows"])
    assert len(board["pairs"]) == 6 and board["a12_matrix"]["methods"][0] == "random"
    for name in ("leaderboard.json", "leaderboard.csv", "cells.csv", "pairwise.csv", "auroc_box.png", "a12_matrix.png"):
        assert (out_dir / name).stat().st_size > 0, name
    assert json.loads((out_dir / "leaderboard.json").read_text()) == board
    assert (out_dir / "leaderboard.csv").read_text().splitlines()[0].startswith("method,entries,missing,errors")
    # per-entry AUROCs: one CSV row per (method, entry), the same numbers as the JSON's cells
    cells = (out_dir / "cells.csv").read_text().splitlines()
    assert cells[0].startswith("method,entry,model,seed,status,kind,node_auroc,edge_auroc") and len(cells) == 5
    eap = next(c for c in board["cells"] if c["method"] == "eap")
    assert f"eap,{eap['entry']},compiled" in cells[2] and f"{eap['edge_auroc']:.6g}" in cells[2]
    # one entry per method: no pair may be starred, whatever its p (eval.scoring.stats.MIN_ENTRIES)
    assert all(p["significant"] is False and p["p_holm"] >= p["comparison"]["p"] for p in board["pairs"])

    code, out, err = _bench([a for a in argv if a != "--json"], capsys)
    assert code == 0, err
    assert "0 computed, 4 from the cache" in out and "RQ4" in out and "chance-e" in out
    assert "m0->a1.h0<q>" in out  # case 3's inert ground-truth edges are listed


def test_cli_interrupted_then_rerun_computes_only_what_is_missing(cli_root, tmp_path, capsys, monkeypatch):
    calls = tmp_path / "calls"
    monkeypatch.setenv("ZOO_TEST_CALLS", str(calls))
    monkeypatch.setenv("ZOO_TEST_INTERRUPT_AT", "1")
    argv = ["--cases", "3", "--model", "compiled", "--method", "random,test_leaderboard:logged_method,eap",
            "--root", str(cli_root), "--out", str(tmp_path / "board"), "--n", "16", "--json"]
    code, out, err = _bench(argv, capsys)
    assert code == 130 and out == "" and "rerun to compute only what is missing" in err
    monkeypatch.delenv("ZOO_TEST_INTERRUPT_AT")
    code, out, err = _bench(argv, capsys)
    assert code == 0, err
    board = json.loads(out)
    assert (board["computed"], board["reused"]) == (2, 1)  # random was cached before the Ctrl-C


def test_cli_jobs_compute_the_cells_of_one_process_in_workers(cli_root, tmp_path, capsys):
    """`zoo bench --jobs 2`: the missing cells in two spawned workers, an outside method included (rebuilt
    there by name); the same cells as one process (but their wall time), cached for the next run."""
    base = ["--cases", "3", "--model", "compiled", "--method", "random,eap,test_leaderboard:scaled_method",
            "--root", str(cli_root), "--n", "16", "--json"]
    code, out, err = _bench([*base, "--out", str(tmp_path / "one")], capsys)
    assert code == 0, err
    one = json.loads(out)
    code, out, err = _bench([*base, "--out", str(tmp_path / "two"), "--jobs", "2"], capsys)
    assert code == 0, err
    two = json.loads(out)
    assert (two["computed"], two["reused"]) == (3, 0)
    timeless = lambda board: [{k: v for k, v in c.items() if k != "seconds"} for c in board["cells"]]  # noqa: E731
    assert timeless(two) == timeless(one) and len(timeless(one)) == 3
    code, out, err = _bench([*base, "--out", str(tmp_path / "two"), "--jobs", "2"], capsys)
    assert code == 0, err
    assert (json.loads(out)["computed"], json.loads(out)["reused"]) == (0, 3)


@pytest.mark.parametrize(("argv", "needle"), [
    (["--cases", "3", "--method", "nope"], "unknown method 'nope'"),
    (["--cases", "3", "--method", "no_such_module_xyz:f"], "no_such_module_xyz"),
    (["--planted", "ioi"], "no planted entry planted-ioi"),
    (["--cases", "999"], "999"),
    (["--cases", " , "], "--cases names nothing"),
    (["--cases", "3", "--scores", "/nonexistent/folder"], "is not a directory"),
    (["--cases", "3", "--n", "1"], "--n must be at least 2"),
    (["--cases", "3", "--jobs", "0"], "--jobs must be at least 1"),
    (["--family", "nope"], "unknown family 'nope'"),
    (["--cases", "3", "--corruption", "token:0"], "unknown corruption 'token:0'"),
    (["--family", "cancellation"], "no planted entry planted-cancellation"),
    (["--planted", "mt-2x2"], "no planted entry planted-mt-2x2.rare-feature"),  # a bundle: all its views
    ([], "no entries under"),
])
def test_cli_bad_options_one_line_exit_2(argv, needle, tmp_path, capsys):
    root = tmp_path / "root"
    code, out, err = _bench([*argv, "--root", str(root)], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("zoo: error: ") and needle in err, err


def test_entries_are_found_by_folder_name_and_fingerprinted_by_their_manifest(cli_root):
    from zoo.leaderboard_entries import bench_entries
    from zoo.errors import ZooError

    entries = cli_root / "entries"
    for name in ("case-3", "planted-ioi", "case-3.failed", ".case-3.checkpoint"):
        (entries / name).mkdir(parents=True)
        (entries / name / "manifest.json").write_text('{"files": {}}')
    found = bench_entries(cli_root)
    assert [(e.name, e.model) for e in found] == [("case-3", "trained"), ("planted-ioi", "trained")]
    (entries / "case-3" / "manifest.json").write_text('{"files": {"model.safetensors": "0"}}')  # retrained
    assert bench_entries(cli_root)[0].fingerprint != found[0].fingerprint
    assert [e.name for e in bench_entries(cli_root, planted=["ioi"])] == ["planted-ioi"]
    compiled = bench_entries(cli_root, cases=["3"], model="compiled")
    assert [(e.name, e.model) for e in compiled] == [("case-3", "compiled")]
    assert compiled[0].fingerprint == bench_entries(cli_root, cases=["3"], model="compiled")[0].fingerprint
    with pytest.raises(ZooError, match="planted entries there: planted-ioi"):
        bench_entries(cli_root, planted=["tiny"])
    for name in ("planted-cancellation", "planted-mt-2x2.first"):
        (entries / name).mkdir()
        (entries / name / "manifest.json").write_text('{"files": {}}')
    assert {e.name: e.family for e in bench_entries(cli_root)} == {
        "case-3": "case", "planted-cancellation": "cancellation", "planted-ioi": "planted",
        "planted-mt-2x2.first": "mt-2x2"}
    assert compiled[0].family == "case"


def test_the_leaderboard_reports_each_family_apart_with_its_spread() -> None:
    from eval.leaderboard.cells import BenchRun, Cell
    from eval.leaderboard.table import leaderboard, table

    def cell(method: str, entry: str, edge: float) -> Cell:
        return Cell(method=method, entry=entry, model="trained", seed=0, status="ok", kind="scores",
                    node_auroc=edge, edge_auroc=edge, edge_chance=0.5)

    cells = (cell("random", "planted-cancellation", 0.9), cell("a", "planted-cancellation", 0.8),
             cell("b", "planted-cancellation", 0.3), cell("a", "case-3", 1.0), cell("b", "case-3", 0.95),
             cell("random", "case-3", 0.5))
    run = BenchRun(cells=cells, settings=SETTINGS, computed=6, reused=0)
    board = leaderboard(run, families={"planted-cancellation": "cancellation", "case-3": "case"})
    fam = board.families["cancellation"]
    assert fam["entries"] == ["planted-cancellation"] and fam["spread"] == pytest.approx(0.5)  # random left out
    assert [r.edge_auroc.mean for r in fam["rows"]] == [0.9, 0.8, 0.3]
    assert board.families["case"]["spread"] == pytest.approx(0.05)
    assert json.loads(json.dumps(board.to_json()))["families"]["cancellation"]["rows"][1]["method"] == "a"
    assert "family cancellation (planted-cancellation)" in table(board)
    assert leaderboard(run).families == {}


def test_a_method_fingerprint_changes_with_the_helpers_its_module_imports(tmp_path, monkeypatch) -> None:
    """An edit to a module the method's module imports (as eval.methods.acdc imports eval.methods.edge_patching)
    invalidates its cells, not only an edit to the method's own module."""
    import importlib
    import linecache
    import sys

    from eval.leaderboard.fingerprints import module_closure

    pkg = tmp_path / "benchpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helper.py").write_text("SCALE = 1.0\n")
    (pkg / "method.py").write_text("from benchpkg import helper\n\n\ndef run(model, task, *, graph):\n"
                                   "    return {'nodes': {c: helper.SCALE for c in graph.components}}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("benchpkg.method")
    try:
        before = method_fingerprint(Method(key="m", name="m", function=module.run))
        (pkg / "helper.py").write_text("SCALE = 2.0\n")
        linecache.clearcache()
        assert method_fingerprint(Method(key="m", name="m", function=module.run)) != before
        assert module_closure(["benchpkg.method"]) == ["benchpkg", "benchpkg.helper", "benchpkg.method"]
    finally:
        for name in ("benchpkg.method", "benchpkg.helper", "benchpkg"):
            sys.modules.pop(name, None)
    import eval.methods.acdc  # noqa: F401

    assert {"eval.methods.edge_patching", "eval.patching.hooks", "eval.core.tlens"} <= set(module_closure(["eval.methods.acdc"]))


def test_runs_are_announced_for_computed_cells_only(case3, tmp_path):
    heard: list[tuple[str, int, int]] = []

    def runs(method: str, index: int, count: int):
        heard.append((method, index, count))
        return None

    methods = [_method("scaled", scaled_method)]
    run_bench([_entry(case3, "case-3")], methods, SETTINGS, tmp_path / "cache", runs=runs)
    assert heard == [("scaled", i, SETTINGS.stability_seeds) for i in range(SETTINGS.stability_seeds)]
    run_bench([_entry(case3, "case-3")], methods, SETTINGS, tmp_path / "cache", runs=runs)  # all cached
    assert len(heard) == SETTINGS.stability_seeds


def test_the_leaderboard_names_entries_whose_edge_labels_patching_contradicts(tmp_path) -> None:
    """BenchEntry.edge_labels comes from validation.json (edge_bounds, else edge_effects); the leaderboard
    lists the contradicted entries and reports the methods over the confirmed ones apart."""
    from eval.leaderboard.cells import BenchRun, Cell
    from eval.leaderboard.table import leaderboard, table
    from zoo.leaderboard_entries import edge_labels

    def cell(method: str, entry: str, edge: float) -> Cell:
        return Cell(method=method, entry=entry, model="trained", seed=0, status="ok", kind="scores",
                    node_auroc=edge, edge_auroc=edge, edge_chance=0.5)

    cells = (cell("a", "case-3", 0.99), cell("b", "case-3", 0.97), cell("a", "case-33", 0.9), cell("b", "case-33", 0.6))
    run = BenchRun(cells=cells, settings=SETTINGS, computed=4, reused=0)
    board = leaderboard(run, edge_labels={"case-3": "not exact", "case-33": "exact"})
    assert board.edge_exact["entries"] == ["case-33"] and board.edge_exact["spread"] == pytest.approx(0.3)
    assert [r.edge_auroc.mean for r in board.edge_exact["rows"]] == [0.9, 0.6]
    text = table(board)
    assert "edge labels that patching contradicts" in text and "case-3;" in text
    assert json.loads(json.dumps(board.to_json()))["edge_labels"] == {"case-3": "not exact", "case-33": "exact"}
    assert leaderboard(run, edge_labels={"case-3": "exact", "case-33": "exact"}).edge_exact == {}  # nothing apart
    assert leaderboard(run).edge_exact == {} and "contradicts" not in table(leaderboard(run))

    entry = tmp_path / "entries" / "case-3"
    entry.mkdir(parents=True)
    assert edge_labels(entry) == "not measured"  # no validation.json
    (entry / "validation.json").write_text(json.dumps({"edge_effects": {"exact": True}}))
    assert edge_labels(entry) == "exact"
    (entry / "validation.json").write_text(json.dumps({"edge_effects": {"exact": True}, "edge_bounds": {"exact": False}}))
    assert edge_labels(entry) == "not exact"  # the per-length bound decides where there is one
    (entry / "validation.json").write_text(json.dumps({"edge_effects": {"skipped": "too many"}}))
    assert edge_labels(entry) == "not measured"
    # per ablation: the bench's own (edge_bounds measures resample and mean; edge_effects resample only)
    cell = lambda r, m: {"resample": {"effect": r}, "mean": {"effect": m}}  # noqa: E731
    both = {"edge_effects": {"exact": False}, "edge_bounds": {
        "exact": False, "bound": 0.01, "ablations": ["resample", "mean"],
        "by_length": {"1": {"padded": cell(0.2, 0.0)}, "2": {"padded": cell(0.0, 0.005)}}}}
    (entry / "validation.json").write_text(json.dumps(both))
    assert edge_labels(entry) == edge_labels(entry, "resample") == "not exact"
    assert edge_labels(entry, "mean") == "exact" and edge_labels(entry, "zero") == "not measured"
    (entry / "validation.json").write_text(json.dumps({"edge_effects": {"exact": True},
                                                       "edge_bounds": {"exact": True, "ablation": "resample"}}))
    assert edge_labels(entry) == "exact" and edge_labels(entry, "mean") == "not measured"  # before mean was measured
    (entry / "validation.json").write_text("not json")
    assert edge_labels(entry) == "not measured"
