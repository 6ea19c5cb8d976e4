"""The leave-one-hardware-out folds of a calibration, side by side in processes.

Each fold (a fit without one GPU type, the replays under it) depends on nothing another fold
computes, so ``dse calibrate --jobs N`` runs up to N at once, each in a forked process: the
function and its inputs (a catalog among them, which does not pickle) are the parent's, inherited
at the fork, and only each fold's number goes over and its answer back. The answers are the ones
one process gives, in the same order. One job, or a platform that cannot fork, runs them in turn
in this process. Ctrl-C is the parent's: it stops the workers and says so in one line; a worker
whose parent dies (killed, not asked to stop) exits within a second rather than run on as an
orphan.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from typing import Any, TypeVar

from dse import interrupt

T = TypeVar("T")
R = TypeVar("R")


def default_jobs() -> int:
    """The CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


PARENT_POLL_S = 0.5  # how often a worker checks that its parent still runs
_TASK: tuple[Callable[[Any], Any], Sequence[Any]] | None = None  # what forked workers run


def map_folds(fn: Callable[[T], R], items: Sequence[T], jobs: int = 1) -> list[R]:
    """``[fn(x) for x in items]``, with up to ``jobs`` of them at once in forked processes."""
    global _TASK
    jobs = min(jobs, len(items))
    if jobs <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [fn(x) for x in items]
    _TASK = (fn, items)
    before = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(
        jobs, multiprocessing.get_context("fork"), initializer=_worker, initargs=(os.getpid(),)
    )
    try:
        with _ctrl_c_held():  # the first submit forks every worker
            futures = [pool.submit(_one, k) for k in range(len(items))]
        return _awaited(futures)
    except BaseException:  # Ctrl-C, a fold's error: stop the others now rather than wait for them
        for worker in set(multiprocessing.active_children()) - before:
            worker.terminate()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        _TASK = None


def _awaited(futures: list[Future[R]]) -> list[R]:
    """The futures' answers in order, the first error as soon as it comes. The wait wakes every
    :data:`PARENT_POLL_S` to look for a Ctrl-C that did not stop it: one Python swallowed (raised
    in a finalizer while the workers were forked) is only remembered, and one the kernel handed to
    another thread of this process does not interrupt the main thread's lock wait; either had let
    every fold run to its end before the parent stopped (seen once in a clean-clone CI run)."""
    pending: set[Future[R]] = set(futures)
    while pending:
        done, pending = wait(pending, timeout=PARENT_POLL_S, return_when=FIRST_EXCEPTION)
        interrupt.check()
        for f in (f for f in futures if f in done and f.exception() is not None):
            f.result()  # raises the fold's error, the other folds stopped by the caller
    return [f.result() for f in futures]


@contextlib.contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """Ctrl-C held back (blocked, not lost) while the workers are forked: each is born with it
    blocked, so one that reaches a worker before its initializer ignores it stays pending and is
    dropped there, instead of a traceback from the worker's start; the parent gets it after the
    block. Outside the main thread (no signal handling there) nothing is changed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, set(interrupt.SIGNALS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(interrupt.SIGNALS))


def _worker(parent: int) -> None:
    """A worker leaves Ctrl-C to its parent, which stops it (no traceback of its own on the
    terminal), and exits once its parent is gone (the worker handed to another). It was forked
    with Ctrl-C blocked (:func:`_ctrl_c_held`): ignored now, one that came meanwhile is dropped."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # how the parent stops it: at once, without a word
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(interrupt.SIGNALS))

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _one(k: int) -> Any:
    """The ``k``-th item's answer, in a worker forked while :data:`_TASK` was set."""
    assert _TASK is not None, "a fold worker forked outside map_folds"
    fn, items = _TASK
    return fn(items[k])
