"""How storage errors are sorted: an outage a worker waits out, a refusal that is one line at once
(exit 1), a wrong URL (exit 2). The drivers' errors are injected as Optuna and SQLAlchemy wrap
them; the end-to-end cases fill a small tmpfs under a worker and stop a real PostgreSQL server
under a lone run and before a worker starts."""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import signal
import socket
import sqlite3
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import optuna
import psycopg2
import pytest
import sqlalchemy.exc
from conftest import Cli, dse_cmd

from dse.errors import InputError, StorageFault
from dse.study import storage as storage_mod
from dse.study.faults import driver_line, server_away, storage_fault, storage_unreachable, writing
from dse.study.storage import open_storage, wait_for_storage

TINY = Path(__file__).resolve().parent / "data" / "tiny-study.toml"
OPTUNA_COMMIT = (  # Optuna's wrapper text of a failed commit, which names no cause
    "An exception is raised during the commit. This typically happens due to invalid data in the "
    "commit, e.g. exceeding max length."
)


def _wrapped(driver_error: BaseException) -> optuna.exceptions.StorageInternalError:
    """``driver_error`` as a failed commit reaches dse: SQLAlchemy's error around it, Optuna's
    around that."""
    try:
        try:
            raise sqlalchemy.exc.OperationalError("INSERT INTO trials ...", {}, driver_error)
        except sqlalchemy.exc.OperationalError as exc:
            raise optuna.exceptions.StorageInternalError(OPTUNA_COMMIT) from exc
    except optuna.exceptions.StorageInternalError as outer:
        return outer


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once the socket is closed


def _refused() -> psycopg2.OperationalError:
    try:
        psycopg2.connect(host="127.0.0.1", port=_closed_port(), dbname="dse", connect_timeout=3)
    except psycopg2.OperationalError as exc:
        return exc
    raise AssertionError("a closed port answered")


# ---------------------------------------------------------------------------------------------
# sorting: SQLite's errors are no outage


@pytest.mark.parametrize(
    ("said", "cause"),
    [
        ("database or disk is full", "the disk is full"),
        ("attempt to write a readonly database", "it is read-only"),
        ("database disk image is malformed", "the database file is damaged"),
    ],
)
def test_a_sqlite_refusal_is_a_fault_at_once_not_an_outage(said: str, cause: str) -> None:
    exc = _wrapped(sqlite3.OperationalError(said))
    assert not storage_unreachable(exc)  # a worker had retried a full disk for 2 minutes
    assert server_away(exc) is None
    fault = storage_fault(exc, "sqlite:///x/study.db")
    assert isinstance(fault, StorageFault) and fault.exit_code == 1
    assert str(fault).startswith(f"sqlite:///x/study.db: {cause}") and f"({said})" in str(fault)


def test_a_locked_sqlite_file_is_waited_for_by_a_worker() -> None:
    assert storage_unreachable(_wrapped(sqlite3.OperationalError("database is locked")))


def test_the_waiting_line_quotes_the_driver_not_optunas_wrapper(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(time, "sleep", lambda _s: None)
    said = "server closed the connection unexpectedly\n\tThis probably means"
    exc = _wrapped(psycopg2.OperationalError(said))
    assert driver_line(exc) == "server closed the connection unexpectedly"
    wait_for_storage(exc, "postgresql://u:secret@h/dse", None)
    err = capsys.readouterr().err
    assert err == "dse: storage unreachable (server closed the connection unexpectedly); retrying\n"
    # a driver's error of no words ("()") had been quoted as it was: "storage unreachable (())"
    assert driver_line(_wrapped(psycopg2.OperationalError("()"))) == "OperationalError"


def test_a_storage_away_too_long_is_a_storage_fault_not_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "sleep", lambda _s: None)
    exc = sqlalchemy.exc.OperationalError("SELECT 1", {}, _refused())
    with pytest.raises(StorageFault) as caught:
        wait_for_storage(exc, "postgresql://u:secret@127.0.0.1/dse", time.monotonic() - 1000)
    line = str(caught.value)
    assert caught.value.exit_code == 1 and "\n" not in line  # was exit 2, as if the URL were wrong
    assert line.startswith("postgresql://u:***@127.0.0.1/dse: unreachable for 120 s (connection to server at")
    assert "Connection refused" in line and "secret" not in line and "run the same command again" in line


