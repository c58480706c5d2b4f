"""A `package.module:function` spec -> the callable it names (a researcher's case or method)."""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

_SPEC = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")


def import_spec(spec: str, what: str) -> Any:
    """The callable named by `package.module:function` (a researcher's case or method).

    Raises ValueError with a one-line message that starts with `{what} {spec!r}:`.
    """
    module_name, _, func_name = spec.partition(":")
    if not _SPEC.fullmatch(spec):
        raise ValueError(f"{what} {spec!r}: expected package.module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"{what} {spec!r}: cannot import {module_name!r} ({exc})") from None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a module that raises (or exits) on import: one line, never an exit
        raise ValueError(f"{what} {spec!r}: importing {module_name!r} raised {type(exc).__name__}: "
                         f"{str(exc)[:120]}") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ValueError(f"{what} {spec!r}: {module_name} has no function {func_name!r}")
    if inspect.isbuiltin(func) or inspect.isclass(func):
        # sys:exit, os:abort, ...: a case or method is a Python function someone wrote for the zoo
        raise ValueError(f"{what} {spec!r}: {func_name} is a built-in or a class, not a Python function")
    return func
