"""Workers sharing a study on a SQLite file: a grid point runs once, a search stops at its budget,
a stopped worker leaves nothing running, and what a worker or a run writes goes where it should."""

from __future__ import annotations

import errno
import json
import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy
from conftest import Cli, dse_cmd

from dse.study.faults import STORAGE_ERRORS
from dse.study.grid import POINT_ATTR
from dse.study.sources import SharedTrials

DATA = Path(__file__).resolve().parent / "data"
GRID, TINY = DATA / "tiny-grid.toml", DATA / "tiny-study.toml"
State = optuna.trial.TrialState


def _trials(db: Path, name: str) -> list[optuna.trial.FrozenTrial]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=name, storage=f"sqlite:///{db}").get_trials()


def _shared_source(study_file: Path, tmp_path: Path) -> tuple[Any, Any, SharedTrials]:
    """A worker's trials of ``study_file``'s study on a fresh SQLite file: its spec, the stored
    study and the source (60 s before a silent trial is a dead worker's; a budget of 4)."""
    from dse.study import Study
    from dse.study.objectives import ObjectiveDef
    from dse.study.storage import open_stored

    spec = Study.load(study_file).spec
    url = f"sqlite:///{tmp_path / 'study.db'}"
    stored = open_stored(
        spec, url, [ObjectiveDef.metric(n) for n in spec.objectives.names], 1, stale_after_s=60
    )
    return spec, stored, SharedTrials(spec, stored, 60.0, 0, 4)


def test_a_workers_trial_stores_its_stale_after_as_it_is_asked_for(tmp_path: Path) -> None:
    """Stored only once the trial's proposal was made, a worker killed while proposing had left a
    trial judged by the other workers' stale-after (120 s where its own was 6 s)."""
    from dse.study.optuna_compat import STALE_AFTER_ATTR

    _, stored, source = _shared_source(TINY, tmp_path)
    job = source.next()
    assert job is not None
    trial = stored.storage.get_trial(stored.trial_id(job.number))
    assert trial.state == State.RUNNING and trial.system_attrs[STALE_AFTER_ATTR] == 60.0
    source.close()


def _points(trials: list[optuna.trial.FrozenTrial]) -> Counter[tuple[tuple[str, object], ...]]:
    return Counter(tuple(sorted(t.params.items())) for t in trials if t.state == State.COMPLETE)


def _workers(n: int, *args: str, env: dict[str, str]) -> list[tuple[int, str, str]]:
    procs = [
        subprocess.Popen(
            dse_cmd("worker", *args), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(n)
    ]
    ended = [p.communicate(timeout=300) for p in procs]
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, ended, strict=True)]


@pytest.mark.e2e
def test_three_workers_run_each_grid_point_once(cli: Cli, tmp_path: Path, clean_env: dict[str, str]) -> None:
    """Three workers on a 6-point grid stored 7-8 trials, one point twice and sometimes one never,
    and the study counted as finished."""
    db = tmp_path / "study.db"
    ended = _workers(3, str(GRID), "--storage", f"sqlite:///{db}", "--out", str(tmp_path), env=clean_env)
    assert all(code == 0 for code, _, _ in ended), ended
    assert "Traceback" not in "".join(err for _, _, err in ended)
    trials = _trials(db, "tiny-grid")
    assert len(trials) == 6 and all(t.state == State.COMPLETE for t in trials)
    assert len(_points(trials)) == 6
    again = cli("study", "run", GRID, "--storage", f"sqlite:///{db}", "--out", tmp_path, "--no-export")
    assert again.code == 0 and "0 trials run in" in again.out and "(6 before)" in again.out, again.err


