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
    with (
        sqlite3.connect(url.removeprefix("sqlite:///")) as src,
        sqlite3.connect(out / "tiny-study" / "study.db") as dst,
    ):
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


def _refused(cli: Cli, url: str, tmp_path: Path, rule: str) -> None:
    """A worker and a lone run on ``url`` both refuse it in one line naming --storage and ``rule``,
    exit 2, and leave no run folder."""
    for argv in (("worker", TINY, "--storage", url, "--trials", "2"),
                 ("run", TINY, "--storage", url, "--trials", "2", "--out", tmp_path / "out")):  # fmt: skip
        got = cli("study", *argv)
        assert got.code == 2, got.err
        lines = got.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("dse: error: --storage: url = "), got.err
        assert rule in lines[0], got.err
    assert not (tmp_path / "out").exists()


def test_a_sqlite_file_of_another_program_is_refused_and_left_as_it_was(tmp_path: Path, cli: Cli) -> None:
    db = tmp_path / "app.db"
    with sqlite3.connect(db) as con:
        con.execute("create table studies (id integer, owner text)")
    # Optuna created its other ten tables beside the app's, then failed with a traceback
    _refused(
        cli, f"sqlite:///{db}", tmp_path, "holds tables of another program under Optuna's names (studies)"
    )
    assert _tables(f"sqlite:///{db}") == ["studies"]


def test_a_sqlite_url_naming_a_folder_is_bad_input(tmp_path: Path, cli: Cli) -> None:
    folder = tmp_path / "runs.db"
    folder.mkdir()
    # it had been a storage fault (exit 1): "the database file cannot be opened"
    _refused(cli, f"sqlite:///{folder}", tmp_path, f"must name a SQLite file: {folder} is a folder")
    assert list(folder.iterdir()) == []


def _database(server_url: str, name: str) -> str:
    """A new, empty database ``name`` on the session's server; its URL."""
    url = sqlalchemy.engine.make_url(server_url)
    engine = sqlalchemy.create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as con:
        con.execute(sqlalchemy.text(f"drop database if exists {name}"))
        con.execute(sqlalchemy.text(f"create database {name}"))
    engine.dispose()
    return url.set(database=name).render_as_string(hide_password=False)


def test_postgresql_databases_of_another_program_or_optuna_schema_are_refused(
    postgres_url: str, tmp_path: Path, cli: Cli
) -> None:
    app = _database(postgres_url, "app_tables")
    engine = sqlalchemy.create_engine(app)
    with engine.begin() as con:
        con.execute(sqlalchemy.text("create table studies (id integer, owner text)"))
    engine.dispose()
    # it was the driver's error on Optuna's CREATE TABLE (a foreign key to the app's table)
    _refused(cli, app, tmp_path, "holds tables of another program under Optuna's names (studies)")
    assert _tables(app) == ["studies"]
    old = _database(postgres_url, "old_optuna")
    optuna.create_study(storage=old, study_name="other")
    engine = sqlalchemy.create_engine(old)
    with engine.begin() as con:
        con.execute(sqlalchemy.text("update alembic_version set version_num = 'v3.0.0.d'"))
    engine.dispose()
    # Optuna's words named its own version twice ("optuna 5.0.0 ... set up by optuna 5.0.0")
    _refused(cli, old, tmp_path, "holds an Optuna storage of schema v3.0.0.d, and this Optuna")
    _refused(cli, old, tmp_path, "upgrade it (optuna storage upgrade --storage URL)")
    assert "other" in optuna.study.get_all_study_names(storage=_stamped_as_ours(old))  # left as it was


def _stamped_as_ours(url: str) -> str:
    """``url``'s database stamped back with this Optuna's schema (it was only the stamp)."""
    from dse.study.optuna_compat import SCHEMA_VERSION

    engine = sqlalchemy.create_engine(url)
    with engine.begin() as con:
        con.execute(sqlalchemy.text("update alembic_version set version_num = :v"), {"v": SCHEMA_VERSION})
    engine.dispose()
    return url


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")
def test_a_trial_is_judged_dead_by_its_own_workers_stale_after(tmp_path: Path, cli: Cli) -> None:
    from dse.study.optuna_compat import STALE_AFTER_ATTR
    from dse.study.storage import StoredStudy, fail_dead, open_storage

    url = f"sqlite:///{tmp_path / 'study.db'}"
    storage = open_storage(url, stale_after_s=4.0)  # this worker: --stale-after 4
    study = optuna.create_study(storage=storage, study_name="s")
    ids = {}
    for name, own in (("patient", 120.0), ("brisk", 4.0), ("unsaid", None)):  # their workers' own
        trial = study.ask()
        ids[name] = trial._trial_id
        if own is not None:
            storage.set_trial_system_attr(trial._trial_id, STALE_AFTER_ATTR, own)
        storage.record_heartbeat(trial._trial_id)
    with sqlite3.connect(tmp_path / "study.db") as con:  # every one silent for 10 s
        con.execute("update trial_heartbeats set heartbeat = datetime(heartbeat, '-10 seconds')")
    # a worker of the default 120 s beats every 30 s: 10 s of silence is its trial running; it
    # had been failed as dead by the 4-s worker, and with a trial over 4 s never finished one
    assert fail_dead(StoredStudy.of(study, storage, url)) == 2
    states = {name: storage.get_trial(i).state for name, i in ids.items()}
    assert states == {
        "patient": optuna.trial.TrialState.RUNNING,
        "brisk": optuna.trial.TrialState.FAIL,
        "unsaid": optuna.trial.TrialState.FAIL,  # a dse before the attribute: this worker's 4 s
    }
    # a worker stores its own stale-after on every trial it runs
    shared = tmp_path / "shared.db"
    ran = cli(
        "study", "worker", TINY, "--storage", f"sqlite:///{shared}", "--trials", "2", "--stale-after", "7"
    )
    assert ran.code == 0, ran.err
    trials = _another_worker(f"sqlite:///{shared}").get_trials(deepcopy=False)
    assert [t.system_attrs.get(STALE_AFTER_ATTR) for t in trials] == [7.0, 7.0]


def test_a_lone_run_after_workers_leaves_no_trial_waiting_in_their_queue(tmp_path: Path, cli: Cli) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ran = cli("study", "worker", TINY, "--storage", url, "--trials", "2")
    assert ran.code == 0, ran.err
    study = _another_worker(url)
    # a worker killed after it enqueued the warm start's designs, before it ran them
    study.enqueue_trial(study.trials[0].params)
    run = cli(
        "study", "run", TINY, "--storage", url, "--trials", "4", "--out", tmp_path / "out", "--no-export"
    )
    assert run.code == 0, run.err
    assert "1 left running or waiting by an interrupted run or workers marked failed" in run.out
    states = [t.state for t in _another_worker(url).get_trials(deepcopy=False)]
    # it had stayed waiting for good, and a worker with a larger budget ran its design again
    assert optuna.trial.TrialState.WAITING not in states
    assert states.count(optuna.trial.TrialState.COMPLETE) == 4
