"""`METHOD.FIELD=VALUE` strings -> methods bound to options other than their defaults.

A built-in method keeps its settings in a frozen options dataclass, the default of its `options`
keyword (eval.methods.acdc.AcdcOptions: the τ grid and metric; eval.methods.edge_patching.IGOptions: the
integration steps; eval.methods.subnetwork_probing.SPOptions: the penalty grid ...). `with_options`
binds a changed copy with functools.partial, so the method runs, is fingerprinted (eval.leaderboard.cells's
cache key reads signature defaults) and is recorded (`options_of`) with the values it used.
Text values, as the command line gives them, are read by the field's type: numbers, a
comma-separated tuple, one of a Literal's values.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from eval.methods.interface import Method, MethodError


def options_of(method: Method) -> Any | None:
    """The options dataclass `method` runs with (bound by with_options, or its signature's
    default), or None for a method without one."""
    try:
        param = inspect.signature(method.function).parameters.get("options")
    except (TypeError, ValueError):  # builtins without a signature
        return None
    default = None if param is None else param.default
    if default is None or isinstance(default, type) or not dataclasses.is_dataclass(default):
        return None
    return default


def parse_method_options(items: Sequence[str], running: Sequence[str] | None = None) -> dict[str, dict[str, str]]:
    """`METHOD.FIELD=VALUE` strings -> {method key: {field: value text}}; a one-line MethodError
    for a malformed item, a field given twice, or a method not among `running` (an option that
    nothing would read is a mistake, not a no-op)."""
    parsed: dict[str, dict[str, str]] = {}
    for item in items:
        target, sep, value = item.partition("=")
        key, dot, field = target.strip().rpartition(".")
        if not sep or not dot or not key or not field:
            raise MethodError(f"method option {item!r} must be METHOD.FIELD=VALUE, e.g. acdc.taus=0,0.01,0.1")
        fields = parsed.setdefault(key, {})
        if field in fields:
            raise MethodError(f"method option {key}.{field} is given twice")
        fields[field] = value.strip()
    idle = [key for key in parsed if running is not None and key not in running]
    if idle:
        raise MethodError(f"--method-option names {', '.join(idle)}, which no --method runs")
    return parsed


def with_options(method: Method, fields: Mapping[str, Any]) -> Method:
    """`method` with these fields of its options replaced; strings are read by the field's type.
    A one-line MethodError for a method without options, an unknown field or a value its options
    refuse (their __post_init__ checks)."""
    current = options_of(method)
    if current is None:
        raise MethodError(f"method {method.key!r} takes no options")
    names = [f.name for f in dataclasses.fields(current)]
    hints = typing.get_type_hints(type(current))
    values = {}
    for name, value in fields.items():
        if name not in names:
            raise MethodError(f"method {method.key!r} has no option {name!r}; its options: {', '.join(names)}")
        values[name] = _read(f"{method.key}.{name}", hints[name], value) if isinstance(value, str) else value
    try:
        options = dataclasses.replace(current, **values)
    except (TypeError, ValueError) as exc:
        raise MethodError(f"method {method.key!r}: {exc}") from None
    return dataclasses.replace(method, function=functools.partial(method.function, options=options))


def _read(label: str, hint: Any, text: str) -> Any:
    """A command-line value as the field's type: int, float, str, bool, a Literal's value, or a
    comma-separated tuple of one of those."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return tuple(_scalar(label, args[0], part.strip()) for part in text.split(",") if part.strip())
    return _scalar(label, hint, text)


def _scalar(label: str, hint: Any, text: str) -> Any:
    if typing.get_origin(hint) is Literal:
        allowed = typing.get_args(hint)
        if text not in allowed:
            raise MethodError(f"{label} must be one of {', '.join(map(str, allowed))}, got {text!r}")
        return text
    if hint is bool:
        if text.lower() not in ("true", "false"):
            raise MethodError(f"{label} must be true or false, got {text!r}")
        return text.lower() == "true"
    if hint is str:
        return text
    if hint in (int, float):
        try:
            value = hint(text)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value):  # reports are strict JSON: no inf or nan in them
            raise MethodError(f"{label} must be {'an integer' if hint is int else 'a finite number'}, got {text!r}")
        return value
    raise MethodError(f"{label} cannot be set from the command line (type {hint})")
