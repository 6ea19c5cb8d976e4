"""Folders import downward only. This walks every import statement of the engine."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# module prefix -> prefixes it must never import
FORBIDDEN = {
    "dse.errors": ["dse.", "formulations"],
    "dse.units": ["dse.", "formulations"],
    "dse.typed_data": [
        "dse.catalog",
        "dse.perf",
        "dse.sim",
        "dse.search",
        "dse.study",
        "dse.cli",
        "formulations",
    ],
    "dse.catalog": [
        "dse.perf",
        "dse.sim",
        "dse.search",
        "dse.study",
        "dse.report",
        "dse.export",
        "dse.cli",
        "formulations",
    ],
    "dse.perf": ["dse.sim", "dse.search", "dse.study", "dse.cli", "formulations"],
    # formulations see numbers only: no engine objects cross into them
    "formulations": ["dse."],
    "dse.workload": [
        "dse.catalog",
        "dse.perf",
        "dse.placement",
        "dse.sim",
        "dse.search",
        "dse.study",
        "dse.cli",
        "formulations",
    ],
    "dse.placement": ["dse.sim", "dse.search", "dse.study", "dse.cli"],
    "dse.study": ["dse.cli"],
    "dse.atomic": ["dse.", "formulations"],
    "dse.sim": ["dse.cli", "dse.study", "dse.search", "formulations"],
}


def _modules() -> dict[str, Path]:
    out = {}
    for root in ("dse", "formulations"):
        for path in (REPO / root).rglob("*.py"):
            rel = path.relative_to(REPO).with_suffix("")
            name = ".".join(p for p in rel.parts if p != "__init__")
            out[name] = path
    return out


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _violations() -> list[str]:
    bad = []
    for mod, path in _modules().items():
        imported = _imports(path)
        for prefix, banned in FORBIDDEN.items():
            if mod == prefix or mod.startswith(prefix + "."):
                bad += [
                    f"{mod} imports {i}"
                    for i in imported
                    for b in banned
                    if (i + ".").startswith(b) or i == b.rstrip(".")
                ]
        if not mod.startswith("dse.cli"):
            bad += [f"{mod} imports the CLI ({i})" for i in imported if i.startswith("dse.cli")]
    return bad


def test_folders_import_downward_only() -> None:
    assert _violations() == []


def test_the_walker_sees_imports() -> None:
    """Guard against a walker that finds nothing and so passes vacuously."""
    imports = _imports(REPO / "dse" / "catalog" / "loader.py")
    assert "dse.catalog.hardware" in imports and "dse.errors" in imports
    assert len(_modules()) >= 8