@pytest.mark.e2e
def test_three_workers_stop_at_the_search_budget(tmp_path: Path, clean_env: dict[str, str]) -> None:
    """Three workers with a budget of 12 stored 13-14 (62 for 60)."""
    db = tmp_path / "study.db"
    args = (str(TINY), "--storage", f"sqlite:///{db}", "--out", str(tmp_path), "--trials", "12")
    ended = _workers(3, *args, env=clean_env)
    assert all(code == 0 for code, _, _ in ended), ended
    trials = _trials(db, "tiny-study")
    assert sum(t.state == State.COMPLETE for t in trials) == 12
    assert not [t for t in trials if t.state == State.RUNNING]
    ran = [int(out.split("worker: ")[1].split(" trials")[0]) for _, out, _ in ended]
    assert sum(ran) == 12


def _dead_and_repeated(cli: Cli, tmp_path: Path) -> Path:
    """A grid run of 5 of its 6 points, one of them stored twice (by an older dse), and the 6th
    left running by a worker killed with SIGKILL (no heartbeat, started just now)."""
    assert cli("study", "run", GRID, "--out", tmp_path, "--trials", "5", "--no-export").code == 0
    db = tmp_path / "tiny-grid" / "study.db"
    study = optuna.load_study(study_name="tiny-grid", storage=f"sqlite:///{db}")
    done = study.get_trials(states=(State.COMPLETE,))
    study.add_trial(done[0])  # the same point again
    space = {"x_hardware": ["h200-sxm", "h200-bw150", "h200-cap150"], "x_input_tokens": [2000.0, 8000.0]}
    held = {tuple(sorted(t.params.items())) for t in done}
    missing = next(
        {"x_hardware": h, "x_input_tokens": n}
        for h in space["x_hardware"]
        for n in space["x_input_tokens"]
        if tuple(sorted({"x_hardware": h, "x_input_tokens": n}.items())) not in held
    )
    study.enqueue_trial(missing)
    dead = study.ask()
    for k in missing:
        dead.suggest_categorical(k, space[k])
    assert dead.params == missing
    return db


def test_a_grid_rerun_runs_the_point_a_dead_worker_held(cli: Cli, tmp_path: Path) -> None:
    """The budget of a grid is every point complete, not a count of trials: a point run twice
    counted as two, and the point of a killed worker's trial was never run."""
    db = _dead_and_repeated(cli, tmp_path)
    rerun = cli("study", "run", GRID, "--out", tmp_path, "--no-export")
    assert rerun.code == 0, rerun.err
    assert "1 trials run in" in rerun.out and "(5 before, 1 left running" in rerun.out
    assert len(_points(_trials(db, "tiny-grid"))) == 6


