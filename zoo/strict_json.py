"""JSON bytes <-> Python data, strictly: no NaN / Infinity, no numbers out of range, no nesting
deeper than MAX_JSON_DEPTH, no strings that are not Unicode text. Every failure is one
ArtifactError line naming the file (`what`).
"""

from __future__ import annotations

import json
import math
from typing import Any

from zoo.errors import ZooError

MAX_JSON_DEPTH = 64


class ArtifactError(ZooError, ValueError):
    """An entry that is missing, incomplete, tampered with or unsafe (the CLI: one line, exit 2)."""




def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _check_tree(obj: Any) -> str | None:
    """Why `obj` (parsed JSON) is not plain data, or None: nesting too deep, a non-finite number."""
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return f"nested deeper than {MAX_JSON_DEPTH} levels"
        if isinstance(value, float) and not math.isfinite(value):
            return "holds a number out of range"
        if isinstance(value, str) and not _utf8(value):
            return "holds a string that is not Unicode text (a lone surrogate)"
        if isinstance(value, dict):
            if not all(_utf8(k) for k in value):
                return "holds a key that is not Unicode text (a lone surrogate)"
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return None


def _utf8(text: str) -> bool:
    """Whether `text` encodes as UTF-8 (JSON's \\ud800 escapes decode to lone surrogates, which
    cannot be written back: such a file would load and then break `zoo push`)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_json(data: bytes, what: str) -> dict[str, Any]:
    """A JSON object from bytes, or one ArtifactError line saying why not (`what` names the file)."""
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
    except RecursionError:
        raise ArtifactError(f"{what} is nested too deeply to be read") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{what} is not valid JSON ({str(exc).splitlines()[0][:120]})") from None
    if not isinstance(value, dict):
        raise ArtifactError(f"{what} must be a JSON object, got {type(value).__name__}")
    why = _check_tree(value)
    if why:
        raise ArtifactError(f"{what} {why}")
    return value


def dumps_json(data: Any, what: str) -> str:
    """JSON text without NaN / Infinity (which JSON does not have): a non-finite value is refused."""
    try:
        return json.dumps(data, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    except ValueError:
        where = _nonfinite_path(data, "")
        raise ArtifactError(f"{what} holds a NaN or infinite number at {where or '?'}; refused (JSON has no "
                            "such numbers; a NaN metric means the run diverged)") from None


def _nonfinite_path(value: Any, path: str) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return path or "(top level)"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, child in items:
        found = _nonfinite_path(child, f"{path}.{key}" if path else str(key))
        if found:
            return found
    return None
