"""A finished directory -> in place of another, in one step a concurrent reader cannot observe
half-done. Used for zoo entries (zoo.artifact) and training checkpoints (siit.checkpoint).

Linux's renameat2(RENAME_EXCHANGE) swaps two directory names atomically: `dest` always names a
complete directory, the old one or the new one, never nothing and never a mixture; the old
content is then left under the temporary name and removed. Where the kernel or file system lacks
it (other systems, some network file systems), the fallback renames `dest` aside and the new
directory into place: two renames, with a moment in which `dest` is missing.
Stdlib only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import shutil
import tempfile
from pathlib import Path

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


@functools.lru_cache(maxsize=1)
def _renameat2():
    """libc's renameat2, or None where there is none (looked up once: it does not change)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        func = libc.renameat2
    except (OSError, AttributeError):
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func


def exchange(a: Path, b: Path) -> bool:
    """Swap the names `a` and `b` atomically; False where the system cannot (nothing changed)."""
    func = _renameat2()
    if func is None:
        return False
    if func(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), str(a))


def replace_directory(new: Path, dest: Path) -> None:
    """Put the complete directory `new` (a sibling of `dest`) at `dest`; `new` is gone afterwards
    and the previous `dest`, if any, is removed."""
    if not dest.exists() and not dest.is_symlink():
        try:
            os.rename(new, dest)
            return
        except OSError as exc:  # someone created dest meanwhile: swap with it below
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
    if exchange(new, dest):
        _remove(new)  # `new` now holds the old content
        return
    old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old.", dir=dest.parent))
    old.rmdir()
    os.rename(dest, old)
    try:
        os.rename(new, dest)
    except BaseException:
        os.rename(old, dest)  # put the previous directory back rather than leave nothing
        raise
    _remove(old)


def _remove(path: Path) -> None:
    """Remove what an old `dest` was: a folder, or a symbolic link (rmtree refuses links, which left
    a stray `.name.tmp.*` link beside an entry that had been a link)."""
    if path.is_symlink():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def sibling_tmp(dest: Path, tag: str = "tmp") -> Path:
    """A fresh empty directory next to `dest` (same file system, so renames are atomic), hidden
    from listings by its leading dot."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{dest.name}.{tag}.", dir=dest.parent))


def fsync_tree(path: Path) -> None:
    """Flush every file of `path` and the directory itself, so a rename publishes durable data."""
    for child in path.iterdir():
        if child.is_file():
            fd = os.open(child, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
