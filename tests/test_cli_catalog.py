"""`dse catalog` and the top-level flags, run as a user runs them."""

from __future__ import annotations

import json
import subprocess

from dse import __version__
from tests.conftest import dse_cmd


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(dse_cmd(*args), capture_output=True, text=True, env=env, check=False)


def test_list_hardware_json_has_all_twelve(clean_env: dict[str, str]) -> None:
    proc = _run(clean_env, "catalog", "list", "hardware", "--json")
    assert proc.returncode == 0, proc.stderr
    entries = json.loads(proc.stdout)
    assert len(entries) == 12
    b200 = next(e for e in entries if e["id"] == "b200")
    assert b200["hbm"]["bandwidth_tb_per_s"] == 8.0
    assert b200["sources"][0].startswith("S1: ai-dynamo/aiconfigurator")


def test_list_models_json_has_derived_figures(clean_env: dict[str, str]) -> None:
    proc = _run(clean_env, "catalog", "list", "models", "--json")
    assert proc.returncode == 0, proc.stderr
    entries = {e["id"]: e for e in json.loads(proc.stdout)}
    assert len(entries) == 9
    ds = entries["deepseek-v3"]["derived"]
    assert ds["kv_bytes_per_token_bf16"] == 70272
    assert ds["kv_bytes_per_token_fp8"] == 35136
    assert abs(ds["params_total_b"] - 671) < 671 * 0.03


def test_list_tables_for_people(clean_env: dict[str, str]) -> None:
    proc = _run(clean_env, "catalog", "list", "hardware")
    assert proc.returncode == 0
    assert "gb200-nvl72" in proc.stdout and "hbm_tb_per_s" in proc.stdout


def test_show_by_alias_gives_every_field_and_the_file(clean_env: dict[str, str]) -> None:
    proc = _run(clean_env, "catalog", "show", "gb200", "--json")
    rec = json.loads(proc.stdout)
    assert rec["id"] == "gb200-nvl72"
    assert rec["file"].endswith("hardware_catalog/gb200-nvl72.toml")
    text = _run(clean_env, "catalog", "show", "kimi-k3").stdout
    assert "attention.linear.layers" in text and "derived.params_total_b" in text


def test_version_and_help(clean_env: dict[str, str]) -> None:
    assert _run(clean_env, "--version").stdout.strip() == f"dse {__version__}"
    helptext = _run(clean_env, "--help").stdout
    assert "catalog" in helptext


def test_usage_error_exits_2(clean_env: dict[str, str]) -> None:
    proc = _run(clean_env, "catalog", "list", "gpus")
    assert proc.returncode == 2
    assert "invalid choice" in proc.stderr
