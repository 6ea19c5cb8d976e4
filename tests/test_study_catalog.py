"""A study run on a user's catalog entries: every study command reads them with `--catalog-dir`,
and the numbers its trials ran with are stored, so that a run resumed (or read) under other
numbers is refused instead of mixing trials priced two ways."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
from conftest import Cli

from dse.catalog.loader import SHIPPED_HARDWARE

TINY = Path(__file__).resolve().parent / "data" / "tiny-study.toml"


def _own_part(root: Path, **changes: str) -> Path:
    """A user catalog folder with ``b200-own``: B200's entry under an id of its own."""
    text = (SHIPPED_HARDWARE / "b200.toml").read_text()
    changes = {
        'id = "b200"': 'id = "b200-own"',
        'aliases = ["b200-hgx", "dgx-b200"]': "aliases = []",
        **changes,
    }
    for old, new in changes.items():
        assert old in text, old
        text = text.replace(old, new)
    (root / "hardware").mkdir(parents=True, exist_ok=True)
    (root / "hardware" / "b200-own.toml").write_text(text, encoding="utf-8")
    return root


def optuna_trials(db: Path) -> int:
    with sqlite3.connect(db) as con:
        return int(con.execute("select count(*) from trials").fetchone()[0])


def _study(tmp_path: Path) -> Path:
    text = TINY.read_text().replace('hardware = ["b200", "h200-sxm"]', 'hardware = ["b200-own"]')
    path = tmp_path / "own-study.toml"
    path.write_text(text.replace('name = "tiny-study"', 'name = "own-study"'), encoding="utf-8")
    return path


def test_every_study_command_reads_the_catalog_folder(tmp_path: Path, cli: Cli) -> None:
    cat, study, out = _own_part(tmp_path / "cat"), _study(tmp_path), tmp_path / "runs"
    ran = cli("--catalog-dir", cat, "study", "run", study, "--trials", "3", "--out", out, "--no-export")
    assert ran.code == 0, ran.err
    for command in (["export"], ["report"], ["deploy", "--engine", "sglang"]):
        res = cli("--catalog-dir", cat, "study", *command, study, "--out", out)
        assert res.code == 0, (command, res.err)
        without = cli("study", *command, study, "--out", out)  # the shipped catalog has no b200-own
        assert without.code == 2 and "hardware[0] = 'b200-own': unknown hardware id" in without.err
    trials = out / "own-study" / "exports" / "trials" / "study=own-study" / "part-0.parquet"
    meta = {k.decode(): v.decode() for k, v in pq.read_metadata(trials).metadata.items()}
    stored = json.loads(meta["dse.catalog"])  # the numbers the trials ran with, for whoever reads the file
    assert stored["hardware"]["b200-own"]["prices"]["usd_per_gpu_hour_own_hyperscaler"] == 1.95
    assert set(stored["models"]) == {"deepseek-v3"} and "sources" not in stored["hardware"]["b200-own"]


