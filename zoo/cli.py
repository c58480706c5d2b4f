"""`zoo <verb> <kind> <id> [options]`: a thin CLI over the library functions.

Module-level imports are standard library only, so `zoo --help` and `zoo list` stay under a
second; each verb imports torch / jax / tracr inside its function when it needs them.
Errors are one line (`zoo: error: ...`, exit 2); tracebacks only with --debug.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence

from zoo.commands import VERB_MODULES
from zoo.commands.common import Parser
from zoo.errors import CriterionNotMet, ZooError

DESCRIPTION = """\
zoo: transformers whose circuit is known, and a scorer for circuit-discovery methods.

Kinds: `case` (a RASP program compiled with Tracr: an InterpBench case number such as 33, a
generated case such as gen-0-1 from `zoo generate`, or package.module:function returning a
rasp_programs.Case) and `planted` (hand-written models).
Entries live under $ZOO_HOME (default ~/.cache/zoo); --root overrides it.
Exit codes: 0 done, 1 ran but did not meet its criterion, 2 bad input."""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="zoo", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="verb", metavar="<verb>", parser_class=Parser)
    sub.required = True
    for module in VERB_MODULES:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; argv None: the process's own command line (the console script, `python -m
    zoo.cli`), which exits when this returns."""
    if argv is None:
        keep_freed_memory()
    code = _run(argv)
    if argv is None:
        # the process ends next: leave what is alive out of the interpreter's last cyclic garbage
        # collection, a walk over torch's objects that cost 0.4 s of every `zoo train` (nothing
        # is written then: atexit handlers and stream flushes still run)
        gc.freeze()
    return code


MALLOC_THRESHOLD = 1 << 30
"""glibc malloc's mmap and trim thresholds in a `zoo` process (keep_freed_memory)."""


def keep_freed_memory() -> None:
    """Have glibc's malloc keep freed memory for the next allocation instead of giving it back to
    the system: the batched passes of training's checks and of validation make and drop tensors of
    megabytes, and mapping each one afresh (its pages faulted in again) cost more than the maths
    (a GELU over [7680, 6, 64]: 10 ms, 1.5 ms on reused memory). The numbers are the same; the
    process keeps its peak memory until it exits. A no-op where malloc is not glibc's."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols: libc's malloc
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
    mallopt(m_mmap_threshold, MALLOC_THRESHOLD)
    mallopt(m_trim_threshold, MALLOC_THRESHOLD)


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = args.debug or getattr(args, "sub_debug", False)
    try:
        code = args.func(args)
        return int(code or 0)
    except (ZooError, CriterionNotMet) as exc:
        if debug:
            raise
        print(f"zoo: error: {exc}" if isinstance(exc, ZooError) else f"zoo: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("zoo: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # an unexpected failure still gets one line without --debug
        if debug:
            raise
        print(f"zoo: error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
