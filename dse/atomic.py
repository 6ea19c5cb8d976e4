"""Atomic file writes: a reader sees the old file or the whole new one, never a part."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: Path, *, staging: Path | None = None) -> Iterator[Path]:
    """A temporary path beside ``path`` (or in the folder ``staging``, on the same file system) to
    write to; renamed onto ``path`` when the block ends without an error, removed otherwise. A
    symbolic link is written through (its target replaced); a device, pipe or socket is refused
    (OSError) rather than replaced by a file."""
    if path.is_symlink():
        path = path.resolve()
    if path.exists() and not path.is_file() and not path.is_dir():
        raise OSError(errno.EINVAL, "a device, pipe or socket, not a regular file", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = path.parent if staging is None else staging
    folder.mkdir(parents=True, exist_ok=True)
    if folder.stat().st_dev != path.parent.stat().st_dev:
        folder = path.parent  # a rename cannot cross file systems (a table's folder linked elsewhere)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; the result is an ordinary file
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)


STALE_TMP_S = 600.0
"""A temporary file or folder this old belongs to no running writer (a killed one left it)."""


def remove_stale(path: Path, *, staging: Path | None = None) -> None:
    """Remove the temporary files and folders beside ``path`` (or in ``staging``: see
    :func:`atomic_path`) that a killed writer left; a fresh one may be a concurrent writer's, and
    stays."""
    folder = path.parent if staging is None else staging
    for stale in folder.glob(f".{path.name}.*.tmp"):
        with contextlib.suppress(OSError):
            if time.time() - stale.stat().st_mtime > STALE_TMP_S:
                if stale.is_dir():
                    shutil.rmtree(stale, ignore_errors=True)
                else:
                    stale.unlink()


def probe_writable(path: Path) -> None:
    """Raise the OSError a write of ``path`` would meet at its nearest existing folder (not a
    folder, read-only, not permitted), found before long work rather than after it: a file is made
    and removed there, which tells what permission bits do not (root, read-only mounts)."""
    existing = next(p for p in (path.parent, *path.parent.parents) if p.exists())  # "/" always does
    if not existing.is_dir():
        raise OSError(errno.ENOTDIR, "not a folder", str(existing))
    fd, tmp = tempfile.mkstemp(dir=existing, prefix=".dse-probe.", suffix=".tmp")
    os.close(fd)
    os.remove(tmp)


def write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


@contextlib.contextmanager
def atomic_folder(path: Path) -> Iterator[Path]:
    """A temporary folder beside ``path`` to fill; put in place of ``path`` when the block ends
    without an error, removed otherwise. A reader sees the old folder or the whole new one (for the
    instant between two renames, none). Temporary folders a killed writer left are removed first."""
    if path.is_symlink():  # a link to a folder: the folder it names is the one replaced
        path = path.resolve()
    if path.exists() and not path.is_dir():  # a file of the same name is not replaced unasked
        raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    umask = os.umask(0)
    os.umask(umask)
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; the result is an ordinary folder
        old = None
        try:
            if path.exists():
                old = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
                os.replace(path, old / path.name)
            os.replace(tmp, path)
        finally:  # (the old folder emptied, or left in place when it could not be moved)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
