"""A score file's path -> its bytes, read as untrusted input: a regular file under MAX_SCORE_FILE_BYTES,
opened without blocking, never read past the limit (so a FIFO, /dev/zero or a sparse 2 GB file is
one error line, not a hang or an out-of-memory kill). Stdlib only.
"""

from __future__ import annotations

import os
import stat

MAX_SCORE_FILE_BYTES = 256 << 20
"""A MIB edge score file of a 12-layer, 12-head model (32,491 edges) is about 3 MB; 256 MiB leaves
room for far larger graphs while bounding what one file can make the process hold."""
MAX_SCORE_JSON_DEPTH = 32
"""MIB's files nest three levels deep (cfg / nodes / edges -> name -> fields)."""


class ScoreFileError(ValueError):
    """A score file that cannot be read safely (one line)."""


def read_score_file(path: str | os.PathLike[str], source: str) -> bytes:
    """The bytes of the score file at `path`; ScoreFileError if it is not a regular file or too large."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ScoreFileError(f"cannot read {source}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ScoreFileError(f"{source} is not a regular file (a folder, FIFO, socket or device); "
                                 "a score file is a JSON file")
        if info.st_size > MAX_SCORE_FILE_BYTES:
            raise ScoreFileError(f"{source} is {info.st_size >> 20} MiB, over the limit of "
                                 f"{MAX_SCORE_FILE_BYTES >> 20} MiB for a score file; refused unread")
        data = fh.read(MAX_SCORE_FILE_BYTES + 1)
    if len(data) > MAX_SCORE_FILE_BYTES:  # it grew while being read
        raise ScoreFileError(f"{source} is over the limit of {MAX_SCORE_FILE_BYTES >> 20} MiB; refused")
    return data


def json_depth_exceeds(value: object, limit: int = MAX_SCORE_JSON_DEPTH) -> bool:
    """Whether parsed JSON nests deeper than `limit` (iterative: no recursion of its own)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False


