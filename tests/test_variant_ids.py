"""A what-if variant's id shares the catalog's names: it may reuse no hardware id or alias, and no
model id or alias either, as a catalog file may not (the loader refuses a model that repeats a
hardware id)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Cli

GRID = Path(__file__).resolve().parent / "data" / "tiny-grid.toml"


@pytest.mark.parametrize(
    "name,rule",
    [
        ("kimi-k2", "must not reuse a catalog model id or alias"),  # a model's id
        ("dsr1", "must not reuse a catalog model id or alias"),  # an alias of DeepSeek-V3
        ("h200", "must not reuse a catalog hardware id or alias"),
    ],
)
def test_a_variant_named_as_a_catalog_entry_is_one_line_and_nothing_written(
    cli: Cli, tmp_path: Path, name: str, rule: str
) -> None:
    text = GRID.read_text().replace('"h200-bw150"', f'"{name}"')
    assert text.count(f'"{name}"') == 2  # the variant and the grid's hardware axis
    study = tmp_path / "tiny-grid.toml"
    study.write_text(text)
    out = tmp_path / "runs"
    r = cli("study", "run", study, "--out", out)
    assert r.code == 2, r
    assert r.err == f"dse: error: {study}: variants[0].id = '{name}': {rule}\n"
    assert not out.exists()
