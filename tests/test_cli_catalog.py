"""`dse catalog` and the top-level flags, run as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Cli

from dse import __version__


def test_list_hardware_json_has_all_twelve(cli: Cli) -> None:
    proc = cli("catalog", "list", "hardware", "--json")
    assert proc.code == 0, proc.err
    entries = json.loads(proc.out)
    assert len(entries) == 12
    b200 = next(e for e in entries if e["id"] == "b200")
    assert b200["hbm"]["bandwidth_tb_per_s"] == 8.0
    assert b200["sources"][0].startswith("S1: ai-dynamo/aiconfigurator")


def test_list_hardware_shows_the_hbm_the_engine_sizes_with(cli: Cli) -> None:
    """B300's datasheet says 288 GB; nvidia-smi shows 268.6 GiB, which the engine sizes with."""
    header, _, *rows = cli("catalog", "list", "hardware").out.splitlines()
    col = header.split().index("hbm_gib_sized")
    b300 = next(r.split() for r in rows if r.startswith("b300 "))
    assert b300[col - 1 : col + 1] == ["288", "268.6"]
    entries = {e["id"]: e for e in json.loads(cli("catalog", "list", "hardware", "--json").out)}
    assert entries["b300"]["hbm"]["visible_gib"] == 268.6 and entries["b200"]["hbm"]["visible_gib"] is None


def test_list_models_json_has_derived_figures(cli: Cli) -> None:
    proc = cli("catalog", "list", "models", "--json")
    assert proc.code == 0, proc.err
    entries = {e["id"]: e for e in json.loads(proc.out)}
    assert len(entries) == 9
    ds = entries["deepseek-v3"]["derived"]
    assert ds["kv_bytes_per_token_bf16"] == 70272
    assert ds["kv_bytes_per_token_fp8"] == 35136
    assert abs(ds["params_total_b"] - 671) < 671 * 0.03


def test_list_tables_for_people(cli: Cli) -> None:
    proc = cli("catalog", "list", "hardware")
    assert proc.code == 0
    assert "gb200-nvl72" in proc.out and "hbm_tb_per_s" in proc.out
    # every price tier, the default (own_hyperscaler) first: an entry's own price shows in the list
    header, _, *rows = proc.out.splitlines()
    assert header.split()[-3:] == ["usd_hour_own_hyperscaler", "usd_hour_own_neocloud", "usd_hour_rent_3yr"]
    b200 = next(r for r in rows if r.startswith("b200 "))
    assert b200.split()[-3:] == ["1.95", "2.34", "2.9"]


def test_show_by_alias_gives_every_field_and_the_file(cli: Cli) -> None:
    proc = cli("catalog", "show", "gb200", "--json")
    rec = json.loads(proc.out)
    assert rec["id"] == "gb200-nvl72"
    assert rec["file"].endswith("hardware_catalog/gb200-nvl72.toml")
    text = cli("catalog", "show", "kimi-k3").out
    assert "attention.linear.layers" in text and "derived.params_total_b" in text


def test_version_and_help(cli: Cli) -> None:
    assert cli("--version").out.strip() == f"dse {__version__}"
    helptext = cli("--help").out
    assert "catalog" in helptext


def test_usage_error_exits_2(cli: Cli) -> None:
    proc = cli("catalog", "list", "gpus")
    assert proc.code == 2
    assert "invalid choice" in proc.err


def test_list_models_names_the_experts_precision_where_it_differs(cli: Cli) -> None:
    """gpt-oss-120b and Kimi K3 ship fp4 routed experts beside bf16 dense weights: the table's
    weights column had said "bf16" alone, 3-4x the bytes their experts hold."""
    out = cli("catalog", "list", "models")
    assert out.code == 0, out.err
    rows = {line.split()[0]: line for line in out.out.splitlines()[2:] if line.strip()}
    assert rows["gpt-oss-120b"].endswith("  bf16, experts fp4"), rows["gpt-oss-120b"]
    assert rows["kimi-k3"].endswith("  bf16, experts fp4"), rows["kimi-k3"]
    assert rows["deepseek-v3"].endswith("  fp8") and rows["llama-3.1-70b"].endswith("  bf16")


def test_show_refuses_an_unknown_id_naming_the_argument(cli: Cli) -> None:
    """It had said "catalog: catalog entry = 'nope': unknown catalog entry id", the catalog's inner
    words, not the argument typed; a missing subcommand had been named by its dest, catalog_cmd."""
    proc = cli("catalog", "show", "nope")
    assert proc.code == 2 and proc.out == ""
    lead = "dse: error: dse catalog show: ID = 'nope': unknown hardware or model id; valid ids: a800-sxm"
    assert proc.err.startswith(lead) and proc.err.count("\n") == 1, proc.err
    bare = cli("catalog")
    assert bare.code == 2 and "required: COMMAND (see dse catalog --help)" in bare.err, bare.err


def test_show_keeps_every_value_in_one_column(cli: Cli) -> None:
    """deepseek-v3's attention.mla.fp8_cache_bytes_per_token_per_layer (49 characters) had pushed its
    value out of the column the other 45-wide keys keep."""
    lines = cli("catalog", "show", "deepseek-v3").out.splitlines()
    starts = {len(line) - len(line.split()[-1]) for line in lines if line.split()[-1] == "-"}
    assert len(starts) == 1, starts


def test_a_catalog_dir_after_the_command_says_where_it_goes(cli: Cli, tmp_path: Path) -> None:
    """`dse catalog show b200 --catalog-dir DIR` had been refused as any unknown flag is, without
    the rule: --catalog-dir is `dse`'s own and comes before the command."""
    proc = cli("catalog", "show", "b200", "--catalog-dir", tmp_path)
    assert proc.code == 2 and proc.out == ""
    assert proc.err == (
        f"dse: error: unrecognized arguments: --catalog-dir {tmp_path}: --catalog-dir goes before the "
        "command, as in dse --catalog-dir DIR COMMAND ... (see dse --help)\n"
    )
    other = cli("catalog", "show", "b200", "--foo")
    assert other.err == "dse: error: unrecognized arguments: --foo (see dse --help)\n"


def test_a_missing_folder_named_in_the_environment_says_so(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DSE_CATALOG_DIR set long ago in a shell profile had been refused as a bare path ('/x:
    catalog folder must exist'), the command line naming no such folder; the line names the
    variable. A folder named by --catalog-dir is the line's own path, as before."""
    gone = tmp_path / "gone"
    monkeypatch.setenv("DSE_CATALOG_DIR", str(gone))
    res = cli("catalog", "list", "hardware")
    assert res.code == 2 and res.err.count("\n") == 1, res.err
    assert f"{gone}: DSE_CATALOG_DIR: catalog folder must exist and be a folder" in res.err
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("DSE_CATALOG_DIR", str(tmp_path / "empty"))
    res = cli("catalog", "list", "hardware")
    assert res.code == 2 and f"{tmp_path / 'empty'}: DSE_CATALOG_DIR: catalog folder must hold" in res.err
    monkeypatch.delenv("DSE_CATALOG_DIR")
    res = cli("--catalog-dir", gone, "catalog", "list", "hardware")
    assert res.code == 2 and f"{gone}: catalog folder must exist and be a folder" in res.err, res.err
