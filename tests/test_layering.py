"""Folders import downward only: the layers contract of ``pyproject.toml`` ([tool.importlinter]),
checked by import-linter over every import statement of the engine, inside functions too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).parent / "lint-imports"


def _lint(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT), "--no-cache", str(config)], cwd=REPO, capture_output=True, text=True, check=False
    )


def test_folders_import_downward_only() -> None:
    proc = _lint(REPO / "pyproject.toml")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 kept, 0 broken" in proc.stdout


def test_the_contract_catches_an_upward_import(tmp_path: Path) -> None:
    """Guard against a contract that passes vacuously: the layers upside down must break."""
    config = tmp_path / "upside_down.toml"
    config.write_text(
        '[tool.importlinter]\nroot_packages = ["dse"]\n\n[[tool.importlinter.contracts]]\n'
        'name = "upside down"\ntype = "layers"\nlayers = ["dse.errors", "dse.cli"]\n'
    )
    proc = _lint(config)
    assert proc.returncode != 0 and "BROKEN" in proc.stdout


def _layers() -> list[list[str]]:
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = config["contracts"]
    return [[m.strip() for m in layer.split("|")] for layer in contract["layers"]]


def test_every_module_of_the_engine_is_in_a_layer() -> None:
    """A module in no layer is checked against none (dse.design_power was: imported by the
    evaluation, placed nowhere)."""
    placed = {m for layer in _layers() for m in layer}
    found = {f"dse.{p.stem}" for p in (REPO / "dse").glob("*.py") if p.stem != "__init__"}
    found |= {f"dse.{p.parent.name}" for p in (REPO / "dse").glob("*/__init__.py")} | {"formulations"}
    assert found - placed == set() and placed - found == set()


def test_the_architecture_page_shows_the_contract() -> None:
    """docs/architecture.md's table of layers, top to bottom, is the contract's."""
    page = (REPO / "docs" / "architecture.md").read_text().split("## The layers", 1)[1]
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    shown = [[m.strip(" `") for m in row.split(" | ")[0].strip("| ").split("\\|")] for row in rows]
    assert shown == _layers()