def test_a_worker_runs_the_point_a_dead_worker_held(cli: Cli, tmp_path: Path) -> None:
    db = _dead_and_repeated(cli, tmp_path)
    time.sleep(4.5)  # past the grace of --stale-after 4, the shortest
    url = f"sqlite:///{db}"
    worker = cli("worker", GRID, "--storage", url, "--out", tmp_path, "--stale-after", "4")
    assert worker.code == 0, worker.err
    assert "worker: 1 trials" in worker.out and "1 stale trials" in worker.out
    trials = _trials(db, "tiny-grid")
    assert len(_points(trials)) == 6 and not [t for t in trials if t.state == State.RUNNING]


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # a heartbeat without optimize(): the frozen one's
def test_a_worker_waiting_for_a_frozen_workers_trial_says_how_many_and_how_old(
    cli: Cli, tmp_path: Path
) -> None:
    """A worker frozen (SIGSTOP) or killed leaves its trial running until it is silent for
    --stale-after. A worker whose rest of the budget is that trial waits for it: its one line said
    only that it waited; it now says how many trials run and how old their latest heartbeat is, and
    when a silent one counts as dead. Then it fails the trial and runs one in its place."""
    from dse.study.storage import open_storage

    out = tmp_path / "runs"
    assert cli("study", "run", TINY, "--trials", "2", "--out", out, "--no-export").code == 0
    url = f"sqlite:///{out / 'tiny-study' / 'study.db'}"
    storage = open_storage(url, stale_after_s=120.0)  # as a worker opens it: with heartbeats
    frozen = optuna.load_study(study_name="tiny-study", storage=storage).ask()
    storage.record_heartbeat(frozen._trial_id)  # its one heartbeat; then nothing
    worker = cli("worker", TINY, "--storage", url, "--out", tmp_path, "--trials", "3", "--stale-after", "4")
    assert worker.code == 0, worker.err
    waiting = next(x for x in worker.err.splitlines() if "running in other workers" in x)
    said = rf"\(1 running trial, the latest heartbeat trial {frozen.number}'s, \d+ s ago\)"
    assert re.search(said, waiting), waiting
    assert "a trial silent for 4 s is a dead (killed or frozen) worker's: it is failed then" in waiting
    assert "worker: 1 trials" in worker.out and "1 stale trials" in worker.out
    assert _trials(out / "tiny-study" / "study.db", "tiny-study")[frozen.number].state == State.FAIL


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # a heartbeat without optimize(), a worker's
def test_a_lone_run_refused_for_a_live_worker_writes_nothing(cli: Cli, tmp_path: Path) -> None:
    """A lone run of a study a worker is running trials of is refused; it had left a run folder
    with its spec.json behind, written before the refusal."""
    from dse.study.storage import open_storage

    out = tmp_path / "runs"
    assert cli("study", "run", TINY, "--trials", "2", "--out", out, "--no-export").code == 0
    url = f"sqlite:///{out / 'tiny-study' / 'study.db'}"
    storage = open_storage(url, stale_after_s=120.0)  # as a worker opens it: with heartbeats
    running = optuna.load_study(study_name="tiny-study", storage=storage).ask()
    storage.record_heartbeat(running._trial_id)
    lone = cli("study", "run", TINY, "--storage", url, "--out", tmp_path / "elsewhere", "--no-export")
    assert lone.code == 2 and "is in use by a worker" in lone.err, lone.err
    assert not (tmp_path / "elsewhere").exists()


def test_a_grid_trial_claims_its_point_before_its_parameters_are_set(cli: Cli, tmp_path: Path) -> None:
    """A trial asked for but not yet given its parameters holds its point: another worker asking
    then took the same one."""
    assert cli("study", "run", GRID, "--out", tmp_path, "--trials", "4", "--no-export").code == 0
    url = f"sqlite:///{tmp_path / 'tiny-grid' / 'study.db'}"
    from dse.study import Study
    from dse.study.samplers import make_sampler

    spec = Study.load(GRID).spec
    study = optuna.load_study(study_name="tiny-grid", storage=url, sampler=make_sampler(spec, 1))
    first, second = study.ask(), study.ask()  # neither suggested yet
    claims = {tuple(t.system_attrs[POINT_ATTR]) for t in study.get_trials(states=(State.RUNNING,))}
    assert len(claims) == 2
    done = {tuple(v for _, v in sorted(t.params.items())) for t in study.get_trials(states=(State.COMPLETE,))}
    assert not claims & {tuple(p) for p in done}
    assert first.number != second.number
    with pytest.raises(RuntimeError, match="every point of the grid is complete or running"):
        study.ask()


