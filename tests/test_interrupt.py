"""Ctrl-C leaves one line: a helper thread that fails once it came prints no traceback."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dse import interrupt
from dse.study import Study

TINY = Path(__file__).resolve().parent / "data" / "tiny-study.toml"


def _fail_in_a_thread() -> None:
    def boom() -> None:
        raise OSError("the pipe it read was closed")

    t = threading.Thread(target=boom)
    t.start()
    t.join()


def test_a_thread_failing_after_ctrl_c_is_not_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    reported: list[str] = []

    def report(args: Any) -> None:  # what Python would print: the thread's traceback
        reported.append(str(args.exc_value))

    monkeypatch.setattr(threading, "excepthook", report)
    with interrupt.remembered():
        _fail_in_a_thread()  # before Ctrl-C: a real failure, reported as Python reports it
        assert reported == ["the pipe it read was closed"]
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            signal.sigtimedwait([], 0)  # a point where the handler runs
        assert interrupt.pressed()
        _fail_in_a_thread()  # after it: a consequence of the interrupt, left out
        assert reported == ["the pipe it read was closed"]
    assert threading.excepthook is report  # put back after the block


def test_an_error_after_a_swallowed_ctrl_c_is_the_interruption(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A library that swallows the KeyboardInterrupt mid-update then fails on its half-made state
    (pyomo once raised a DeveloperError): one line and 130, not the library's traceback."""
    import dse.cli.main as cli_main

    def swallowing(argv: list[str]) -> int:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            signal.sigtimedwait([], 0)
        except KeyboardInterrupt:
            pass  # the library's own except clause
        raise RuntimeError("'_data' dictionary and '_index' attribute are out of sync")

    monkeypatch.setattr(cli_main, "_main", swallowing)
    assert cli_main.main(["catalog", "list"]) == 130
    assert capsys.readouterr().err == "dse: interrupted\n"

    def failing(argv: list[str]) -> int:  # without a signal, an error is a bug, with its traceback
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli_main, "_main", failing)
    with pytest.raises(RuntimeError, match="a bug"):
        cli_main.main(["catalog", "list"])


class _ClosesAClosedPipe:
    """As pyomo's output tee is when an interruption closed its pipe first: its finaliser fails."""

    def __del__(self) -> None:
        raise OSError(9, "Bad file descriptor")


def test_a_finaliser_failing_after_ctrl_c_is_not_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM to a study run once left pyomo's `TeeStream.__del__` traceback after its one line:
    a finaliser that fails once Ctrl-C came, in the command or as the process exits, is the
    interruption's; before it, a real failure, reported as Python reports it."""
    reported: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: reported.append(str(info.exc_value)))
    with interrupt.remembered():
        _ClosesAClosedPipe()  # collected at once
        assert reported == ["[Errno 9] Bad file descriptor"]
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            signal.sigtimedwait([], 0)
        _ClosesAClosedPipe()
        assert len(reported) == 1
    handlers = {s: signal.getsignal(s) for s in interrupt.SIGNALS}
    try:
        interrupt.settled()  # the process is about to exit: what is collected now stays quiet too
        _ClosesAClosedPipe()
        assert len(reported) == 1
    finally:
        for s, before in handlers.items():
            signal.signal(s, before)


def test_a_ctrl_c_an_earlier_command_remembered_does_not_stop_a_later_run(tmp_path: Path) -> None:
    """A command run in-process (``dse.cli.main.main``) that was interrupted leaves its Ctrl-C
    remembered; a study run from Python afterwards, outside any command, is not interrupted by it
    (it was: a run after an interrupted command stopped at once, "interrupted after 0 of 1
    trials"). Inside the next command's block the flag starts clear, and a new Ctrl-C counts."""
    with interrupt.remembered():
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1.0)  # the handler raises at the next bytecode
    assert interrupt.pressed()  # the command's own reading after its block: it was interrupted
    interrupt.check()  # outside a command: not this caller's
    res = Study.load(TINY).run(trials=1, out=tmp_path)
    assert res.trials.height == 1
    with interrupt.remembered():
        interrupt.check()  # a new command starts clear


class _OutOfStep:
    """A trial source whose close fails, as the sampler's pipe does when a Ctrl-C landed in the
    middle of a reply (`dse.study.proposer.Proposer._receive`: "a reply that does not load")."""

    done = 3

    def close(self) -> None:
        raise RuntimeError("the sampler process sent a reply that does not load: UnpicklingError()")


def test_a_close_that_fails_after_ctrl_c_still_says_what_is_stored(tmp_path: Path) -> None:
    """Ctrl-C in the trial loop, then the source fails to close because of it: the run says where
    it stopped and that a rerun resumes (it had printed "dse: interrupted" alone, once in a full
    suite's SIGTERM test). A close that fails without a Ctrl-C still raises."""
    import optuna

    from dse.study.faults import StudyInterrupted
    from dse.study.runner import _closing
    from dse.study.storage import StoredStudy

    url = f"sqlite:///{tmp_path / 'study.db'}"
    storage = optuna.storages.RDBStorage(url)
    stored = StoredStudy.of(optuna.create_study(storage=storage, study_name="s"), storage, url)
    with pytest.raises(StudyInterrupted) as stopped:
        with _closing(_OutOfStep(), None, stored, 200):  # type: ignore[arg-type]
            raise KeyboardInterrupt
    assert "interrupted after 0 of 200 trials; all 0 are stored in" in str(stopped.value)
    with pytest.raises(RuntimeError, match="does not load"):
        with _closing(_OutOfStep(), None, stored, 200):  # type: ignore[arg-type]
            pass


