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
