"""What a study run does when its surroundings fail: a second run of the same study, a reader that
stops early, Ctrl-C at any moment, a full or read-only disk, a kill during the report.

Signals, pipes and a second process are the point of several of these, so they run `dse` as a
subprocess; the disk cases mount a small tmpfs (root, as on these machines and in CI).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import sqlalchemy
from conftest import Cli, Result, dse_cmd

from dse.errors import StorageFault
from dse.study import Study
from dse.study.faults import storage_fault
from dse.study.storage import driver_url, lone_writer

TINY = Path(__file__).resolve().parent / "data" / "tiny-study.toml"


def _complete(db: Path) -> int:
    study = optuna.load_study(study_name="tiny-study", storage=f"sqlite:///{db}")
    return len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)))


# ---------------------------------------------------------------------------------------------
# one lone writer per study


def test_a_second_lone_run_of_a_study_refuses_naming_the_running_process(cli: Cli, tmp_path: Path) -> None:
    first = cli("study", "run", TINY, "--out", tmp_path, "--trials", "4", "--no-export")
    assert first.code == 0, first.err
    db = tmp_path / "tiny-study" / "study.db"
    study = optuna.load_study(study_name="tiny-study", storage=f"sqlite:///{db}")
    with lone_writer(study.study_name, f"sqlite:///{db}"):  # a run in progress holds the study
        second = cli("study", "run", TINY, "--out", tmp_path, "--trials", "8", "--no-export")
    assert second.code == 2
    line = second.err.strip()
    assert "\n" not in line and f"pid {os.getpid()}" in line and "being run by" in line
    assert "wait for it to end before running it again" in line  # not: add a worker, who is refused
    assert _complete(db) == 4  # it ran nothing, marked nothing failed
    again = cli("study", "run", TINY, "--out", tmp_path, "--trials", "8", "--no-export")
    assert again.code == 0 and _complete(db) == 8  # once the first is done, the study resumes


def test_a_worker_and_a_lone_run_never_share_a_study(cli: Cli, tmp_path: Path) -> None:
    """A lone run counts only the trials it ran: a worker beside it pushed the study past its budget
    (222 trials stored for 200). Workers hold the study together; a lone run holds it alone."""
    assert cli("study", "run", TINY, "--out", tmp_path, "--trials", "4", "--no-export").code == 0
    db = tmp_path / "tiny-study" / "study.db"
    url = f"sqlite:///{db}"
    with lone_writer("tiny-study", url):  # a lone run in progress
        worker = cli("study", "worker", TINY, "--storage", url, "--out", tmp_path, "--trials", "6")
    assert worker.code == 2, worker.err
    assert f"being run by dse study run (pid {os.getpid()}" in worker.err
    assert "wait for it to end before a worker joins" in worker.err and _complete(db) == 4
    lock = Path(f"{db}.run-lock")
    lock.write_text("dse study run (pid 1 on gone)\n")  # left by a lone run killed with SIGKILL
    with lone_writer("tiny-study", url, worker=True), lone_writer("tiny-study", url, worker=True):
        run = cli("study", "run", TINY, "--out", tmp_path, "--trials", "6", "--no-export")  # two workers
        assert run.code == 2 and "being run by dse study worker processes; wait for them" in run.err, run.err
    assert _complete(db) == 4
    both = cli("study", "worker", TINY, "--storage", url, "--out", tmp_path, "--trials", "6")
    assert both.code == 0 and _complete(db) == 6, both.err  # alone, the worker runs


@pytest.mark.e2e
def test_two_lone_runs_at_once_never_exceed_the_budget(tmp_path: Path, clean_env: dict[str, str]) -> None:
    """Started together into one folder: one runs the budget, the other refuses (the adversarial
    run found 1,000 trials stored for a budget of 500)."""
    args = dse_cmd("study", "run", str(TINY), "--out", str(tmp_path), "--trials", "12", "--no-export")
    procs = [subprocess.Popen(args, env=clean_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]  # fmt: skip
    results = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes in ([0, 0], [0, 2]), results
    if codes == [0, 2]:
        assert any("being run by dse study run (pid" in err for _, err in results), results
    assert _complete(tmp_path / "tiny-study" / "study.db") == 12


def test_a_lone_run_on_postgresql_refuses_while_another_holds_the_study(
    cli: Cli, postgres_url: str, tmp_path: Path
) -> None:
    spec = tmp_path / "tiny-lone-pg.toml"  # its own study name on the session's shared server
    spec.write_text(TINY.read_text().replace('name = "tiny-study"', 'name = "tiny-lone-pg"'))
    res = Study.load(spec).run(trials=2, out=tmp_path, storage=postgres_url)
    with lone_writer(res.study.study_name, postgres_url):
        second = cli("study", "run", spec, "--storage", postgres_url, "--out", tmp_path, "--trials", "4")
        # the lock is its session's: no transaction left open on the server while a run lasts
        # (PostgreSQL's idle_in_transaction_session_timeout would end it, and the lock with it)
        engine = sqlalchemy.create_engine(driver_url(postgres_url), poolclass=sqlalchemy.pool.NullPool)
        with engine.connect() as con:
            states = con.execute(sqlalchemy.text(
                "select state from pg_stat_activity where application_name like 'dse study run (pid%'"
            )).scalars().all()  # fmt: skip
        engine.dispose()
        assert states == ["idle"], states
    assert second.code == 2 and f"pid {os.getpid()}" in second.err, second.err
    with lone_writer(res.study.study_name, postgres_url, worker=True):  # workers share the study
        with lone_writer(res.study.study_name, postgres_url, worker=True):
            third = cli("study", "run", spec, "--storage", postgres_url, "--out", tmp_path, "--trials", "4")
    assert third.code == 2 and "being run by dse study worker (pid" in third.err, third.err
    assert len(res.study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))) == 2


# ---------------------------------------------------------------------------------------------
# output-side errors, Ctrl-C


@pytest.mark.e2e
def test_a_reader_that_stops_early_still_gets_the_exports_and_the_report(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    """`dse study run NAME | head -1`: the run writes its tables and report before it prints."""
    proc = subprocess.Popen(
        dse_cmd("study", "run", str(TINY), "--out", str(tmp_path), "--trials", "6"),
        env=clean_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # `head -1` exits
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0, err
    assert b"tiny-study" in first and "Traceback" not in err
    folder = tmp_path / "tiny-study"
    assert (folder / "report" / "report.md").is_file()
    assert len(list((folder / "exports").glob("*/study=tiny-study/part-0.parquet"))) == 5


IN_A_SOLVE = """
import os, signal, sys
import highspy
real = highspy.Highs.run
def run(self):  # Ctrl-C to the whole process group as HiGHS starts a solve
    os.killpg(0, signal.SIGINT)
    return real(self)
