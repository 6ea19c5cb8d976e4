"""Processes that draw a report's figures beside the command that writes it.

Drawing the headline study's four figures took 0.7 s at the end of a run, 0.25 s of it importing
matplotlib, with one core idle. `dse study run`, `dse study report` and `dse simulate --out`
therefore start :class:`FigureWorkers` first thing, before they import numpy or polars (two for a
report's four figures, one for the simulation's trajectories): each worker is forked
while the command has one thread (a process forked while numpy's, polars' or a test runner's
threads hold a lock can hang on it), lowers its priority to the lowest (nice 19: it takes only a
core nothing else wants), and imports matplotlib, polars and the figure code while the command
loads its engine and its trials keep the other core busy. The report then hands each figure to
the worker with the fewest in hand and writes its Markdown meanwhile; two workers draw the four
figures side by side. Each figure is written by its worker, atomically, into the report's
temporary folder, and :meth:`FigureWorkers.finish` returns once every one is written.

The figures' data go to a worker pickled, over an anonymous socket pair between the command and
the child it forked, as the sampler's messages do (:mod:`dse.study.proposer`): nothing read from
a file or the network is unpickled.

A worker that cannot be started safely (a command run in a process that already has threads or
numpy, as the test suite's in-process runs are), that dies, or that does not answer in
``ANSWER_S`` gives its figures back to the command, which draws them itself as the Python API
does: the report is the same either way, to the byte.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from types import TracebackType
from typing import Any

WORKERS = 2  # the headline study's four figures, two each
NICE = 19  # the lowest priority: a worker waits for a core nothing else wants
ANSWER_S = 120.0  # a figure not drawn in this long is drawn by the command instead (a hung worker)
UNSAFE = ("numpy", "polars", "matplotlib")  # imported: their threads (or a caller's) may hold locks

Job = tuple[Path, Callable[..., Any], tuple[Any, ...]]


class FigureWorkers:
    """Up to ``n`` forked figure workers (none where a fork is not safe: see the module); a
    :class:`~dse.study.report_figures.Drawer`. Use as a context manager: leaving it stops them."""

    def __init__(self, n: int = WORKERS, ready: Callable[[], None] | None = None) -> None:
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        self._pending: list[list[Job]] = []
        if n < 1 or not fork_is_safe():
            return
        ctx = multiprocessing.get_context("fork")
        for stream in (sys.stdout, sys.stderr):  # what a worker inherits buffered is never written twice
            if stream is not None:
                stream.flush()
        for _ in range(n):
            # a socket pair: its buffer holds a figure's data while the worker draws the one before
            ours, theirs = ctx.Pipe()
            proc = ctx.Process(
                target=_serve, args=(theirs, [*self._conns, ours], ready or ready_report), daemon=True
            )
            proc.start()
            theirs.close()
            self._conns.append(ours)
            self._procs.append(proc)
            self._pending.append([])

    @property
    def forked(self) -> int:
        """How many workers are running (0: every figure is drawn in this process)."""
        return sum(proc is not None for proc in self._procs)

    def draw(self, path: Path, build: Callable[..., Any], args: tuple[Any, ...]) -> None:
        """Hand the figure to the worker with the fewest in hand (or draw it here)."""
        from dse.study.report_figures import draw_and_save

        job = (path, build, args)
        live = [k for k, proc in enumerate(self._procs) if proc is not None]
        if not live:
            draw_and_save(*job)
            return
        w = min(live, key=lambda k: len(self._pending[k]))
        try:
            self._conns[w].send(job)
        except (OSError, ValueError):  # a worker that died: this figure, and what it held, here
            for j in [*self._drop(w), job]:
                draw_and_save(*j)
            return
        self._pending[w].append(job)

    def finish(self) -> None:
        """Return once every figure handed out is written; a figure whose drawing failed raises
        its error here (the first one), as drawing it in this process would have."""
        from dse.study.report_figures import draw_and_save

        failed: BaseException | None = None
        for w in range(len(self._conns)):
            while self._pending[w]:
                answer = self._answer(w)
                if answer is _GONE:  # dead or hung: the rest of its figures are drawn here
                    for j in self._drop(w):
                        draw_and_save(*j)
                    break
                self._pending[w].pop(0)
                if isinstance(answer, BaseException) and failed is None:
                    failed = answer
        self._compact()
        if failed is not None:
            raise failed

    def close(self) -> None:
        """Stop the workers at once: past :meth:`finish` they hold nothing to finish (a command
        that ends early, on bad input, must not wait for their imports)."""
        for conn in self._conns:
            conn.close()
        for proc in self._procs:
            if proc is not None:
                proc.kill()
                proc.join()
        self._conns, self._procs, self._pending = [], [], []

    def __enter__(self) -> FigureWorkers:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _answer(self, w: int) -> Any:
        conn = self._conns[w]
        try:
            if not conn.poll(ANSWER_S):
                return _GONE
            return conn.recv()
        except (EOFError, OSError):
            return _GONE

    def _drop(self, w: int) -> list[Job]:
        """Worker ``w`` is dead or hung: stopped, and given no more figures; the figures it held
        and had not answered for, to draw here."""
        self._conns[w].close()
        proc = self._procs[w]
        if proc is not None:
            proc.kill()
            proc.join()
        self._procs[w] = None
        held, self._pending[w] = self._pending[w], []
        return held

    def _compact(self) -> None:
        keep = [k for k, p in enumerate(self._procs) if p is not None]
        self._conns = [self._conns[k] for k in keep]
        self._procs = [self._procs[k] for k in keep]
        self._pending = [self._pending[k] for k in keep]


_GONE = object()  # a worker that died or did not answer


def fork_is_safe() -> bool:
    """Whether this process can fork a figure worker: one thread, and none of the libraries whose
    thread pools a child could find locked imported yet."""
    return (
        hasattr(os, "fork")
        and threading.active_count() == 1
        and not any(name in sys.modules for name in UNSAFE)
    )


def _serve(conn: Connection, theirs: list[Connection], ready: Callable[[], None]) -> None:
    """A worker: ``ready`` (the imports its figures need), then draw what comes until the pipe closes."""
    for other in theirs:  # the command's ends: a command that dies closes the pipe for good
        other.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the command's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.nice(NICE)
    from dse.study.report_figures import draw_and_save

    ready()
    while True:
        try:
            path, build, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            draw_and_save(path, build, args)
            answer: Any = None
        except Exception as exc:  # the command raises it, as it would have drawing the figure
            answer = exc
        try:
            conn.send(answer)
        except (OSError, ValueError):  # the command is gone
            return
        except Exception:  # an error that does not pickle: its text
            conn.send(RuntimeError(f"{type(answer).__name__}: {answer}"))


def ready_report() -> None:
    """A report's worker: the figures' code (found by name in a job) and matplotlib, warmed."""
    from dse.study import report_grid  # noqa: F401

    warm()


def warm() -> None:
    """Import pyplot, then draw and render a throwaway figure: what a first figure pays once
    (fonts, text layout, the PNG writer) is paid while the command still has work of its own."""
    import io

    from dse.study.report_figures import _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [0, 1], label="a")
    ax.scatter([0.5], [0.5], marker="o")
    ax.bar([0], [1])
    ax.set_title("warm")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(io.BytesIO(), format="png")
    plt.close(fig)
