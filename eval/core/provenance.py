"""Installed distributions -> the version record written into caches, training.json and reports."""

from __future__ import annotations

import platform
from collections.abc import Iterable
from importlib import metadata


def package_versions(dists: Iterable[str]) -> dict[str, str]:
    """{"python": "3.11.7", dist: version or "not installed", ...}."""
    out = {"python": platform.python_version()}
    for dist in dists:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out
