"""Where the zoo keeps things: `$ZOO_HOME`, default `~/.cache/zoo`; every command can override."""

from __future__ import annotations

import os
from pathlib import Path


def zoo_root(override: str | os.PathLike[str] | None = None) -> Path:
    """The local zoo root: the override if given, else $ZOO_HOME, else ~/.cache/zoo."""
    if override is not None:
        return Path(override).expanduser()
    env = os.environ.get("ZOO_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "zoo"


def compiled_dir(root: Path) -> Path:
    """Cache of Tracr-compiled models (safetensors + JSON)."""
    return root / "compiled"


def entries_dir(root: Path) -> Path:
    """Finished zoo entries, one directory each (`case-33/`, `planted-ioi/`)."""
    return root / "entries"


def compile_cache_dir() -> Path | None:
    """The compiled-case cache every zoo root reuses (rasp_programs.compile's shared cache):
    $ZOO_COMPILE_CACHE if set ("off" or empty: none), else ~/.cache/zoo-compiled. Entries are keyed
    by the case's program and the Tracr version, so roots and checkouts can share it safely."""
    env = os.environ.get("ZOO_COMPILE_CACHE")
    if env is not None:
        return None if env.strip() in ("", "off") else Path(env).expanduser()
    return Path.home() / ".cache" / "zoo-compiled"
