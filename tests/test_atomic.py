"""Atomic writes leave the old file or folder, or the whole new one, and nothing of their own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import dse.atomic as atomic


def test_a_folder_that_cannot_be_moved_aside_leaves_no_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report's folder read-only (or held by another program): one error, the old folder in
    place, and no empty `.report.*.tmp` beside it."""
    report = tmp_path / "report"
    report.mkdir()
    (report / "report.md").write_text("old")
    real = os.replace

    def refused(src: object, dst: object) -> None:
        if Path(str(src)) == report:
            raise PermissionError(13, "Permission denied")
        real(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(atomic.os, "replace", refused)
    with pytest.raises(PermissionError), atomic.atomic_folder(report) as tmp:
        (tmp / "report.md").write_text("new")
    assert (report / "report.md").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_a_link_is_written_through_and_a_pipe_refused(tmp_path: Path) -> None:
    target, link = tmp_path / "real.txt", tmp_path / "link.txt"
    target.write_text("old")
    link.symlink_to(target)
    atomic.write_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    with pytest.raises(OSError, match="a device, pipe or socket, not a regular file"):
        atomic.write_text(pipe, "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "pipe", "real.txt"]


def test_an_output_the_place_refuses_is_the_storage_refusing_else_bad_input() -> None:
    """As a study's storage: full, read-only or not permitted is exit 1 naming the cause; a path
    that cannot be (a missing place, a folder where the file goes) is exit 2."""
    import errno

    from dse.errors import InputError, StorageFault, output_error

    full = output_error(OSError(errno.ENOSPC, "No space left on device"), "dse predict", "--out", "x.csv")
    assert isinstance(full, StorageFault) and full.exit_code == 1
    assert str(full) == "x.csv: the disk is full (dse predict: --out)"
    ro = output_error(OSError(errno.EROFS, "Read-only file system"), "dse simulate", "--out", "sim")
    assert str(ro) == "sim: it is read-only (dse simulate: --out)" and ro.exit_code == 1
    wrong = output_error(IsADirectoryError(errno.EISDIR, "Is a directory"), "dse predict", "--out", "d")
    assert isinstance(wrong, InputError) and wrong.exit_code == 2
    assert str(wrong) == "dse predict: --out = 'd': cannot be written (Is a directory)"


def test_a_link_to_a_folder_has_the_folder_it_names_replaced(tmp_path: Path) -> None:
    """A report folder that is a link (to a shared disk): the link stays, its target is new."""
    real, link = tmp_path / "shared" / "report", tmp_path / "report"
    real.mkdir(parents=True)
    (real / "report.md").write_text("old")
    link.symlink_to(real)
    with atomic.atomic_folder(link) as tmp:
        (tmp / "report.md").write_text("new")
    assert link.is_symlink() and (real / "report.md").read_text() == "new"
