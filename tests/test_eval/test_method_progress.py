"""Progress of long methods: what they report (eval.methods.interface.Progress), that reporting changes no
result, how evaluate announces each run, and the bars `zoo eval` draws from it."""

from __future__ import annotations

import io

import pytest

from eval.methods.acdc import AcdcOptions, acdc
from eval.methods.edge_patching import PatchingOptions, edge_patching
from eval.core.graph import graph_of
from eval.methods.interface import Method, call_method
from eval.methods.subnetwork_probing import SPOptions, edge_sp, node_sp
from test_edge_methods import tiny_model, tiny_task
from test_evaluator_io import FAST, cli_root  # noqa: F401 (a fixture)


@pytest.fixture(scope="module")
def setup():
    model = tiny_model(layers=2, heads=2)
    task = tiny_task(model)
    return model, task, graph_of(model)


def _same(a, b) -> None:
    assert a.circuits == b.circuits
    if a.edge_scores is not None:
        assert a.edge_scores.keys() == b.edge_scores.keys()
        assert all(a.edge_scores[e] == b.edge_scores[e] for e in a.edge_scores)


SP = SPOptions(steps=3, penalties=(0.0, 1.0, 10.0), max_rows=16)  # 2 λ blocks of 8 rows: 6 steps


@pytest.mark.parametrize(("function", "options", "total"), [
    (acdc, AcdcOptions(), "edges"),
    (edge_patching, PatchingOptions(max_rows=24), "edges"),  # 3 edges a pass: many passes
    (node_sp, SP, 6),
    (edge_sp, SP, 6),
])
def test_long_methods_count_their_work_up_to_the_total_and_change_nothing(setup, function, options, total):
    model, task, graph = setup
    calls: list[tuple[int, int]] = []
    extra = {"seed": 3} if function in (node_sp, edge_sp) else {}
    plain = function(model, task, graph=graph, options=options, **extra)
    told = function(model, task, graph=graph, options=options, progress=lambda d, t: calls.append((d, t)), **extra)
    _same(plain, told)
    want = len(graph.at("qkv").edges) if total == "edges" else total
    assert len(calls) > 1 and {t for _, t in calls} == {want}
    done = [d for d, _ in calls]
    assert done == sorted(set(done)) and done[0] > 0 and done[-1] == want


def test_progress_reaches_only_methods_that_name_it(setup):
    model, task, graph = setup
    seen: dict[str, object] = {}

    def named(model, task, *, progress=None):
        seen["named"] = progress
        return {"nodes": {"m0": 1.0}}

    def var_keyword(model, task, **options):
        seen["kwargs"] = sorted(options)
        return {"nodes": {"m0": 1.0}}

    def tick(done: int, total: int) -> None:
        pass

    for f in (named, var_keyword):
        call_method(Method(key=f.__name__, name=f.__name__, function=f), model, task, graph=graph, seed=0,
                    ablation="resample", progress=tick)
    assert seen["named"] is tick
    assert seen["kwargs"] == ["ablation", "graph", "seed"]  # no progress: it may pass options on


def counting_method(model, task, *, progress=None):
    for i in range(3):
        progress(i + 1, 3)
    return {"nodes": {"m0": 1.0, "a0.h0": 0.5}}


def test_evaluate_announces_every_run_and_hands_it_its_steps(cli_root):  # noqa: F811
    from zoo.targets import evaluate

    log: list[tuple] = []

    def runs(method: str, index: int, count: int):
        log.append(("run", method, index, count))
        return lambda done, total: log.append(("step", done, total))

    key = "test_method_progress:counting_method"
    evaluate("4", [key, "random"], model="compiled", root=cli_root, n=64, stability_seeds=2, permutations=20,
             progress=runs)
    assert [e for e in log if e[0] == "run"] == [("run", key, 0, 2), ("run", key, 1, 2),
                                                  ("run", "random", 0, 2), ("run", "random", 1, 2)]
    assert [e for e in log if e[0] == "step"] == [("step", d, 3) for d in (1, 2, 3)] * 2


def test_zoo_eval_bars_show_each_method_and_its_steps_on_a_terminal_only():
    from zoo.commands.common import method_bars

    out = io.StringIO()
    bars = method_bars(file=out, disable=False)
    step = bars("acdc", 0, 3)
    step(5, 7)
    bars("acdc", 1, 3)(7, 7)
    bars("eap", 0, 1)
    bars.close()
    text = out.getvalue()
    assert "acdc" in text and "eap" in text and "7/7" in text
    quiet = io.StringIO()  # not a terminal: the default draws nothing (one-line errors stay one line)
    bars = method_bars(file=quiet)
    bars("acdc", 0, 2)(1, 2)
    bars.close()
    assert quiet.getvalue() == ""


def test_zoo_eval_json_has_no_bar_off_a_terminal(cli_root, capsys):  # noqa: F811
    import json

    from zoo.cli import main

    code = main(["eval", "case", "4", "--model", "compiled", "--root", str(cli_root), "--method", "acdc",
                 "--json", *FAST])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["methods"][0]["key"] == "acdc"
    assert "\r" not in err  # stderr is no terminal here: no bar


SEEN_THREADS: list[int] = []


def threads_method(model, task):
    import torch

    SEEN_THREADS.append(torch.get_num_threads())
    return {"nodes": {"m0": float(torch.get_num_threads())}}


@pytest.mark.parametrize("verb", ["eval", "bench"])
def test_threads_below_one_are_one_line_exit_2(cli_root, capsys, verb):  # noqa: F811
    from zoo.cli import main

    argv = (["eval", "case", "4", "--model", "compiled", "--method", "random"] if verb == "eval"
            else ["bench", "--cases", "4", "--model", "compiled", "--method", "random"])
    assert main([*argv, "--root", str(cli_root), "--threads", "0"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "zoo: error: --threads must be at least 1, got 0\n"


def test_zoo_eval_runs_on_the_threads_it_is_given_and_records_them(cli_root, capsys):  # noqa: F811
    import json

    import torch

    from zoo.cli import main

    before = torch.get_num_threads()
    try:
        code = main(["eval", "case", "4", "--model", "compiled", "--root", str(cli_root), "--method",
                     "test_method_progress:threads_method", "--threads", "2", "--json", *FAST])
        out, err = capsys.readouterr()
        assert code == 0, err
        report = json.loads(out)
        assert report["settings"]["torch_threads"] == 2
        assert report["methods"][0]["node_scores"]["m0"] == 2.0
    finally:
        torch.set_num_threads(before)


def test_bench_computes_on_its_threads_and_restores_the_callers(cli_root, tmp_path):  # noqa: F811
    import torch

    from eval.leaderboard.cells import BenchSettings, run_bench
    from test_leaderboard import _entry, _method
    from zoo.targets import resolve_target

    target = resolve_target("4", "compiled", cli_root)
    before = torch.get_num_threads()
    for threads in (2, 1):
        SEEN_THREADS.clear()
        run = run_bench([_entry(target, "case-4")], [_method("threads", threads_method)],
                        BenchSettings(n=16, chance_draws=20, threads=threads), tmp_path / "cache")
        assert run.computed == 1  # threads enter the cache key
        assert SEEN_THREADS == [threads]
        assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads must be at least 1"):
        BenchSettings(threads=0)
