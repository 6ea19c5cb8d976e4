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