# ---------------------------------------------------------------------------------------------
# a server that does not answer


@pytest.mark.parametrize(
    "said",
    [
        "FATAL:  the database system is shutting down",
        "server closed the connection unexpectedly\n\tThis probably means the server terminated abnormally",
        "terminating connection due to administrator command",
    ],
)
def test_a_server_going_away_is_one_line_with_the_rerun_hint(said: str) -> None:
    exc = sqlalchemy.exc.OperationalError("SELECT 1", {}, psycopg2.OperationalError(said))
    exc = pickle.loads(pickle.dumps(exc))  # as the sampler's process hands it to the run
    assert storage_unreachable(exc)  # a worker waits it out
    fault = storage_fault(exc, "postgresql://u@h/dse")
    assert isinstance(fault, StorageFault) and fault.exit_code == 1  # was None: a traceback
    line = str(fault)
    assert line == (
        f"postgresql://u@h/dse: the database server does not answer ({said.splitlines()[0]}); the stored "
        "trials are kept: run the same command again once it answers"
    )


def test_a_refused_connection_is_a_storage_fault_and_a_wrong_host_bad_input() -> None:
    port = _closed_port()
    with pytest.raises(StorageFault) as caught:
        open_storage(f"postgresql://u:secret@127.0.0.1:{port}/dse")
    assert "Connection refused" in str(caught.value) and "secret" not in str(caught.value)
    with pytest.raises(InputError) as wrong:
        open_storage("postgresql://u@no-such-host.invalid/dse")
    assert wrong.value.exit_code == 2 and "could not translate host name" in str(wrong.value)


def test_a_worker_waits_for_a_server_at_its_start_then_gives_up_with_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DSE_STORAGE_RETRY_S", "1.5")
    t0 = time.monotonic()
    with pytest.raises(StorageFault) as caught:
        open_storage(f"postgresql://u@127.0.0.1:{_closed_port()}/dse", stale_after_s=120)
    assert time.monotonic() - t0 >= 1.5  # it waited (it had exited at once, exit 2)
    assert "unreachable for 1.5 s" in str(caught.value) and caught.value.exit_code == 1
    assert "dse: storage unreachable (connection to server at" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# end to end


def _fill(disk: Path, leave_kib: int) -> None:
    with open(disk / "filler", "wb", buffering=0) as fh:
        for block in (1 << 16, 1 << 12, 1 << 9):
            with contextlib.suppress(OSError):
                while shutil.disk_usage(disk).free > leave_kib * 1024 + block:
                    fh.write(b"\0" * block)


@pytest.mark.e2e
def test_a_worker_on_a_full_disk_says_so_at_once(cli: Cli, small_disk: Path) -> None:
    assert cli("study", "run", TINY, "--out", small_disk, "--trials", "4", "--no-export").code == 0
    _fill(small_disk, 200)
    url = f"sqlite:///{small_disk / 'tiny-study' / 'study.db'}"
    t0 = time.monotonic()
    res = cli("study", "worker", TINY, "--storage", url, "--trials", "400", "--out", small_disk)
    assert res.code == 1, res.err
    assert time.monotonic() - t0 < 60  # it had retried for 2 minutes, then said "unreachable", exit 2
    line = res.err.strip()
    assert "\n" not in line and "retrying" not in line and "the disk is full" in line, res.err


