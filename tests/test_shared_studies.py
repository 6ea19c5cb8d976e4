"""A study workers still add to, read by `export` and `report`; storages that are not a study's
(a folder, another program's database, another Optuna schema); a lone run after workers."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import optuna
import pytest
import sqlalchemy
from conftest import TINY, Cli

from dse.study.api import Study
from dse.study.storage import default_storage


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A lone run of the tiny study, 3 trials: its --out folder and its storage's URL."""
    from conftest import run_dse

    out = tmp_path_factory.mktemp("shared")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("DSE_CATALOG_DIR", raising=False)
        mp.delenv("DSE_CALIBRATION", raising=False)
        done = run_dse("study", "run", TINY, "--out", out, "--trials", "3", "--no-export")
    assert done.code == 0, done.err
    return out, default_storage(out, Study.load(TINY).spec)


def _another_worker(url: str) -> optuna.Study:
    """The study as another process sees it (its own storage handle)."""
    return optuna.load_study(study_name="tiny-study", storage=url)


def test_every_table_of_one_read_holds_the_same_trials_while_workers_add_theirs(
    tiny_run: tuple[Path, str], tmp_path: Path
) -> None:
    out, url = tiny_run
    copy = tmp_path / "study.db"  # this test adds trials: to a copy of its own
    with sqlite3.connect(url.removeprefix("sqlite:///")) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    url = f"sqlite:///{copy}"
    res = Study.load(TINY).results(out=out, storage=url)
    numbers = res.trials["trial"].to_list()
    other = _another_worker(url)
    finished = other.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))[0]
    other.add_trial(finished)  # a worker finishes one more trial, between two tables
    assert len(other.get_trials(deepcopy=False)) == len(numbers) + 1
    # each table had read the storage again: the new trial's pools were in placements, not trials
    assert set(res.placements["trial"].to_list()) <= set(numbers)
    assert set(res.kv_tiers["trial"].to_list()) <= set(numbers)
    assert res.read.note() is None  # every trial read was finished


def test_export_and_report_say_which_trials_they_hold_while_workers_run(
    tiny_run: tuple[Path, str], tmp_path: Path, cli: Cli
) -> None:
    src_out, url = tiny_run
    out = tmp_path / "out"
    (out / "tiny-study").mkdir(parents=True)
    with sqlite3.connect(url.removeprefix("sqlite:///")) as src, sqlite3.connect(
        out / "tiny-study" / "study.db"
    ) as dst:
        src.backup(dst)
    _another_worker(default_storage(out, Study.load(TINY).spec)).ask()  # a worker's trial, running
    exported = cli("study", "export", TINY, "--out", out)
    assert exported.code == 0, exported.err
    said = "1 running trial were not finished"
    assert said not in exported.err  # (grammar: one trial was)
    assert "while 1 running trial was not finished" in exported.err, exported.err
    assert "the 3 complete trials (the last, trial 2) are in them" in exported.err, exported.err
    reported = cli("study", "report", TINY, "--out", out)
    assert reported.code == 0, reported.err
    text = (out / "tiny-study" / "report" / "report.md").read_text()
    assert "- **Unfinished:** this report was read at " in text
    assert "the 3 complete trials (the last, trial 2) are in it" in text
    assert "the 3 complete trials (the last, trial 2) are in it" in reported.err
    # the run folder's own report, all trials finished, says nothing of it
    again = cli("study", "report", TINY, "--out", src_out)
    assert again.code == 0, again.err
    assert "Unfinished" not in (src_out / "tiny-study" / "report" / "report.md").read_text()
    assert "note:" not in again.err


def _tables(url: str) -> list[str]:
    return sorted(sqlalchemy.inspect(sqlalchemy.create_engine(url)).get_table_names())
