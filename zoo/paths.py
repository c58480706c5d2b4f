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
    """The compiled-case cache every zoo root reuses (rasp_programs.compile.shared_cache_dir:
    $ZOO_COMPILE_CACHE, else ~/.cache/zoo-compiled)."""
    from rasp_programs.compile import shared_cache_dir

    return shared_cache_dir()