def _renamed(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(TINY.read_text().replace('name = "tiny-study"', f'name = "{name}"'))
    return path


def _complete(url: str, name: str) -> int:
    try:
        study = optuna.load_study(study_name=name, storage=url)
    except Exception:  # noqa: BLE001 - not created yet
        return 0
    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))


def _pg_ctl(server: Any, *args: str) -> None:
    server._run([server._bin("pg_ctl"), "-D", str(server.data_dir), *args], "pg_ctl")


@pytest.mark.e2e
def test_a_lone_run_whose_server_stops_is_one_line_and_the_rerun_resumes(
    tmp_path: Path, postgres_server: Any, clean_env: dict[str, str], cli: Cli
) -> None:
    spec, url = _renamed(tmp_path, "pg-stop-study"), postgres_server.url
    argv = ["study", "run", str(spec), "--storage", url, "--trials", "900", "--no-export",
            "--out", str(tmp_path)]  # fmt: skip
    run = subprocess.Popen(dse_cmd(*argv), env=clean_env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while _complete(url, "pg-stop-study") < 3 and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.2)
        _pg_ctl(postgres_server, "-m", "immediate", "-w", "stop")  # every connection dropped at once
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
        if not (postgres_server.data_dir / "postmaster.pid").exists():
            postgres_server._pg_ctl_start()
    assert run.returncode == 1, err
    line = err.strip()
    assert "\n" not in line and "Traceback" not in err, err  # was a traceback through the proposer
    assert "the database server does not answer" in line and "run the same command again" in line
    stored = _complete(url, "pg-stop-study")
    assert stored >= 3
    again = cli(*argv[:5], "--trials", str(stored + 2), *argv[7:])
    assert again.code == 0, again.err
    assert _complete(url, "pg-stop-study") == stored + 2


@pytest.mark.e2e
def test_a_worker_started_while_the_server_is_down_waits_for_it(
    tmp_path: Path, postgres_server: Any, clean_env: dict[str, str]
) -> None:
    spec, url = _renamed(tmp_path, "pg-late-study"), postgres_server.url
    argv = ["worker", str(spec), "--storage", url, "--trials", "3", "--out", str(tmp_path)]
    _pg_ctl(postgres_server, "-m", "fast", "-w", "stop")
    try:
        worker = subprocess.Popen(dse_cmd(*argv), env=clean_env, stderr=subprocess.PIPE, text=True)
        time.sleep(5.0)
        assert worker.poll() is None  # it had exited at once, exit 2
    finally:
        postgres_server._pg_ctl_start()
    _, err = worker.communicate(timeout=300)
    assert worker.returncode == 0, err
    assert "dse: storage unreachable (connection to server at" in err and "Traceback" not in err
    assert _complete(url, "pg-late-study") == 3


def _blocked_on(url: str, table: str) -> bool:
    """Whether a connection waits for a lock on ``table`` (another holds it)."""
    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as con:
            return bool(
                con.execute(
                    sqlalchemy.text(
                        "select count(*) from pg_locks where not granted and relation = cast(:t as regclass)"
                    ),
                    {"t": table},
                ).scalar()
            )
    finally:
        engine.dispose()