@pytest.mark.e2e
def test_a_worker_stopped_by_sigterm_leaves_no_trial_running(
    cli: Cli, tmp_path: Path, clean_env: dict[str, str]
) -> None:
    """The next lone run was refused ("is in use by a worker") by the trial it left running."""
    db = tmp_path / "study.db"
    cmd = dse_cmd(
        "worker", str(TINY), "--storage", f"sqlite:///{db}", "--out", str(tmp_path), "--trials", "400"
    )
    # a crash on the way out shows its stack in the message below (it died of SIGSEGV once, in a
    # clean-clone CI run of 2026-12-06, after printing its line; 60 tries at 0-0.5 s did not repeat it)
    env = dict(clean_env, PYTHONFAULTHANDLER="1")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            if [t for t in _trials(db, "tiny-study") if t.state == State.RUNNING]:
                break
        except (KeyError, *STORAGE_ERRORS):  # not created yet
            continue
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert not [t for t in _trials(db, "tiny-study") if t.state == State.RUNNING]
    run = cli(
        "study",
        "run",
        TINY,
        "--storage",
        f"sqlite:///{db}",
        "--out",
        tmp_path,
        "--trials",
        "1",
        "--no-export",
    )
    assert run.code == 0, run.err


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_a_trial_the_worker_dropped_for_a_storage_away_is_failed(cli: Cli, tmp_path: Path) -> None:
    spec, stored, source = _shared_source(TINY, tmp_path)
    job = source.next()
    assert job is not None
    away = sqlalchemy.exc.OperationalError("select 1", {}, Exception("server closed the connection"))
    assert source.recover(away)  # waited it out: the trial in hand is dropped
    again = source.next()
    assert again is not None and again.number == job.number + 1
    states = {t.number: t.state for t in stored.study.get_trials()}
    assert states == {job.number: State.FAIL, again.number: State.RUNNING}
    source.close()  # stopped with a trial in hand (Ctrl-C, SIGTERM): it is failed too
    assert stored.study.get_trials()[-1].state == State.FAIL


