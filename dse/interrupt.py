"""Ctrl-C (and SIGTERM, handled alike) that cannot be lost.

Python raises ``KeyboardInterrupt`` wherever the main thread is when SIGINT arrives. Inside a
finalizer or a weakref callback, which garbage collection runs at any moment, the exception is
printed as "ignored" and the program goes on: a study run could finish its whole budget after a
Ctrl-C and exit 0. So the command line installs a handler that also remembers the signal, and the
trial loop, and the command line once its command returns, check it; Python's own report of
the ignored exception (a traceback on stderr) is left out, as is the traceback of a helper
thread that fails once Ctrl-C came.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_pressed = threading.Event()  # process-wide, as the signal itself is
_received = [signal.SIGINT]  # the last one that came
_inside = [0]  # remembered() blocks the main thread is in

SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""What stops a command as Ctrl-C does: SIGTERM is what systemd, Docker, Kubernetes and Slurm send."""


def _handler(signum: int, frame: Any) -> None:
    _received[0] = signal.Signals(signum)
    _pressed.set()
    raise KeyboardInterrupt


def exit_code() -> int:
    """The shell's code for death by the signal that came: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + int(_received[0])


def leave_to_parent() -> None:
    """In a helper process: the signals are the parent's to handle (it closes the helper's pipe)."""
    for s in SIGNALS:
        signal.signal(s, signal.SIG_IGN)


@contextmanager
def remembered() -> Iterator[None]:
    """SIGINT remembered for the block (main thread only; elsewhere a no-op), the handler that was
    there before put back after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _pressed.clear()
    _received[0] = signal.SIGINT
    previous, hook = [signal.signal(s, _handler) for s in SIGNALS], sys.unraisablehook

    def unraisable(info: Any) -> None:
        """A Ctrl-C Python could not raise is remembered, not printed; so is what a finaliser
        fails on once it came (pyomo's output tee closing a pipe the unwinding closed first)."""
        if not isinstance(info.exc_value, KeyboardInterrupt) and not _pressed.is_set():
            hook(info)

    def in_thread(args: Any) -> None:
        """A helper thread that fails once Ctrl-C came (pyomo's reader of a solver's output, whose
        pipe the main thread closed as it unwound) fails because of it: the one line the command
        prints says what happened, not the thread's traceback."""
        if not _pressed.is_set():
            thread_hook(args)

    sys.unraisablehook, thread_hook, threading.excepthook = unraisable, threading.excepthook, in_thread
    last = logging.lastResort  # where a library's log lines go when the program set no handler
    if last is not None:
        last.addFilter(_no_ctrl_c)
    _inside[0] += 1
    try:
        yield
    finally:
        _inside[0] -= 1
        for s, before in zip(SIGNALS, previous, strict=True):
            signal.signal(s, before)
        sys.unraisablehook, threading.excepthook = hook, thread_hook
        if last is not None:
            last.removeFilter(_no_ctrl_c)


def _no_ctrl_c(record: logging.LogRecord) -> bool:
    """A log line is printed unless it reports a Ctrl-C: SQLAlchemy's pool, resetting a connection
    in a finalizer the signal interrupted, logs "Exception during reset or similar" with the
    KeyboardInterrupt's traceback before Python drops it (a run stopped 1 s in, once in a clean
    clone's suite)."""
    exc = record.exc_info[1] if record.exc_info else None
    return not isinstance(exc, KeyboardInterrupt)


@contextmanager
def deferred() -> Iterator[None]:
    """Ctrl-C and SIGTERM held for the block, inside :func:`remembered` (main thread only;
    elsewhere a no-op): one that comes is remembered and raised once the block ends, so what the
    block writes and notes (a trial it creates and the worker that holds it) is whole."""
    if threading.current_thread() is not threading.main_thread() or not _inside[0]:
        yield
        return
    previous = [signal.signal(s, _remember) for s in SIGNALS]
    try:
        yield
    finally:
        for s, before in zip(SIGNALS, previous, strict=True):
            signal.signal(s, before)
    check()


def _remember(signum: int, frame: Any) -> None:
    _received[0] = signal.Signals(signum)
    _pressed.set()


def pressed() -> bool:
    """Whether Ctrl-C came since :func:`remembered` began, even one Python swallowed."""
    return _pressed.is_set()


def check() -> None:
    """Raise ``KeyboardInterrupt`` if Ctrl-C came inside the :func:`remembered` block the caller
    runs in, even one Python swallowed; outside one (a study run from Python), a Ctrl-C an earlier
    command in the same process remembered is that command's, not this one's."""
    if _inside[0] and _pressed.is_set():
        raise KeyboardInterrupt


def settled() -> None:
    """The process is about to exit with its code: a Ctrl-C from here on (a second press, or one
    a solver deferred) must not turn a clean exit into Python's own death by SIGINT; and once one
    came, what the interruption left half-closed (pyomo's output tee, collected as the interpreter
    exits) fails silently, after the command's one line."""
    if threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        if _pressed.is_set():
            sys.unraisablehook = _unreported


def _unreported(info: Any) -> None:
    """An exception a finaliser raised while an interrupted process exits: the interruption's."""