highspy.Highs.run = run
from dse.cli.main import main
sys.exit(main(sys.argv[1:]))
"""
STUDY = ["study", "run", "deepseek-v3-blackwell", "--trials", "400"]
PLACE = ["place", "--hardware", "b200,h200,gb200", "--rate", "200", "--ttft", "2", "--tpot", "0.05"]


@pytest.mark.parametrize(
    ("argv", "when"),
    [
        (STUDY, 0.15),  # importing the engine
        (STUDY, 1.0),  # the warm start's placements
        (STUDY, 4.0),  # trials
        (STUDY, "solve"),  # inside the first MILP solve (the warm start's)
        (PLACE, "solve"),
    ],
)
def test_ctrl_c_to_the_process_group_is_one_line_and_exit_130(
    tmp_path: Path, clean_env: dict[str, str], argv: list[str], when: float | str
) -> None:
    """SIGINT to the whole process group (the terminal's Ctrl-C, which the sampler process gets
    too) at several moments: one line, exit code 130, never a traceback or a run that goes on."""
    out = ["--out", str(tmp_path)] if argv[0] == "study" else []
    cmd = dse_cmd(*argv, *out) if when != "solve" else [sys.executable, "-c", IN_A_SOLVE, *argv, *out]
    proc = subprocess.Popen(
        cmd, env=clean_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    if when != "solve":
        time.sleep(float(when))
        os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("dse: ") and "interrupted" in last


# ---------------------------------------------------------------------------------------------
# storage faults: full, read-only, locked


def _fill(disk: Path, leave_kib: int = 0) -> None:
    """Leave about ``leave_kib`` free on ``disk`` (none: write until not one more block fits)."""
    with open(disk / "filler", "wb", buffering=0) as fh:  # unbuffered: a full disk refuses each write
        for block in (1 << 16, 1 << 12, 1 << 9):
            with contextlib.suppress(OSError):
                while shutil.disk_usage(disk).free > leave_kib * 1024 + block or not leave_kib:
                    fh.write(b"\0" * block)


def test_a_full_disk_is_one_line_loses_nothing_and_the_run_resumes(cli: Cli, small_disk: Path) -> None:
    first = cli("study", "run", TINY, "--out", small_disk, "--trials", "4", "--no-export")
    assert first.code == 0, first.err
    _fill(small_disk, 200)
    full = cli("study", "run", TINY, "--out", small_disk, "--trials", "200", "--no-export")
    assert full.code == 1
    line = full.err.strip()
    assert "\n" not in line and "the disk is full" in line and str(small_disk / "tiny-study") in line
    (small_disk / "filler").unlink()
    db = small_disk / "tiny-study" / "study.db"
    stored = _complete(db)
    assert stored >= 4  # what was stored before the disk filled is kept
    resumed = cli("study", "run", TINY, "--out", small_disk, "--trials", "20", "--no-export")
    assert resumed.code == 0, resumed.err
    assert _complete(db) == 20


def test_exports_and_report_on_a_full_disk_are_one_line_and_leave_no_partial_report(
    cli: Cli, small_disk: Path
) -> None:
    assert cli("study", "run", TINY, "--out", small_disk, "--trials", "6").code == 0
    report = (small_disk / "tiny-study" / "report" / "report.md").read_text()
    _fill(small_disk)
    for command in ("export", "report"):
        res = cli("study", command, TINY, "--out", small_disk)
        assert res.code == 1, res.err
        assert "the disk is full" in res.err and "Traceback" not in res.err
    assert (small_disk / "tiny-study" / "report" / "report.md").read_text() == report  # the old one stands
    assert not list((small_disk / "tiny-study").glob(".report.*"))


def test_a_read_only_study_folder_says_read_only(
    cli: Cli, small_disk: Path, clean_env: dict[str, str]
) -> None:
    # the first run in its own process, so that this one holds no file open on the disk
    first = dse_cmd("study", "run", str(TINY), "--out", str(small_disk), "--trials", "3", "--no-export")
    assert subprocess.run(first, env=clean_env, capture_output=True).returncode == 0
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    res = cli("study", "run", TINY, "--out", small_disk, "--trials", "6")
    assert res.code == 1
    assert "it is read-only" in res.err and "unable to open" not in res.err


def test_a_locked_database_is_named_as_locked(tmp_path: Path) -> None:
    db = tmp_path / "study.db"
    holder = sqlite3.connect(db)
    holder.execute("create table t (x)")
    holder.execute("begin exclusive")
    try:
        with pytest.raises(sqlite3.OperationalError) as caught:
            sqlite3.connect(db, timeout=0).execute("select * from t")
    finally:
        holder.rollback()
    fault = storage_fault(caught.value, f"sqlite:///{db}", db)
    assert isinstance(fault, StorageFault) and fault.exit_code == 1
    assert str(fault) == f"sqlite:///{db}: the database is locked by another process (database is locked)"


def test_a_damaged_database_is_one_line_for_every_study_command(cli: Cli, tmp_path: Path) -> None:
    """Pages past the header overwritten (a disk fault, a copy cut short and patched): a run, an
    export and a report each say the file is damaged, in one line, exit 1 (was a traceback)."""
    assert cli("study", "run", TINY, "--out", tmp_path, "--trials", "12", "--no-export").code == 0
    db = tmp_path / "tiny-study" / "study.db"
    with open(db, "r+b") as fh:  # every page but the first, which holds the header and the schema
        fh.seek(4096)
        fh.write(random.Random(0).randbytes(db.stat().st_size - 4096))
    for command in (["run", TINY, "--trials", "14", "--no-export"], ["export", TINY], ["report", TINY]):
        res = cli("study", *command, "--out", tmp_path)
        assert res.code == 1, (command, res.err)
        assert res.err.count("\n") == 1 and "Traceback" not in res.err
        assert f"{db}: the database file is damaged (restore it from a copy" in res.err


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full, a device every write fills")
def test_an_output_on_a_full_disk_is_one_line(clean_env: dict[str, str]) -> None:
    """`dse ... > file` where the disk is full: one line naming standard output, exit 1 (the process
    itself is the point: the interpreter's own stdout and its last flush)."""
    for command in (["catalog", "list", "hardware"], ["predict", "--hardware", "b200", "--json"]):
        with open("/dev/full", "w") as full:
            done = subprocess.run(
                dse_cmd(*command), stdout=full, stderr=subprocess.PIPE, text=True, env=clean_env
            )
        assert done.returncode == 1, done.stderr
        assert done.stderr == "dse: error: standard output: cannot be written (No space left on device)\n"


def test_a_file_where_the_run_folder_goes_is_named(cli: Cli, tmp_path: Path) -> None:
    """Not `--storage`, which the user never gave: the folder the run needs."""
    (tmp_path / "tiny-study").write_text("")
    res = cli("study", "run", TINY, "--out", tmp_path, "--trials", "2")
    assert res.code == 2
    assert (
        res.err
        == f"dse: error: {tmp_path / 'tiny-study'}: must be a folder that can be created (File exists)\n"
    )


def test_a_row_a_damaged_file_garbled_is_one_line(cli: Cli, tmp_path: Path) -> None:
    """The file's pages intact (SQLite's integrity check passes), a stored value not JSON: the same
    one line as a damaged page (it was a JSONDecodeError's traceback)."""
    assert cli("study", "run", TINY, "--out", tmp_path, "--trials", "4", "--no-export").code == 0
    db = tmp_path / "tiny-study" / "study.db"
    with sqlite3.connect(db) as con:
        con.execute("update trial_user_attributes set value_json = '{\x01' where trial_id = 2")
    for command in (["run", TINY, "--trials", "6", "--no-export"], ["report", TINY]):
        res = cli("study", *command, "--out", tmp_path)
        assert res.code == 1 and res.err.count("\n") == 1, (command, res.err)
        assert "the database file is damaged" in res.err and "trial 1's rows do not read" in res.err


def test_a_lone_run_is_alone_by_any_path_to_its_file(cli: Cli, tmp_path: Path) -> None:
    """The lock is the file's, not the path's: a link to the same database is the same study."""
    assert cli("study", "run", TINY, "--out", tmp_path, "--trials", "2", "--no-export").code == 0
    db = tmp_path / "tiny-study" / "study.db"
    (tmp_path / "alias.db").symlink_to(db)
    with lone_writer("tiny-study", f"sqlite:///{db}"):
        alias = f"sqlite:///{tmp_path / 'alias.db'}"
        other = cli("study", "run", TINY, "--storage", alias, "--out", tmp_path)
    assert other.code == 2 and "being run by dse study run" in other.err, other.err


def test_a_file_where_the_exports_or_the_report_go_is_refused_not_replaced(cli: Cli, tmp_path: Path) -> None:
    """A file named `exports` was a NotADirectoryError's traceback; a file named `report` was
    deleted and replaced by the report's folder without a word."""
    assert cli("study", "run", TINY, "--out", tmp_path, "--trials", "2", "--no-export").code == 0
    folder = tmp_path / "tiny-study"
    for name, command in (("exports", "export"), ("report", "report")):
        (folder / name).write_text("mine\n")
        res = cli("study", command, TINY, "--out", tmp_path)
        assert res.code == 2, res.err
        assert res.err == f"dse: error: {folder / name}: must be a folder: a file has its name\n"
        assert (folder / name).read_text() == "mine\n"


def test_an_error_no_storage_cause_explains_keeps_its_traceback(tmp_path: Path) -> None:
    assert storage_fault(ValueError("a bug"), "x", tmp_path / "study.db") is None


# ---------------------------------------------------------------------------------------------
# the report, written all or nothing


@pytest.mark.e2e
def test_a_report_killed_while_drawing_leaves_the_last_whole_report(
    tmp_path: Path, tiny_cli_run: Result
) -> None:
    """SIGKILL in the middle of drawing (the adversarial run found a partial report/ and a 0-byte
    .tmp file): the report folder is the previous one, whole (the session's tiny run's, conftest)."""
    assert tiny_cli_run.code == 0, tiny_cli_run.err
    folder = tmp_path / "tiny-study" / "report"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    # a report process that is killed as soon as it has drawn its first figure
    script = (
        "import os, signal, sys\n"
        "import dse.study.report_figures as rf\n"
        "real = rf.save\n"
        "def save(fig, path):\n"
        "    real(fig, path)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "rf.save = save\n"
        "from dse.cli.main import main\n"
        f"sys.exit(main(['study', 'report', {str(TINY)!r}, '--out', {str(tmp_path)!r}]))\n"
    )
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert killed.returncode == -signal.SIGKILL
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


SWALLOWED = """
import signal, sys
import dse.evaluation as evaluation
real = evaluation.check
class Finalized:
    def __del__(self):  # Ctrl-C arriving while a finalizer runs: Python prints it as ignored
        signal.raise_signal(signal.SIGINT)
calls = []
def check(*args, **kwargs):
    calls.append(1)
    if len(calls) == 3:
        Finalized()  # dropped at once: its finalizer runs here
    return real(*args, **kwargs)
evaluation.check = check
from dse.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_ctrl_c_python_swallows_in_a_finalizer_still_stops_the_run(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    """The adversarial run saw a SIGINT to the process group have no effect: the run completed its
    budget and exited 0. A KeyboardInterrupt raised inside a finalizer is printed as ignored and
    lost; the handler remembers the signal and the trial loop stops at the next trial."""
    argv = ["study", "run", str(TINY), "--out", str(tmp_path), "--trials", "40", "--no-export"]
    proc = subprocess.run(
        [sys.executable, "-c", SWALLOWED, *argv], env=clean_env, capture_output=True, text=True
    )
    assert proc.returncode == 130, proc.stderr[-2000:]
    assert proc.stderr.strip().startswith("dse: error: interrupted after")  # one line, no traceback
    assert "\n" not in proc.stderr.strip()
    assert _complete(tmp_path / "tiny-study" / "study.db") < 40


PYRUN_INTERRUPT = """
import ctypes, sys
import dse.cli.main as cli

def _main(argv):  # Ctrl-C inside code an extension module runs through PyRun_String
    run = ctypes.pythonapi.PyRun_String
    run.restype = ctypes.py_object
    run.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.py_object, ctypes.py_object]
    run(b"raise KeyboardInterrupt", 257, {}, {})
    return 0

cli._main = _main
sys.exit(cli.main())
"""


def test_ctrl_c_in_code_run_through_pyrun_still_exits_130(tmp_path: Path, clean_env: dict[str, str]) -> None:
    """CPython marks a KeyboardInterrupt that escapes ``PyRun_*`` as unhandled, and a process run
    with ``-m`` that carries the mark kills itself with SIGINT at exit, whatever its code, even
    when the interrupt was caught: `dse` printed its line and died of the signal (exit -2), now
    and then, when Ctrl-C came during the warm start's placements."""
    (tmp_path / "interrupted_in_pyrun.py").write_text(PYRUN_INTERRUPT)
    env = {**clean_env, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "interrupted_in_pyrun"], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == "dse: interrupted\n"