def test_a_run_resumed_under_other_catalog_numbers_is_refused(tmp_path: Path, cli: Cli) -> None:
    study, out = _study(tmp_path), tmp_path / "runs"
    first = _own_part(tmp_path / "cat")
    ran = cli("--catalog-dir", first, "study", "run", study, "--trials", "3", "--out", out, "--no-export")
    assert ran.code == 0, ran.err
    db = out / "own-study" / "study.db"
    before = optuna_trials(db)
    cheaper = _own_part(tmp_path / "cheaper", **{"own_hyperscaler = 1.95": "own_hyperscaler = 1.00"})
    res = cli("--catalog-dir", cheaper, "study", "run", study, "--trials", "5", "--out", out)
    assert res.code == 2, res.err
    line = res.err.strip()
    assert "\n" not in line
    assert re.search(
        r"study\.db: catalog\.hardware\.b200-own\.prices\.usd_per_gpu_hour_own_hyperscaler = 1\.0: "
        r"the stored study's trials ran with 1\.95",
        line,
    ), line
    # reading is not refused (an upgrade's new price would lock the study away): it is said
    report = cli("--catalog-dir", cheaper, "study", "report", study, "--out", out)
    assert report.code == 0, report.err
    assert report.err == (
        "dse: warning: own-study: catalog.hardware.b200-own.prices.usd_per_gpu_hour_own_hyperscaler is "
        "1.0 here but the trials ran with 1.95: the re-simulated series, shadow prices and launch files "
        "use this catalog's numbers (read with the one they ran with: --catalog-dir, or catalog= from "
        "Python)\n"
    )
    assert optuna_trials(db) == before  # nothing ran
    # and so they do: the shadow prices are solved again at $1.00, not read as stored at $1.95
    md = out / "own-study" / "report" / "report.md"
    cheap = [line for line in md.read_text().splitlines() if "| hbm_bandwidth |" in line]
    assert cli("--catalog-dir", first, "study", "report", study, "--out", out).code == 0
    stored = [line for line in md.read_text().splitlines() if "| hbm_bandwidth |" in line]
    assert cheap and stored and cheap != stored, (cheap, stored)
    fleet = [float(row.split("|")[4]) for row in (cheap[0], stored[0])]
    assert fleet[0] < fleet[1]  # a GPU-hour cheaper saves less
    # an entry's words (its notes, sources, name) are not what the trials computed with
    reworded = _own_part(
        tmp_path / "reworded", **{'notes = "hbm_tb_per_s': 'notes = "my own copy; hbm_tb_per_s'}
    )
    again = cli(
        "--catalog-dir", reworded, "study", "run", study, "--trials", "5", "--out", out, "--no-export"
    )
    assert again.code == 0, again.err
    assert "2 trials run" in again.out


def _file_meta(path: Path) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in pq.read_metadata(path).metadata.items()}


def test_the_series_file_says_the_catalog_it_was_simulated_with(tmp_path: Path, cli: Cli) -> None:
    """``sim_timeseries`` is simulated again at export time, with the catalog the study is read
    under; its file's ``dse.catalog`` had held the trials' numbers all the same: exported under a
    B200 of 2 TB/s, a series simulated at 2 TB/s said 8. Each file says the numbers its rows were
    computed with: the trials' in the trials' tables, the series' own in the series'."""
    study, out = _study(tmp_path), tmp_path / "runs"
    ran_with = _own_part(tmp_path / "cat")
    ran = cli("--catalog-dir", ran_with, "study", "run", study, "--trials", "3", "--out", out, "--no-export")
    assert ran.code == 0, ran.err
    slow = _own_part(tmp_path / "slow", **{"bandwidth_tb_per_s = 8.0": "bandwidth_tb_per_s = 2.0"})
    exports = out / "own-study" / "exports"
    files = {t: exports / t / "study=own-study" / "part-0.parquet" for t in ("trials", "sim_timeseries")}
    series: dict[str, pl.DataFrame] = {}
    for name, cat in (("same", ran_with), ("slow", slow)):
        res = cli("--catalog-dir", cat, "study", "export", study, "--out", out)
        assert res.code == 0, res.err
        meta = {t: json.loads(_file_meta(f)["dse.catalog"]) for t, f in files.items()}
        bandwidth = {t: m["hardware"]["b200-own"]["hbm"]["bandwidth_tb_per_s"] for t, m in meta.items()}
        series[name] = pl.read_parquet(files["sim_timeseries"])
        if name == "same":
            assert res.err == "" and meta["trials"] == meta["sim_timeseries"]
        else:  # (said on stderr too)
            assert "bandwidth_tb_per_s is 2.0 here but the trials ran with 8.0" in res.err
            assert bandwidth == {"trials": 8.0, "sim_timeseries": 2.0}
    assert not series["same"].equals(series["slow"])  # the series was simulated at 2 TB/s
