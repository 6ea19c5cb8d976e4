"""A name (an id or an alias) names one catalog entry across both catalogs: a model named as a
hardware is (or the other way round) is refused with one line naming the user's file, as a model
id that repeats a hardware id is. Before, `dse catalog show NAME` showed the hardware, and the
model could not be shown by that name."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Cli

from dse.paths import SHIPPED_HARDWARE, SHIPPED_MODELS


def _write(root: Path, kind: str, name: str, text: str) -> Path:
    (root / kind).mkdir(parents=True, exist_ok=True)
    path = root / kind / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _edit(path: Path, old: str, new: str) -> str:
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    return text.replace(old, new)


def test_a_model_alias_that_names_a_hardware_is_refused(cli: Cli, tmp_path: Path) -> None:
    text = _edit(SHIPPED_MODELS / "deepseek-v3.toml", 'aliases = ["dsr1", ', 'aliases = ["h200", "dsr1", ')
    own = _write(tmp_path, "models", "deepseek-v3", text)
    r = cli("--catalog-dir", tmp_path, "catalog", "show", "h200")
    shipped = SHIPPED_HARDWARE / "h200-sxm.toml"
    rule = f"must not repeat an id or alias of hardware 'h200-sxm' ({shipped})"
    assert (r.code, r.out, r.err) == (2, "", f"dse: error: {own}: aliases = 'h200': {rule}\n")


def test_a_model_id_that_is_a_hardware_alias_is_refused(cli: Cli, tmp_path: Path) -> None:
    text = _edit(SHIPPED_MODELS / "kimi-k2.toml", 'id = "kimi-k2"', 'id = "h100"')
    text = text.replace('aliases = ["kimi-k2-instruct", "k2"]', "aliases = []")
    own = _write(tmp_path, "models", "h100", text)
    r = cli("--catalog-dir", tmp_path, "catalog", "list", "models")
    assert r.code == 2 and r.out == ""
    rule = "must not repeat an id or alias of hardware 'h100-sxm'"
    assert r.err.startswith(f"dse: error: {own}: id = 'h100': {rule} (")


@pytest.mark.parametrize("name", ["k2", "kimi-k2"])
def test_a_hardware_of_your_own_named_as_a_shipped_model_is_the_file_named(
    cli: Cli, tmp_path: Path, name: str
) -> None:
    aliases = 'aliases = ["b200-hgx", "dgx-b200"]'
    text = _edit(SHIPPED_HARDWARE / "b200.toml", aliases, f'aliases = ["{name}"]')
    own = _write(tmp_path, "hardware", "b200", text)
    r = cli("--catalog-dir", tmp_path, "catalog", "show", "b200")
    shipped = SHIPPED_MODELS / "kimi-k2.toml"
    rule = f"must not repeat an id or alias of the shipped model 'kimi-k2' ({shipped})"
    assert (r.code, r.out, r.err) == (2, "", f"dse: error: {own}: aliases = '{name}': {rule}\n")


def test_a_hardware_of_your_own_with_a_shipped_model_id_is_told_so(cli: Cli, tmp_path: Path) -> None:
    """It had been told it "must not repeat the id of a hardware entry": it is that entry."""
    text = _edit(SHIPPED_HARDWARE / "b200.toml", 'id = "b200"', 'id = "kimi-k2"')
    text = text.replace('aliases = ["b200-hgx", "dgx-b200"]', "aliases = []")
    own = _write(tmp_path, "hardware", "kimi-k2", text)
    r = cli("--catalog-dir", tmp_path, "catalog", "list", "hardware")
    rule = f"must not repeat the id of the shipped model 'kimi-k2' ({SHIPPED_MODELS / 'kimi-k2.toml'})"
    assert (r.code, r.out, r.err) == (2, "", f"dse: error: {own}: id = 'kimi-k2': {rule}\n")


def test_two_entries_of_yours_with_one_alias_name_both_files(cli: Cli, tmp_path: Path) -> None:
    """Two models of a folder sharing an alias: the refusal named the other model's id but not its
    file, where the hardware's names both."""
    base = _edit(
        SHIPPED_MODELS / "kimi-k2.toml", 'aliases = ["kimi-k2-instruct", "k2"]', 'aliases = ["mine"]'
    )
    first = _write(tmp_path, "models", "kimi-a", base.replace('id = "kimi-k2"', 'id = "kimi-a"'))
    second = _write(tmp_path, "models", "kimi-b", base.replace('id = "kimi-k2"', 'id = "kimi-b"'))
    r = cli("--catalog-dir", tmp_path, "catalog", "list", "models")
    assert r.code == 2 and r.err.count("\n") == 1, r.err
    assert (
        f"dse: error: {second}: aliases = 'mine': must not repeat an id or alias of model 'kimi-a' ({first})"
        in r.err
    )


@pytest.mark.parametrize(
    ("aliases", "said", "name"),
    [('["mine", "b200"]', "the entry's own id", "b200"), ('["mine", "hgx", "mine"]', "listed twice", "mine")],
)
def test_an_alias_of_an_entry_s_own_id_or_listed_twice_is_refused(
    cli: Cli, tmp_path: Path, aliases: str, said: str, name: str
) -> None:
    """Both had been taken in silence: a file that names one thing twice was written in a hurry."""
    text = _edit(SHIPPED_HARDWARE / "b200.toml", 'aliases = ["b200-hgx", "dgx-b200"]', f"aliases = {aliases}")
    own = _write(tmp_path, "hardware", "b200", text)
    r = cli("--catalog-dir", tmp_path, "catalog", "show", "b200")
    rule = f"must name it otherwise: {said}"
    assert (r.code, r.out, r.err) == (2, "", f"dse: error: {own}: aliases = '{name}': {rule}\n")
