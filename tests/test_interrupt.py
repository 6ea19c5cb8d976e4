"""Ctrl-C leaves one line: a helper thread that fails once it came prints no traceback."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import pytest

from dse import interrupt


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
