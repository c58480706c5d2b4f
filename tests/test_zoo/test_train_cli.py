"""`zoo train` / `zoo validate`: exit codes, one-line errors, nothing written on bad input,
the entry's files (TL-loadable weights, parseable circuit), criterion not met -> exit 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zoo.cli import main

FAST = ["--epochs", "1", "--batch-size", "64"]


@pytest.mark.parametrize("argv,needle", [
    (["train", "case", "999"], "unknown case"),
    (["train", "case", "33", "--lr", "0"], "--lr"),
    (["train", "case", "33", "--lr", "-1"], "--lr"),
    (["train", "case", "33", "--batch-size", "0"], "--batch-size"),
    (["train", "case", "33", "--epochs", "0"], "--epochs"),
    (["train", "case", "33", "--n-train", "0"], "--n-train"),
    (["train", "case", "33", "--n-train", "32"], "batch_size (128) must not exceed n_train (32)"),
    (["train", "case", "33", "--min-d-head", "0"], "--min-d-head"),
    (["train", "planted", "causal-bench-2x2", "--min-d-head", "8"], "has its own head width"),
    (["train", "case", "33", "--scheme", "nope"], "scheme"),
    (["train", "case", "33", "--seed=-1"], "seed must be an integer in [0, 2**32 - 1]"),
    (["train", "case", "33", "--seed", str(10**20)], "seed must be an integer in [0, 2**32 - 1]"),
    (["train", "case", "33", "--lr", "inf"], "lr must be a finite number"),
    (["train", "case", "33", "--busy-components", "7"], "--busy-components must be an integer from 1 to 6"),
    (["train", "case", "33", "--busy-components", "0"], "--busy-components must be an integer from 1 to 6"),
    (["train", "case", "33", "--busy-components", "2", "--no-distractors"], "cannot take --no-distractors"),
    (["train", "case", "33", "--busy-reads", "4"], "--busy-reads must be an integer from 0 to 3"),
    (["train", "case", "33", "--busy-reads", "-1"], "--busy-reads must be an integer from 0 to 3"),
    (["train", "case", "33", "--busy-reads", "1", "--no-distractors"], "--busy-reads shapes the distractors"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(argv, needle, tmp_path: Path, capsys) -> None:
    root = tmp_path / "root"
    code = main([*argv, "--root", str(root)]) if argv[-1] != "nope" else _exit_code(argv + ["--root", str(root)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and needle in err
    assert not root.exists()


def test_a_diverging_run_exits_1_with_one_line_and_writes_nothing(compiled_root, capsys) -> None:
    """--lr 1e30: the losses turn NaN within steps; a run that missed its criterion (exit 1), said
    in one line, with no entry and no checkpoint left (weights that are NaN cannot be written)."""
    root = compiled_root("33")
    code = main(["train", "case", "33", "--lr", "1e30", "--batch-size", "64", "--root", str(root), "--json"])
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.startswith("zoo:")]
    assert code == 1 and out == ""
    assert len(lines) == 1 and "diverged at step" in lines[0] and "no entry written" in lines[0], err
    entries = root / "entries"
    assert not entries.exists() or not any(entries.iterdir())


def _exit_code(argv) -> int:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return int(exc.value.code)


def test_unwritable_output_exits_2(tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code = main(["train", "case", "33", "--out", str(blocker / "entry"), "--root", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "cannot write" in err
    assert not (tmp_path / "r").exists() and blocker.read_text() == "x"


def test_n_train_sets_the_training_set_and_the_epoch(tmp_path: Path, capsys) -> None:
    """--n-train draws that many training sequences; an epoch is one pass over them, so one epoch of
    128 sequences in batches of 64 is 2 steps (the default 2048 would be 32); the entry records it.
    --min-d-head widens every head (d_model 4 x 8 = 32 where the default gives 16)."""
    out = tmp_path / "case-33"
    code = main(["train", "case", "33", *FAST, "--n-train", "128", "--min-d-head", "8", "--out", str(out),
                 "--root", str(tmp_path / "r"), "--json"])
    capsys.readouterr()
    training = json.loads((out / "training.json").read_text())
    assert code in (0, 1)
    assert training["config"]["n_train"] == 128 and training["steps"] == 2
    assert training["arch"]["overrides"]["min_d_head"] == 8
    assert json.loads((out / "config.json").read_text())["d_model"] == 32


def test_criterion_not_met_exits_1_and_writes_the_entry(tmp_path: Path, capsys) -> None:
    out = tmp_path / "case-33"
    code = main(["train", "case", "33", *FAST, "--out", str(out), "--root", str(tmp_path / "r"), "--json"])
    captured = capsys.readouterr()
    assert code == 1
    assert "not met" in captured.err.strip().splitlines()[-1]
    # the validation's progress names each part as it starts, after the step bar has gone
    assert "validating: 0/6 parts done, now metrics and node effects" in captured.err
    assert "validating: 5/6 parts done, now edge patching" in captured.err
    summary = json.loads(captured.out)
    assert summary["met_criterion"] is False
    training = json.loads((out / "training.json").read_text())
    assert training["met_criterion"] is False and training["history"]
    assert training["config"]["epochs"] == 1 and training["config"]["batch_size"] == 64
    assert not (tmp_path / ".case-33.checkpoint").exists()

    from eval.core.circuit import Circuit
    from zoo.entry import load_entry_dir

    entry = load_entry_dir(out)  # verifies the manifest
    circuit = Circuit.from_json(entry.circuit_json)
    assert set(circuit.nodes) == {n for lls in entry.circuit_json["correspondence"].values() for n in lls}
    assert entry.case_json["encoding"]["max_seq_len"] == entry.config["n_ctx"] - 1
    validation = entry.validation
    assert {r["node"] for r in validation["node_effects"]} >= set(circuit.nodes)
    # labelled edges no counterfactual moves are listed (issue 10), each a part of a circuit edge
    from eval.core.circuit import parse_edge, promote

    inert = validation["inert_edges"]
    assert set(inert) >= {"edges", "qkv_edges", "atol", "n", "seed"}
    truth_edges = {tuple(e) for e in circuit.edges}
    assert all(parse_edge(e) in truth_edges for e in inert["edges"])
    assert all(tuple(map(promote, parse_edge(e))) in truth_edges for e in inert["qkv_edges"])

    # the weights are TransformerLens-format: they load into HookedTransformer and agree with siit
    import torch

    from siit.transformer import Transformer

    seqs = entry.case.sample(8, seed=3)
    tokens, mask = entry.encoding.encode(seqs)
    with torch.no_grad():
        ours, _ = Transformer.from_state_dict(entry.config, entry.state_dict)(tokens, mask)
        theirs = entry.model(tokens, attention_mask=mask)
    assert torch.allclose(ours, theirs, atol=1e-4)

    # zoo validate recomputes the same validation.json
    assert main(["validate", "case", "33", "--out", str(out), "--root", str(tmp_path / "r"), "--json"]) == 0
    again = json.loads((out / "validation.json").read_text())
    assert again["node_effects"] == validation["node_effects"]
    assert again["inert_edges"] == validation["inert_edges"]


def test_trained_outside_entry_is_scored_against_the_program_the_user_names(tmp_path: Path, monkeypatch,
                                                                              capsys) -> None:
    """A non-built-in entry loads with a data-only case (its program is never imported from
    case.json); naming the program makes it the task of the evaluation, with the trained model."""
    import zoo
    from zoo.case_json import is_data_only
    from zoo.entry import load_entry_dir

    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))  # tests/: outside_case
    root = tmp_path / "r"
    main(["train", "case", "outside_case:make_case", *FAST, "--root", str(root)])
    capsys.readouterr()
    entry_dir = root / "entries" / "case-outside_case-make_case"
    entry = load_entry_dir(entry_dir)
    assert is_data_only(entry.case)
    from rasp_programs.case import CaseError

    with pytest.raises(CaseError, match="holds no program"):  # the entry alone: its program is never imported
        zoo.evaluate(entry, ["random"], root=root, n=32)
    target = zoo.resolve_target("outside_case:make_case", root=root)
    assert target.which == "trained" and not is_data_only(target.case)
    report = zoo.evaluate("outside_case:make_case", ["random"], root=root, n=32)
    assert report.entry["model"] == "trained" and report.entry["case"] == "outside_case:make_case"


def test_summary_shows_input_shapes_only_where_they_differ(capsys) -> None:
    """zoo train's summary adds a line per input shape when the shapes' numbers differ
    (bidirectional models), naming the lagging node; causal models get none."""
    from zoo.commands.training import _print_summary

    part = {"accuracy": 1.0, "iia_min": 1.0, "siia_min": 1.0, "labelled_positions": 10,
            "worst_iia_node": "m0", "distractor_r2_min": 0.95, "worst_distractor": "a0.h1"}
    summary = {"family": "case", "id": "x", "met_criterion": False, "steps": 8, "epochs": 1.0,
               "wall_time_s": 1.0, "entry": "E", "accuracy": 1.0, "iia": 1.0, "iia_min": 1.0, "siia": 1.0,
               "siia_min": 1.0, "siia_all": 1.0,
               "max_out_of_circuit_effect": {"resample": 0.0, "mean": 0.0, "zero": 0.0},
               "max_out_of_circuit_effect_by_shape": {"padded": {}},
               "max_out_of_circuit_effect_by_length": {"3": {"resample": 0.0, "mean": 0.0}},
               "distractor_r2_min": 0.9, "heuristic_separation": {"output_norm": 0.5, "output_variance": 0.5,
                                                                  "weight_norm": 0.5},
               "by_shape": {"padded": part, "unpadded": part, "partly_padded": part}}
    _print_summary(summary)
    assert "inputs: accuracy" not in capsys.readouterr().out
    summary["by_shape"] = dict(summary["by_shape"], unpadded=dict(part, iia_min=0.98))
    _print_summary(summary)
    lines = [line for line in capsys.readouterr().out.splitlines() if "inputs: accuracy" in line]
    assert len(lines) == 3 and "IIA min 0.9800 (m0)" in lines[1] and "(m0)" not in lines[0]
    assert all("distractor R² min 0.950 (a0.h1)" in line for line in lines)


def test_step_bar_rate_counts_only_the_steps_of_this_run_after_resume() -> None:
    """A resumed run's first update jumps to the checkpoint's step; the bar's rate and time left
    must come from the steps run since, not read ~10⁴ steps/s."""
    import time

    from zoo.commands.common import step_bar

    bar = step_bar(4000)
    try:
        time.sleep(0.3)  # past the bar's mininterval, so it redraws
        bar.update_to(1625, {"budget": 4000})
        time.sleep(0.3)  # past the bar's mininterval, so it redraws
        bar.update_to(1626, {"budget": 4000})
        info = bar.format_dict
        shown = info["rate"]  # tqdm's smoothed rate, as printed
        mean = (info["n"] - info["initial"]) / info["elapsed"]  # what the time left is computed from
        assert info["n"] == 1626
        assert shown is not None and shown < 100 and mean < 100  # ~2 steps in 0.6 s, not 1626
    finally:
        bar.close()


def test_lean_activations_take_a_no_form_and_many_case_workers_record_it() -> None:
    """--lean-activations / --no-lean-activations override a planted model's own default (large-circuit
    trains lean); not given, the option is None and the model's default applies; a worker's recorded
    command keeps a --no- form, which a bare `zoo train case ID` would not reproduce."""
    from zoo.cli import build_parser
    from zoo.commands.training import option_flags, train_options

    parse = build_parser().parse_args
    for argv, given, lean in ((["train", "planted", "large-circuit"], False, False),
                              (["train", "planted", "large-circuit", "--lean-activations"], True, True),
                              (["train", "planted", "large-circuit", "--no-lean-activations"], True, False)):
        options = train_options(parse(argv))
        assert (options.lean_given, options.config.lean_activations) == (given, lean), argv
    assert "--no-strict-edges" in option_flags(parse(["train", "--cases", "13", "--no-strict-edges"]))
    assert "--no-lean-activations" in option_flags(parse(["train", "--all", "--no-lean-activations"]))
    assert option_flags(parse(["train", "--all"])) == ()
    busy = parse(["train", "--all", "--busy-components", "3"])
    assert option_flags(busy) == ("--busy-components", "3") and train_options(busy).config.distractor_components == 3
    reads = parse(["train", "--all", "--busy-reads", "2"])
    assert option_flags(reads) == ("--busy-reads", "2") and train_options(reads).config.distractor_reads == 2


def test_validation_progress_closes_the_step_bar_at_its_first_part() -> None:
    from zoo.commands.common import ValidationProgress, step_bar

    steps = step_bar(10)
    validating = ValidationProgress(before=steps)
    try:
        assert not steps.disable  # still open: nothing validated yet
        validating.stage("node bound")
        assert steps.disable  # tqdm marks a closed bar disabled
        assert validating._bar.n == 1 and "now node bound" in validating._bar.desc
    finally:
        validating.close()
    assert validating._bar.disable
