"""`zoo <verb> <kind> <id> [options]`: a thin CLI over the library functions.

Module-level imports are standard library only, so `zoo --help` and `zoo list` stay under a
second; each verb imports torch / jax / tracr inside its function when it needs them.
Errors are one line (`zoo: error: ...`, exit 2); tracebacks only with --debug.
"""

from __future__ import annotations

import argparse
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
