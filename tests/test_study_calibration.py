"""The calibration a study's trials ran with is stored with it: a run resumed under another one
is refused instead of mixing trials priced two ways, and reading the study (its shadow prices,
re-simulated series and launch files) uses the stored one, whatever calibration is loaded."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import polars as pl
import pytest
from conftest import Cli, Result

from dse.errors import InputError
from dse.paths import CALIBRATION_FILE
from dse.perf.params import load_params, params_from_dict, params_to_dict
from dse.study.api import Study

TINY = Path(__file__).resolve().parent / "data" / "tiny-study.toml"


def _trials(db: Path) -> int:
    with sqlite3.connect(db) as con:
        return int(con.execute("select count(*) from trials").fetchone()[0])


def _other_calibration(path: Path, speed: float = 1.25, provenance: str | None = None) -> Path:
    """The shipped calibration with every engine ``speed`` times as fast, its KV cache at the
    other precision and one MTP draft more (``provenance``: only its provenance reworded)."""
    raw = json.loads(CALIBRATION_FILE.read_text())
    if provenance is not None:
        raw["provenance"]["note"] = provenance
    else:
        for e in raw["engines"].values():
            e["speed"] *= speed
            e["kv_precision"] = "bf16" if e["kv_precision"] == "fp8" else "fp8"
            e["mtp_draft_tokens"] += 1
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


def test_a_run_resumed_under_another_calibration_is_refused(
    tmp_path: Path, cli: Cli, tiny_cli_run: Result, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert tiny_cli_run.code == 0, tiny_cli_run.err
    db = tmp_path / "tiny-study" / "study.db"
    before = _trials(db)
    monkeypatch.setenv("DSE_CALIBRATION", str(_other_calibration(tmp_path / "faster.json")))
    res = cli("study", "run", TINY, "--trials", "10", "--out", tmp_path, "--no-export")
    assert res.code == 2, res.err
    said = res.err.splitlines()
    assert said[0].startswith("dse: note: priced with the calibration DSE_CALIBRATION names")
    assert len(said) == 2 and re.fullmatch(
        r"dse: error: \S+study\.db: calibration\.engines\.\w+\.kv_precision = '\w+': the stored "
        r"study's trials ran with '\w+', so they are another study's: use another --out or --storage "
        r"for the changed calibration, or run with the one they ran with \(DSE_CALIBRATION, or "
        r"params= from Python\)",
        said[1],
    ), res.err
    assert _trials(db) == before  # nothing ran
    # from Python, the same with params=
    with pytest.raises(InputError, match=r"calibration\.engines\.\w+\.kv_precision"):
        Study.load(TINY).run(out=tmp_path, trials=10, params=load_params(tmp_path / "faster.json"))
    assert _trials(db) == before
    # a calibration whose provenance alone differs prices as the stored one: the run resumes
    monkeypatch.setenv("DSE_CALIBRATION", str(_other_calibration(tmp_path / "same.json", provenance="mine")))
    again = cli("study", "run", TINY, "--trials", "10", "--out", tmp_path, "--no-export")
    assert again.code == 0, again.err
    assert "2 trials run" in again.out


def test_reading_a_study_uses_the_calibration_its_trials_ran_with(
    tmp_path: Path, cli: Cli, tiny_cli_run: Result, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deploy after a recalibration had written the new calibration's KV dtype and MTP drafts
    beside a design priced with the old one's."""
    assert tiny_cli_run.code == 0, tiny_cli_run.err
    folder = tmp_path / "tiny-study" / "deploy"
    shipped = cli("deploy", TINY, "--out", tmp_path, "--engine", "sglang")
    assert shipped.code == 0 and shipped.err == "", shipped.err
    written = {p.name: p.read_text() for p in folder.iterdir()}
    monkeypatch.setenv("DSE_CALIBRATION", str(_other_calibration(tmp_path / "faster.json")))
    other = cli("deploy", TINY, "--out", tmp_path, "--engine", "sglang")
    assert other.code == 0, other.err
    assert {p.name: p.read_text() for p in folder.iterdir()} == written
    assert re.fullmatch(
        r"dse: note: tiny-study: calibration\.engines\.\w+\.kv_precision is '\w+' in the loaded "
        r"calibration but the trials ran with '\w+': the shadow prices, re-simulated series and "
        r"launch files use the calibration stored with the study, as its trials did\n",
        other.err,
    ), other.err
    # every exported file says the numbers its rows were computed with: the stored ones
    exported = cli("study", "export", TINY, "--out", tmp_path)
    assert exported.code == 0 and "calibration.engines" in exported.err, exported.err
    shipped_numbers = params_to_dict(load_params(CALIBRATION_FILE))
    files = [Path(p) for p in exported.out.split()]
    assert len(files) == 5
    for path in files:
        assert json.loads(pl.read_parquet_metadata(path)["dse.calibration"]) == shipped_numbers, path
    res = Study.load(TINY).results(out=tmp_path)
    assert params_to_dict(res.params) == shipped_numbers
    assert res.calibration_note is not None
    # what the study stores reads back as the file it came from
    stored = res.study.user_attrs["calibration"]
    assert params_from_dict(stored, "stored") == load_params(CALIBRATION_FILE)


def test_a_stored_calibration_with_a_bad_number_is_named() -> None:
    raw = params_to_dict(load_params(CALIBRATION_FILE))
    raw["params"]["gemm_eff"] = 1.5
    with pytest.raises(InputError, match=r"^study x: params\.gemm_eff = 1\.5: must be a fraction"):
        params_from_dict(raw, "study x")
    with pytest.raises(InputError, match=r"^study x: must be a calibration file"):
        params_from_dict([1], "study x")
