"""Model and benchmark cards: YAML front matter parses with the expected fields, the prose says how
the circuit is labelled, and the card's loading snippet runs (through the local Hub server)."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest
from hub_server import build_entry, hub_environment

from zoo.hub_metadata import entry_row, table_files
from zoo.card import front_matter, render_benchmark_card

REPO = "zoo-test/zoo"


@pytest.fixture()
def entry(compiled, tmp_path: Path) -> Path:
    return build_entry(compiled("33"), tmp_path / "entries", accuracy=0.97)


def test_model_card_front_matter(entry: Path) -> None:
    card = (entry / "README.md").read_text()
    meta = front_matter(card)
    assert meta["license"] == "apache-2.0"
    assert meta["library_name"] == "transformer-lens"
    assert {"mechanistic-interpretability", "tracr"} <= set(meta["tags"])
    metrics = {m["type"]: m["value"] for m in meta["model-index"][0]["results"][0]["metrics"]}
    assert {k: metrics[k] for k in ("accuracy", "iia", "siia")} == {"accuracy": 0.97, "iia": 0.99, "siia": 0.98}
    assert metrics["siia_min"] == 0.9 and metrics["max_out_of_circuit_effect.resample"] == 0.0
    circuit = json.loads((entry / "circuit.json").read_text())
    assert meta["zoo"]["circuit"] == {"granularity": "head", "n_nodes": len(circuit["nodes"]),
                                      "n_edges": len(circuit["edges"])}
    assert meta["zoo"]["case_id"] == "33"


def test_model_card_prose(entry: Path) -> None:
    card = (entry / "README.md").read_text()
    assert "$" not in card.replace("$ZOO_HOME", "").replace("$ZOO_REPO_ID", "")  # every placeholder filled
    assert "head granularity" in card and "promoting" in card and "a2.h0<k>" in card
    case = json.loads((entry / "case.json").read_text())
    assert case["description"] in card
    for node in json.loads((entry / "circuit.json").read_text())["nodes"]:
        assert f"| `{node}` |" in card
    assert "| IIA (interchange intervention accuracy) | 0.990 |" in card
    assert "| node | in_circuit | resample | mean | zero | inert |" in card


def test_description_with_yaml_syntax_cannot_break_the_front_matter(compiled, tmp_path: Path) -> None:
    from zoo.card import render_model_card

    c = compiled("33")
    case = {**c.case.metadata(), "description": 'tricky: "quotes" --- and $dollars', "name": "a: b"}
    card = render_model_card(name="case-33", config=c.config, circuit=c.graph.to_json(), case=case,
                             training=None, validation=None)
    meta = front_matter(card)
    assert "model-index" not in meta  # no figures, no metrics
    assert 'tricky: "quotes" --- and $dollars' in card


def test_benchmark_card_and_tables(entry: Path) -> None:
    rows = [entry_row(entry)]
    files = table_files(rows, parquet=False)
    card = render_benchmark_card(rows, repo_id=REPO, tables=sorted(files))
    meta = front_matter(card)
    assert meta["zoo"]["entries"] == ["case-33"] and meta["library_name"] == "transformer-lens"
    assert "| case-33 |" in card and "| 0.970 | 0.990 | 0.980 |" in card
    assert f'zoo.load("case-33", repo_id="{REPO}")' in card
    assert "zoo pull case 33 --repo-id" in card
    header = files["benchmark_metadata.csv"].decode().splitlines()[0].split(",")
    assert {"entry", "validation.accuracy", "architecture.n_layers", "files.model.safetensors.sha256"} <= set(header)


def test_card_loading_snippet_runs(hub_and_entry, capsys) -> None:
    card, compiled_case = hub_and_entry
    block = re.search(r"```python\n(.*?)```", card, re.S)
    assert block is not None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block.group(1), "<card snippet>", "exec"), {})
    decoded_line, nodes_line = out.getvalue().strip().splitlines()
    seqs = compiled_case.case.sample(4, seed=0)
    assert decoded_line == str(compiled_case.run(seqs))
    assert nodes_line == str(compiled_case.graph.nodes)


@pytest.fixture()
def hub_and_entry(compiled, monkeypatch, tmp_path: Path):
    """case-33 pushed to a local Hub server; the zoo root the snippet sees is empty."""
    from zoo.hub import push_entries

    server = hub_environment(monkeypatch, tmp_path)
    try:
        entry = build_entry(compiled("33"), tmp_path / "src" / "entries")
        push_entries([entry], repo_id=REPO)
        monkeypatch.setenv("ZOO_HOME", str(tmp_path / "empty-root"))
        yield (entry / "README.md").read_text(), compiled("33")
        assert any("/resolve/" in path for _, path in server.requests)  # the snippet used the Hub
    finally:
        server.stop()


def _schema_2_validation() -> dict:
    """validation.json as siit.validation writes it since schema 2: per-shape effects nested in every
    node row, and a realism section."""
    shapes = ("padded", "unpadded", "partly_padded")
    rows = [{"node": n, "in_circuit": n == "m0", "resample": 0.5 if n == "m0" else 0.0, "mean": 0.0, "zero": 0.01,
             "inert": False, "by_shape": {s: {"resample": 0.0, "mean": 0.0, "zero": 0.01} for s in shapes}}
            for n in ("a0.h0", "m0", "m1")]
    heuristics = {"output_norm": 0.6, "output_variance": 0.55, "weight_norm": 0.7, "logit_variance": 1.0}
    return {
        "schema_version": 2, "input_shapes": list(shapes),
        "metrics": {"accuracy": 1.0, "iia": 1.0, "siia": 1.0},
        "node_effects": rows,
        "max_out_of_circuit_effect": {"resample": 0.0, "mean": 0.0, "zero": 0.01},
        "max_out_of_circuit_effect_by_shape": {s: {"resample": 0.0, "mean": 0.0, "zero": 0.01 * i}
                                               for i, s in enumerate(shapes)},
        "realism": {
            "heuristics": {k: {"auroc": v, "separation": v} for k, v in heuristics.items()},
            "bounded_heuristics": ["output_norm", "output_variance", "weight_norm"],
            "max_separation": 0.7, "variance_floor_ratio": 0.42,
            "nodes": [{"node": n, "in_circuit": n == "m0", "output_norm": 2.0, "output_variance": 3.0,
                       "weight_norm": 8.0, "output_weight_norm": 2.0, "logit_variance": 0.1}
                      for n in ("a0.h0", "m0", "m1")],
        },
    }


def _schema_2_training() -> dict:
    return {"schema_version": 1, "config": {"seed": 0}, "realism": {
        "distractors": [{"node": "a0.h0", "kind": "previous_token", "offset": 2, "variance_factor": 1.0,
                         "offset_factor": 1.0, "r2": 0.97},
                        {"node": "m1", "kind": "token_position", "offset": 0, "variance_factor": 1.0,
                         "offset_factor": 1.0, "r2": 0.93}],
        "head_rescale": {"a0.h0": [2.0, 0.5]}, "notes": "..."}}


def test_model_card_renders_schema_2_validation_with_realism(compiled) -> None:
    from zoo.card import render_model_card

    c = compiled("33")
    case = {**c.case.metadata(), "encoding": c.encoding.to_json()}
    card = render_model_card(name="case-33", config=c.config, circuit=c.graph.to_json(), case=case,
                             training=_schema_2_training(), validation=_schema_2_validation())
    meta = front_matter(card)
    assert meta["zoo"]["validation"]["accuracy"] == 1.0
    assert "$" not in card.replace("$ZOO_HOME", "").replace("$ZOO_REPO_ID", "")
    # nested per-shape effects do not break the node table, and get a table of their own
    assert "| node | in_circuit | resample | mean | zero | inert |" in card
    assert "| a0.h0 | False | 0.000 | 0.000 | 0.010 | False |" in card
    assert "| input shape | resample | mean | zero |" in card and "| partly_padded | 0.000 | 0.000 | 0.020 |" in card
    realism = card[card.index("## Realism"):card.index("## Training")]
    assert "| weight_norm | 0.700 | 0.700 | yes |" in realism
    assert "| logit_variance | 1.000 | 1.000 | no (reported) |" in realism
    assert "Variance floor ratio" in realism and "0.420" in realism
    assert "| `a0.h0` | False | 2.000 | 3.000 | 8.000 | a random feature of the token 2 position(s) back | 0.970 |" in realism
    assert "| `m0` | True |" in realism and "the task (circuit)" in realism
    assert "position code" in realism and "rescaled" in realism
    assert "What this means for you" in realism and "Direct logit attribution" in realism
    assert "beyond the 0.75 target" not in realism  # every bounded heuristic is within it here


def test_model_card_of_an_entry_without_realism_says_so(entry: Path) -> None:
    card = (entry / "README.md").read_text()
    realism = card[card.index("## Realism"):card.index("## Training")]
    assert "No realism measurements in this entry" in realism and "zoo realism case 33" in realism
    assert "input shape" not in card  # schema 1: no per-shape effects


def test_model_card_names_a_heuristic_beyond_the_target(compiled) -> None:
    from zoo.card import render_model_card

    c = compiled("33")
    validation = _schema_2_validation()
    validation["realism"]["heuristics"]["weight_norm"] = {"auroc": 0.15, "separation": 0.85}
    card = render_model_card(name="case-33", config=c.config, circuit=c.graph.to_json(),
                             case={**c.case.metadata(), "encoding": c.encoding.to_json()},
                             training=_schema_2_training(), validation=validation)
    assert "on this entry weight_norm still separate(s) the circuit beyond the 0.75 target" in card


def test_model_card_lists_what_training_adapted(compiled) -> None:
    from zoo.card import render_model_card

    c = compiled("33")
    case = {**c.case.metadata(), "encoding": c.encoding.to_json()}
    training = dict(_schema_2_training(), adaptation={
        "budget": 4000, "extensions": 0,
        "actions": [{"step": 675, "action": "emphasis", "reason": "no new best for 8 validations"},
                    {"step": 1025, "action": "lr_restart", "reason": "no new best for 8 validations", "lr": 0.005},
                    {"step": 1125, "action": "rollback", "reason": "worst task metric 0.7567, 0.2 or more below 0.9737 "
                     "at step 1075: back to that step's weights", "lr": 0.0039, "to_step": 1075}]})
    card = render_model_card(name="case-33", config=c.config, circuit=c.graph.to_json(), case=case,
                             training=training, validation=_schema_2_validation())
    section = card[card.index("## Training"):]
    assert "- step 675: emphasis (no new best for 8 validations)" in section
    assert "- step 1025: lr_restart" in section
    assert "- step 1125: rollback (worst task metric 0.7567" in section and "stalled or collapsed" in section
    plain = render_model_card(name="case-33", config=c.config, circuit=c.graph.to_json(), case=case,
                              training=_schema_2_training(), validation=_schema_2_validation())
    assert "adapted" not in plain


def test_model_card_says_where_a_busy_target_varies() -> None:
    """A distractor with a position profile (siit.position_profiles) or one position (Distractor.at) is
    described as such in the card's node table; one without either as before (old entries)."""
    from zoo.card import _distractor_text

    plain = {"kind": "previous_token", "offset": 2}
    assert _distractor_text(plain) == "a random feature of the token 2 position(s) back"
    assert _distractor_text({**plain, "profile": [1.0, 2.0, 0.5]}).endswith(
        "varying more at some positions than at others (its profile in training.json)")
    assert _distractor_text({**plain, "at": 3}).endswith(", at position 3 only")
    assert _distractor_text({**plain, "component_shares": [0.5, 0.5]}) == (
        "a random feature of the token 2 position(s) back (3 such features, each along its own direction)")
    assert _distractor_text({**plain, "component_shares": [1.0, 0.05, 0.0]}).endswith(  # under 0.1: no feature yet
        "(2 such features, each along its own direction)")
    reader = {"kind": "token_position", "offset": 0, "reads": ["a0.h3", "a1.h2"], "read_weights": [0.5, -0.5]}
    assert _distractor_text(reader) == ("the absolute difference of a random position code and a weighted sum of what "
                                        "`a0.h3`, `a1.h2` compute (read from their outputs)")
    assert _distractor_text({**plain, "reads": ["a0.h0"], "read_weights": [1.0]}) == (
        "a weighted sum of what `a0.h0` compute (read from their outputs), 2 position(s) back")