def test_a_run_folder_that_cannot_be_written_is_one_line(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only --out beside a writable storage ended in an OSError traceback; a folder where
    spec.json goes in IsADirectoryError's."""
    import dse.study.runner as runner

    url = f"sqlite:///{tmp_path / 'db' / 'study.db'}"
    out = tmp_path / "out"
    (out / "tiny-study" / "spec.json").mkdir(parents=True)
    res = cli("study", "run", TINY, "--storage", url, "--out", out, "--trials", "1", "--no-export")
    assert res.code == 2 and "Traceback" not in res.err, res.err
    assert res.err.count("\n") == 1 and str(out / "tiny-study" / "spec.json") in res.err
    (out / "tiny-study" / "spec.json").rmdir()

    def read_only(path: Path, text: str) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(runner, "write_text", read_only)
    res = cli("study", "run", TINY, "--storage", url, "--out", out, "--trials", "1", "--no-export")
    assert res.code == 1 and "Traceback" not in res.err, res.err
    assert res.err.count("\n") == 1 and "read-only" in res.err and str(out / "tiny-study") in res.err


def test_a_sqlite_worker_writes_its_spec_beside_the_study_file(cli: Cli, tmp_path: Path) -> None:
    """It wrote a stray spec.json under --out (default runs/), away from the study file."""
    short = tmp_path / "short"
    assert cli("study", "run", TINY, "--out", short, "--trials", "2", "--no-export").code == 0
    (short / "tiny-study" / "spec.json").unlink()
    db = short / "tiny-study" / "study.db"
    elsewhere = tmp_path / "elsewhere"
    res = cli("worker", TINY, "--storage", f"sqlite:///{db}", "--out", elsewhere, "--trials", "3")
    assert res.code == 0, res.err
    assert json.loads((short / "tiny-study" / "spec.json").read_text())["name"] == "tiny-study"
    assert not elsewhere.exists()


def test_two_studies_sharing_a_sqlite_file_keep_their_own_specs(cli: Cli, tmp_path: Path) -> None:
    """Workers of two studies on one SQLite file had written one spec.json beside it, the last
    one's: the first study's spec was lost. Each is NAME.spec.json there (a study whose own run
    folder holds the file keeps spec.json: the test above)."""
    two = tmp_path / "tiny-two.toml"
    two.write_text(
        TINY.read_text().replace('name = "tiny-study"', 'name = "tiny-two"').replace("seed = 3", "seed = 4")
    )
    url = f"sqlite:///{tmp_path / 'shared' / 'shared.db'}"
    for study in (TINY, two):
        res = cli("worker", study, "--storage", url, "--out", tmp_path / "out", "--trials", "2")
        assert res.code == 0, res.err
    specs = {p.name: json.loads(p.read_text()) for p in (tmp_path / "shared").glob("*.json")}
    assert {n: (d["name"], d["seed"]) for n, d in specs.items()} == {
        "tiny-study.spec.json": ("tiny-study", 3),
        "tiny-two.spec.json": ("tiny-two", 4),
    }


def test_a_lone_runs_exports_and_report_are_written_while_it_holds_the_study(tmp_path: Path) -> None:
    """Another run of the study is refused until the exports and the report are written: run B,
    started while run A wrote them, had added trials that A's report then did not count."""
    from dse.errors import DseError
    from dse.study.api import Study
    from dse.study.storage import default_storage, lone_writer

    study = Study.load(str(TINY))
    url = default_storage(tmp_path, study.spec)
    refused: list[str] = []

    def then(res: object) -> None:
        with pytest.raises(DseError) as held, lone_writer(study.spec.name, url):
            pass
        refused.append(str(held.value))

    res = study.run(trials=2, out=tmp_path, then=then)
    assert res.trials.height == 2 and len(refused) == 1 and "pid" in refused[0], refused
    with lone_writer(study.spec.name, url):  # free once the run is done
        pass


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_a_trial_failed_between_its_record_and_its_values_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another worker fails a trial as stale after this one wrote its record and before it told
    its values: Optuna's tell raised ValueError("Cannot tell a FAIL trial."), which ended the worker
    in a traceback (only the storage's refusal of the record was caught). It is dropped, as a
    trial failed before its record is."""
    spec, stored, source = _shared_source(TINY, tmp_path)
    job = source.next()
    assert job is not None
    real_tell = stored.study.tell

    def tell_after_another_worker_failed_it(trial, values):  # type: ignore[no-untyped-def]
        stored.storage.set_trial_state_values(stored.trial_id(trial.number), state=State.FAIL)
        return real_tell(trial, values)

    monkeypatch.setattr(stored.study, "tell", tell_after_another_worker_failed_it)
    assert source.finish(job, [1.0], 0.0, {"metrics": {}}) is False
    assert "was failed by another worker; dropped" in capsys.readouterr().err
    assert stored.study.get_trials()[0].state == State.FAIL


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # the test drives the source by hand
@pytest.mark.parametrize("study_file", [TINY, GRID])
def test_a_workers_count_reads_no_records_and_counts_as_before(
    study_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker counts the study after each trial; it read every stored trial whole (their records
    included: 1.15 s a trial once 3,000 were stored). Counted by the database (a grid's points read
    without the records), the count is what Optuna's reading gave, for complete, running and
    failed trials alike."""
    from dse.study import sources

    spec, stored, source = _shared_source(study_file, tmp_path)
    first = source.next()
    assert first is not None
    values = [1.0] * len(spec.objectives.names)
    assert source.finish(first, values, 0.0, {"metrics": {}, "big": "x" * 10_000})
    second = source.next()
    assert second is not None
    stored.storage.set_trial_state_values(stored.trial_id(second.number), state=State.FAIL)
    assert source.next() is not None  # a third, running
    assert [t.state for t in stored.study.get_trials()] == [State.COMPLETE, State.FAIL, State.RUNNING]
    read: list[bool] = []
    real = sources.read_trials

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        read.append(kwargs.get("user_attrs", True))
        return real(*args, **kwargs)

    monkeypatch.setattr(sources, "read_trials", spy)
    fast = sources.tally(stored, spec)
    monkeypatch.setattr(sources, "knows_schema", lambda storage: False)
    assert fast == sources.tally(stored, spec) == (1, 2)  # one complete; it and one running
    assert read == ([False] if spec.is_grid else [])  # no record read