def test_an_error_the_trial_loop_raises_once_a_signal_came_is_the_interruption(tmp_path: Path) -> None:
    """A signal that lands where a library turns it into its own failure (the block raises an
    error, not KeyboardInterrupt) still says where the run stopped: a clean-clone suite's SIGTERM
    test once printed "dse: interrupted" alone. The same error with no signal is raised as it is."""
    import optuna

    from dse.study.faults import StudyInterrupted
    from dse.study.runner import _closing
    from dse.study.storage import StoredStudy

    class _Closes:
        done = 3

        def close(self) -> None:
            pass

    url = f"sqlite:///{tmp_path / 'study.db'}"
    storage = optuna.storages.RDBStorage(url)
    stored = StoredStudy.of(optuna.create_study(storage=storage, study_name="s"), storage, url)
    with pytest.raises(RuntimeError, match="half-made"):
        with interrupt.remembered(), _closing(_Closes(), None, stored, 200):  # type: ignore[arg-type]
            raise RuntimeError("a library's half-made state")
    with interrupt.remembered():
        interrupt._pressed.set()  # as the handler leaves it, without raising here
        with pytest.raises(StudyInterrupted) as stopped:
            with _closing(_Closes(), None, stored, 200):  # type: ignore[arg-type]
                raise RuntimeError("a library's half-made state")
    assert "interrupted after 0 of 200 trials; all 0 are stored in" in str(stopped.value)
    interrupt._pressed.clear()  # the next test starts without it


def test_a_signal_in_a_deferred_block_is_raised_once_it_ends() -> None:
    """A worker creates its trial in such a block: SIGTERM while the trial was being created had
    left it running, unknown to the worker that then failed the trials it knew of."""
    with interrupt.remembered():
        reached = False
        with pytest.raises(KeyboardInterrupt), interrupt.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)  # the handler runs here: it remembers, it does not raise
            reached = True
        assert reached and interrupt.pressed() and interrupt.exit_code() == 143
    with interrupt.deferred():  # outside remembered(): the command's handler is not there, a no-op
        pass


def test_ctrl_c_in_a_run_from_python_passes_a_callers_except_exception(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A script that runs several studies and logs a failed one (``except Exception``) had caught
    a Ctrl-C as a failed study and gone on to run the next one in full: the interruption is a
    ``KeyboardInterrupt`` (that says what is stored), as Python's own Ctrl-C is."""
    import sqlite3

    import dse.study.runner as runner
    from dse.study.faults import StudyInterrupted

    real, told = runner.Proposer.finish, []

    def finish_then_ctrl_c(self: Any, number: int, *args: Any) -> None:
        real(self, number, *args)
        told.append(number)
        if len(told) == 3:  # a real SIGINT, as Ctrl-C in the terminal sends it
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(runner.Proposer, "finish", finish_then_ctrl_c)
    runs: list[str] = []
    # Python's own Ctrl-C, as a script in a terminal has it: a shell's background job (`make
    # test` runs its two groups so) inherits SIGINT ignored, where the signal does nothing
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt) as stopped:
            for name in ("a", "b"):
                try:
                    Study.load(TINY).run(trials=20, out=tmp_path / name)
                    runs.append(f"{name} finished")
                except Exception as exc:  # noqa: BLE001 - the caller's catch-all this test is about
                    runs.append(f"{name} failed: {exc}")
    finally:
        signal.signal(signal.SIGINT, before)
    assert runs == [] and isinstance(stopped.value, StudyInterrupted)
    assert "interrupted after 3 of 20 trials; all 3 are stored in" in str(stopped.value)
    with sqlite3.connect(tmp_path / "a" / "tiny-study" / "study.db") as con:
        assert con.execute("select count(*) from trials where state = 'COMPLETE'").fetchone()[0] == 3
    assert not (tmp_path / "b").exists()


def test_a_library_logging_the_ctrl_c_it_was_stopped_by_prints_nothing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLAlchemy's pool, resetting a connection in a finalizer that Ctrl-C interrupted, logs
    "Exception during reset or similar" with the KeyboardInterrupt's traceback (to stderr, where a
    program sets no handler): a run stopped 1 s in had printed it beside its one line. Inside the
    block such a record prints nothing; any other error still does, and outside it all do."""
    import logging

    monkeypatch.setattr(logging.root, "handlers", [])  # as the command line runs: no handler set
    pool = logging.getLogger("sqlalchemy.pool.impl.QueuePool")
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        ctrl_c = sys.exc_info()
    with interrupt.remembered():
        pool.error("Exception during reset or similar", exc_info=ctrl_c)
        pool.error("a real error")
    assert capsys.readouterr().err == "a real error\n"
    pool.error("Exception during reset or similar", exc_info=ctrl_c)
    assert "KeyboardInterrupt" in capsys.readouterr().err
