"""What every verb shares: the one-line-error parser, the common options and progress bars.
Standard library only (the CLI must start fast)."""

from __future__ import annotations

import argparse
from typing import Any


class Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"zoo: error: {message} (see `{self.prog} --help`)\n")


def add_common(parser: argparse.ArgumentParser, *, kind_id: bool = True) -> None:
    """Options every `<verb> <kind> <id>` command takes."""
    if kind_id:
        parser.add_argument("kind", choices=("case", "planted"), help="what kind of entry")
        parser.add_argument("id", help="case number (e.g. 33), package.module:function, or a planted "
                            "model's name (e.g. causal-bench-4x4)")
    parser.add_argument("--root", metavar="DIR", help="zoo root (default $ZOO_HOME or ~/.cache/zoo)")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")
    parser.add_argument("--debug", dest="sub_debug", action="store_true", help="show full tracebacks")


def add_device(parser: argparse.ArgumentParser) -> None:
    """--device: where the model runs (eval.core.device)."""
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where the model runs: auto (default) takes a CUDA GPU when torch sees one, else "
                        "the CPU; cuda without a GPU is an error. Float results differ by device, so the "
                        "device, its name, dtype and torch threads are recorded with them")


def add_corruption(parser: argparse.ArgumentParser, extra: str = "") -> None:
    """--corruption: the counterfactuals methods contrast with (eval.core.corruption)."""
    parser.add_argument("--corruption", default=None, metavar="STYLE",
                        help="how the methods' counterfactuals are made: resample (an independent draw, what SIIT "
                        "trains with) or token:K (a minimal pair: the clean input with its K-th token replaced; -1 "
                        f"the last){extra}; default the entry's own (resample, but token:1 for the "
                        "distribution-shift family)")


def device_from(args: argparse.Namespace):
    """--device as `cpu` or `cuda:N`, or a one-line ZooError (exit 2) for a GPU this machine lacks."""
    from zoo.loader import device_or_error

    return device_or_error(args.device)


def corruption_from(args: argparse.Namespace) -> str | None:
    """--corruption checked for its form (None: the entry's own), or a one-line ZooError (exit 2)."""
    if args.corruption is None:
        return None
    from eval.core.corruption import CorruptionError, parse_corruption
    from zoo.errors import ZooError

    try:
        return parse_corruption(args.corruption).spec
    except CorruptionError as exc:
        raise ZooError(str(exc)) from None


def step_bar(total: int, desc: str | None = None):
    """A tqdm bar of training steps (imported late: the CLI must start fast) with `update_to(step,
    postfix)`, siit.trainer's progress callback: the bar follows the step budget, which grows when
    training extends it (siit.adaptation)."""
    import sys

    from tqdm import tqdm

    bar = tqdm(total=total, file=sys.stderr, unit="step", desc=desc, mininterval=0.25, leave=False,
               dynamic_ncols=True)

    def update_to(step: int, postfix: dict[str, float]) -> None:
        if bar.n == 0 and step > 1:
            # a resumed run: the steps before this one were done earlier, so they count neither
            # towards the rate nor the time left (else the first update reads thousands of steps/s)
            bar.n = bar.initial = bar.last_print_n = step - 1
        bar.n = step
        bar.total = int(postfix.get("budget", bar.total))
        bar.set_postfix({k: f"{v:.3f}" for k, v in postfix.items() if k != "budget"}, refresh=False)
        bar.update(0)

    bar.update_to = update_to  # type: ignore[attr-defined]
    return bar


class ValidationProgress:
    """An entry's validation as a tqdm bar over its parts (siit.validation.PARTS, then
    zoo.entry_verdicts.PATCHING_PARTS: minutes on a wide model), counting the parts done and naming the one
    running. Made when the first part starts: `before` (training's step bar) closes then, and an entry that
    fails before it is validated shows no bar. `stage` is the callback siit.validation and zoo.entry_verdicts
    call as each part starts; call `close()` at the end (it closes `before` too)."""

    def __init__(self, before: Any = None) -> None:
        self._before, self._bar, self._parts = before, None, ()

    def stage(self, name: str) -> None:
        if self._bar is None:
            import sys

            from tqdm import tqdm

            from siit.validation import PARTS
            from zoo.entry_verdicts import PATCHING_PARTS

            if self._before is not None:
                self._before.close()
            self._parts = PARTS + PATCHING_PARTS
            self._bar = tqdm(total=len(self._parts), file=sys.stderr, desc="validating", leave=False,
                             dynamic_ncols=True, bar_format="{desc} [{elapsed}]")
        self._bar.n = self._parts.index(name)
        self._bar.set_description_str(f"validating: {self._bar.n}/{len(self._parts)} parts done, now {name}")

    def close(self) -> None:
        """Close the bar and `before` (closing a closed tqdm bar does nothing)."""
        for bar in (self._before, self._bar):
            if bar is not None:
                bar.close()


def method_bars(file: Any = None, disable: bool | None = None):
    """eval.evaluate's run progress as tqdm bars: one bar per method over its runs (the main run and
    the stability reruns), the current run's own steps (edges decided, passes, SP steps) as its
    postfix. Call `.close()` at the end. On stderr by default, and only when it is a terminal
    (disable=None): a log or a caller reading the one-line error gets no bar."""
    import sys

    from tqdm import tqdm

    file = sys.stderr if file is None else file

    bars: list = []  # the current method's bar

    def close() -> None:
        while bars:
            bars.pop().close()

    def run(method: str, index: int, runs: int):
        if index == 0:  # a new method
            close()
            bars.append(tqdm(total=runs, file=file, unit="run", desc=method, mininterval=0.25,
                             leave=False, dynamic_ncols=True, disable=disable))
        bar = bars[-1]
        bar.n = index
        bar.set_postfix_str("", refresh=False)
        bar.update(0)

        def step(done: int, total: int) -> None:
            bar.set_postfix_str(f"{done}/{total}", refresh=done >= total)  # the last count always shows
            bar.update(0)  # redraws at most every mininterval

        return step

    run.close = close  # type: ignore[attr-defined]
    return run