@pytest.mark.e2e
def test_a_worker_whose_server_stops_while_it_opens_the_study_waits_for_it(
    tmp_path: Path, postgres_server: Any, clean_env: dict[str, str]
) -> None:
    """The server stops after the worker opened the storage, while it creates or loads the study
    (it had exited 1 at once with "the database server does not answer")."""
    spec, url = _renamed(tmp_path, "pg-opening-study"), postgres_server.url
    open_storage(url).engine.dispose()  # the tables, so that a lock on one can hold the worker there
    argv = ["worker", str(spec), "--storage", url, "--trials", "3", "--out", str(tmp_path)]
    holder = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
    con = holder.connect()
    con.execute(sqlalchemy.text("lock table studies in access exclusive mode"))  # until the stop
    worker = subprocess.Popen(dse_cmd(*argv), env=clean_env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not _blocked_on(url, "studies") and time.monotonic() < deadline and worker.poll() is None:
            time.sleep(0.1)
        assert _blocked_on(url, "studies"), "the worker never reached the study"
        _pg_ctl(postgres_server, "-m", "fast", "-w", "stop")  # the worker's connection is dropped
        time.sleep(2.0)
        assert worker.poll() is None, worker.communicate()[1]  # it had exited 1 at once
    finally:
        with contextlib.suppress(sqlalchemy.exc.DBAPIError):
            con.close()
        holder.dispose()
        if not (postgres_server.data_dir / "postmaster.pid").exists():
            postgres_server._pg_ctl_start()
    _, err = worker.communicate(timeout=300)
    assert worker.returncode == 0, err
    assert "dse: storage unreachable (" in err and "Traceback" not in err
    assert _complete(url, "pg-opening-study") == 3


@pytest.mark.e2e
def test_a_worker_waits_for_a_server_away_while_it_takes_its_hold_and_a_lone_run_does_not(
    postgres_server: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The hold (:func:`lone_writer`) comes just after the study is opened: a worker waits there
    too; a lone run's error is at once (the command makes it one line, exit 1)."""
    monkeypatch.setenv("DSE_STORAGE_RETRY_S", "30")  # a server that never comes back fails fast
    url, back = postgres_server.url, threading.Timer(2.0, postgres_server._pg_ctl_start)
    _pg_ctl(postgres_server, "-m", "fast", "-w", "stop")
    try:
        with pytest.raises(sqlalchemy.exc.OperationalError), storage_mod.lone_writer("pg-hold-study", url):
            pass
        back.start()
        t0 = time.monotonic()
        with storage_mod.lone_writer("pg-hold-study", url, worker=True):
            held = time.monotonic() - t0
    finally:
        if back.is_alive():
            back.join()
        if not (postgres_server.data_dir / "postmaster.pid").exists():
            postgres_server._pg_ctl_start()
    assert held >= 1.5  # it waited for the server (it had raised at once)
    assert "dse: storage unreachable (connection to server at" in capsys.readouterr().err


def test_a_postgres_scheme_url_names_the_same_server(tmp_path: Path, postgres_url: str, cli: Cli) -> None:
    """libpq's other scheme, postgres:// (what many hosts hand out), was refused: "cannot be
    opened (NoSuchModuleError: Can't load plugin: sqlalchemy.dialects:postgres)"."""
    url = "postgres://" + postgres_url.split("://", 1)[1]
    spec = _renamed(tmp_path, "pg-scheme-study")
    run = cli("study", "run", str(spec), "--storage", url, "--trials", "2", "--no-export", "--out", tmp_path)
    assert run.code == 0, run.err
    assert _complete(postgres_url, "pg-scheme-study") == 2
    # the lone run's hold is the server's advisory lock, as for postgresql://
    with storage_mod.lone_writer("pg-scheme-study", url), pytest.raises(InputError, match="being run by"):
        with storage_mod.lone_writer("pg-scheme-study", postgres_url, worker=True):
            pass


def _frozen(server: Any) -> list[int]:
    """The server's processes (the postmaster and its backends), as SIGSTOP is to freeze them."""
    master = int((server.data_dir / "postmaster.pid").read_text().split()[0])
    kids = subprocess.run(["pgrep", "-P", str(master)], capture_output=True, text=True).stdout.split()
    return [master, *map(int, kids)]


def _freeze_under_a_worker(
    tmp_path: Path, server: Any, env: dict[str, str], name: str, stop_s: float | None
) -> tuple[subprocess.Popen[str], float]:
    """A worker of study ``name`` whose server is frozen (SIGSTOP) once 3 trials are stored: for
    ``stop_s`` seconds, or (None) until the worker exits; the worker and the seconds it ran
    after the freeze."""
    spec, url = _renamed(tmp_path, name), server.url
    argv = ["worker", str(spec), "--storage", url, "--trials", "40", "--out", str(tmp_path)]
    worker = subprocess.Popen(dse_cmd(*argv), env=env, stderr=subprocess.PIPE, text=True)
    frozen: list[int] = []
    try:
        deadline = time.monotonic() + 180
        while _complete(url, name) < 3 and time.monotonic() < deadline and worker.poll() is None:
            time.sleep(0.2)
        frozen = _frozen(server)
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        if stop_s is not None:
            time.sleep(stop_s)
        else:
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.wait(timeout=60)  # it waited forever
        return worker, time.monotonic() - t0
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        if stop_s is None and worker.poll() is None:
            worker.kill()


@pytest.mark.e2e
def test_a_worker_whose_server_stops_answering_says_so_after_a_bound(
    tmp_path: Path, postgres_server: Any, clean_env: dict[str, str]
) -> None:
    """A server frozen (SIGSTOP: its connections stay open, nothing answers) had held a worker
    forever, silent. With 2 s for an answer and 3 s of retries, it is one line naming both within
    seconds, exit 1; the trials stored before are kept."""
    env = {**clean_env, "DSE_DB_ANSWER_S": "2", "DSE_STORAGE_RETRY_S": "3"}
    worker, after = _freeze_under_a_worker(tmp_path, postgres_server, env, "pg-frozen-study", None)
    _, err = worker.communicate(timeout=60)
    assert worker.returncode == 1, err
    assert after < 30, after  # 2 s, then 3 s of retries (each try up to 2 s more), and a trial
    line = err.strip().splitlines()[-1]
    assert line.startswith("dse: error: postgresql") and "Traceback" not in err, err
    assert "unreachable for 3 s (no answer from the database server within 2 s" in line, line
    assert _complete(postgres_server.url, "pg-frozen-study") >= 3


@pytest.mark.e2e
def test_a_worker_whose_server_pauses_for_a_second_goes_on(
    tmp_path: Path, postgres_server: Any, clean_env: dict[str, str]
) -> None:
    """A pause shorter than the bound (1 s of SIGSTOP against 4 s) is not an outage: the worker
    finishes its study without a word of it."""
    env = {**clean_env, "DSE_DB_ANSWER_S": "4", "DSE_STORAGE_RETRY_S": "3"}
    worker, _ = _freeze_under_a_worker(tmp_path, postgres_server, env, "pg-paused-study", 1.0)
    _, err = worker.communicate(timeout=300)
    assert worker.returncode == 0, err
    assert "unreachable" not in err and "Traceback" not in err, err
    assert _complete(postgres_server.url, "pg-paused-study") == 40


def test_a_bad_wait_in_the_environment_is_refused_as_itself_when_the_storage_opens(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """DSE_STORAGE_RETRY_S had been read only when a storage first went away: a run with a typo in
    it went on, and the first server restart ended the worker with exit 2 instead of being waited
    out. DSE_DB_ANSWER_S's refusal had been wrapped as the storage URL's ("storage: url = ...:
    cannot be opened (InputError: DSE_DB_ANSWER_S ...)"): the line names the variable alone."""
    monkeypatch.setenv("DSE_STORAGE_RETRY_S", "2 min")
    db = tmp_path / "runs" / "study.db"
    with pytest.raises(InputError) as caught:
        open_storage(f"sqlite:///{db}", stale_after_s=120)
    assert str(caught.value).startswith("DSE_STORAGE_RETRY_S = '2 min': must be a number of seconds")
    assert caught.value.exit_code == 2 and not (tmp_path / "runs").exists()  # nothing left behind
    monkeypatch.delenv("DSE_STORAGE_RETRY_S")
    monkeypatch.setenv("DSE_DB_ANSWER_S", "abc")
    with pytest.raises(InputError) as answer:
        open_storage(f"postgresql://u@127.0.0.1:{_closed_port()}/dse")
    assert str(answer.value).startswith("DSE_DB_ANSWER_S = 'abc': must be a number of seconds"), answer.value


def _virtual_root() -> Path:
    """/proc where it is a file system of no size (Linux), else the test does not apply."""
    proc = Path("/proc")
    if not proc.is_dir() or not hasattr(os, "statvfs"):
        pytest.skip("no /proc here")
    if os.statvfs(proc).f_blocks or os.statvfs(proc).f_files:
        pytest.skip("no /proc of no size here")
    return proc


def test_an_out_folder_on_a_virtual_file_system_is_bad_input_not_a_full_disk(
    cli: Cli, tmp_path: Path
) -> None:
    """`--out /proc/x` was "the disk is full" (exit 1): /proc's free room is 0, as a full disk's,
    and root may write to it by its mode. It holds no files: one line naming --out and the rule,
    exit 2, before any storage is made; a storage URL there is no full disk either."""
    proc = _virtual_root()
    run = cli("study", "run", TINY, "--trials", "1", "--out", proc / "x")
    rule = f"--out = '{proc / 'x'}': must be a folder files can be written in: {proc} is a virtual"
    assert run.code == 2 and len(run.err.strip().splitlines()) == 1 and rule in run.err, run.err
    url = f"sqlite:///{proc / 'x' / 'study.db'}"
    run = cli("study", "run", TINY, "--trials", "1", "--out", tmp_path, "--storage", url)
    assert run.code == 2 and "disk is full" not in run.err, run.err
    missing = FileNotFoundError(2, "No such file or directory")
    assert storage_fault(missing, "here", proc / "x" / "study.db") is None  # not a full disk
    full = OSError(28, "No space left on device")
    fault = storage_fault(full, "here", proc / "x" / "study.db")
    assert fault is not None and fault.cause == "the disk is full"  # the OS's own word still counts
    # the exports' and the report's writes (StudyResults.export("/proc/x")) say the same, as bad input
    with pytest.raises(InputError, match=f"^{proc / 'x'}: must be a folder files can be written in"):
        with writing(proc / "x"):
            (proc / "x").mkdir(parents=True)


def test_the_bound_on_silence_is_dses_connections_alone(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """psycopg2 takes one wait callback per process. dse's bounded every psycopg2 connection of the
    process: a user's own query through the Python API (a report that is silent for longer than the
    bound until it is done) was cut with dse's "no answer" error. Now the bound is dse's
    connections' alone, and a callback installed before dse's (gevent's, say) keeps the others."""
    import psycopg2
    import psycopg2.extensions
    import sqlalchemy

    from dse.study import server_answer
    from dse.study.storage import open_storage

    monkeypatch.setenv("DSE_DB_ANSWER_S", "0.5")
    seen: list[object] = []

    def theirs(conn: object) -> None:  # a user's callback, installed before dse's
        seen.append(conn)
        psycopg2.extras.wait_select(conn)

    import psycopg2.extras

    before = psycopg2.extensions.get_wait_callback()
    monkeypatch.setattr(server_answer, "_before", [None])
    psycopg2.extensions.set_wait_callback(theirs)
    try:
        storage = open_storage(postgres_url)
        assert psycopg2.extensions.get_wait_callback() is server_answer._wait
        with psycopg2.connect(postgres_url.replace("+psycopg2", "")) as own, own.cursor() as cur:
            cur.execute("select pg_sleep(1.0)")  # silent twice the bound: not dse's, not cut
            assert cur.fetchone() == ("",)
        assert own in seen  # through the callback it had before
        cut = "no answer from the database server within 0.5 s"
        with pytest.raises(sqlalchemy.exc.OperationalError, match=cut):
            with storage.engine.connect() as con:  # type: ignore[attr-defined]
                con.execute(sqlalchemy.text("select pg_sleep(1.0)"))
        storage.engine.dispose()  # type: ignore[attr-defined]
    finally:
        psycopg2.extensions.set_wait_callback(before)
