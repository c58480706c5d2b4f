"""The model card's table of no-intervention looks (zoo.card_looks): an entry that predates the battery
renders without it; one that has it shows each look beside its chance band and says which give the
circuit away."""

from __future__ import annotations

from zoo.card_looks import battery_text


def _battery(over: list[str], met: bool) -> dict:
    row = lambda sep, chance, apart=False: {"kind": "activation", "apart": apart, "separation": sep,  # noqa: E731
                                            "chance_95": chance, "nodes": 10, "circuit_nodes": 2}
    return {"looks": {"output_norm": row(0.6, 0.94), "probe": row(1.0, 0.94),
                      "direct_logit_attribution": row(1.0, 0.94, True)},
            "bounds": {"look": 0.75, "median": 0.65, "apart": 0.85}, "over_bound": over, "met": met}


def test_an_entry_without_the_battery_renders_without_it() -> None:
    assert battery_text(None) == [] and battery_text({"looks": "?"}) == []


def test_the_battery_table_names_the_looks_that_give_the_circuit_away() -> None:
    text = "\n".join(battery_text(_battery(["direct_logit_attribution", "probe"], False)))
    assert "| probe | linear probe of the answer | 1.000 | 0.940 | 10 (2) | yes |" in text
    assert "| output_norm | mean output norm | 0.600 | 0.940 | 10 (2) | no |" in text
    assert "**Read it as:** probe find(s) the circuit without any intervention" in text
    assert "reported apart" in text and "Direct logit attribution reads the circuit off" in text
    assert "no look above finds the circuit" in "\n".join(battery_text(_battery([], True)))
