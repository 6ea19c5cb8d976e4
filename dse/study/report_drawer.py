"""The report's figures drawn in a process of its own, made ready while a long run's trials go.

A report's four PNGs take about 0.8 s at the end of a run, one after the other. A
:class:`Drawer` started with the run starts a process (importing pyplot and warming matplotlib's
fonts on the core the trials leave: a run evaluates on one core and samples on the other, which
is idle much of the time) that draws all of a report's figures but the last while this process
draws the last: on two cores, about half the time. Figures are what the report would draw
itself, the same functions on the same data: a job names a function of
:mod:`dse.study.report_figures` or :mod:`dse.study.report_grid` and its arguments. Where the
process cannot start or fails, the figures are drawn here as before.

The process is ``python -m dse.study.report_drawer``, fed pickled jobs on its standard input and
answering on its standard output: not a fork (a fork of a process whose polars threads hold locks
can hang in polars, and the figures read polars tables), nor multiprocessing's spawn (which runs
the parent's main script again, and a script without a ``__main__`` guard would run its study
twice). It ignores Ctrl-C (the run handles it); its input closing, with the run or its end, ends it.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from dse.study.report_figures import Figure

MIN_TRIALS = 200  # a run this long hides the process's start-up (about 1 s of CPU) under its trials
MODULES = ("dse.study.report_figures", "dse.study.report_grid")  # where a job's function may live

Job = tuple[str, str, tuple[Any, ...]]  # module, function (a Figure or a list of them), arguments
Draw = Callable[[Sequence[Job]], list[Figure]]


def draw_here(jobs: Sequence[Job]) -> list[Figure]:
    """Draw each job in this process, in order; the figures in one list."""
    return [fig for job in jobs for fig in _call(job)]


class Drawer:
    """A process of its own that draws the report's figures; :meth:`draw` sends them there."""

    def __init__(self) -> None:
        root = str(Path(__file__).resolve().parents[2])  # where dse is, for the child to import it
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        self._proc: subprocess.Popen[bytes] | None = None
        with contextlib.suppress(OSError):  # no process to be had: the figures are drawn here
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "dse.study.report_drawer"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": path},
            )  # fmt: skip

    @classmethod
    def for_run(cls, trials: int) -> Drawer | None:
        """A drawer for a run of ``trials`` trials, where that run is long enough to hide its start."""
        return cls() if trials >= MIN_TRIALS else None

    def draw(self, jobs: Sequence[Job]) -> list[Figure]:
        """The figures of ``jobs``, in order: all but the last drawn in the process while the
        last is drawn here (the two take about as long), or all here where the process fails."""
        proc = self._proc
        there, here = list(jobs[:-1]), list(jobs[-1:])
        if proc is None or proc.stdin is None or proc.stdout is None or not there:
            return draw_here(jobs)
        try:
            pickle.dump(there, proc.stdin)
            proc.stdin.flush()
        except OSError:  # the process died: draw here
            self.close()
            return draw_here(jobs)
        mine = draw_here(here)
        try:
            got, body = pickle.load(proc.stdout)
        except (OSError, EOFError, pickle.UnpicklingError):
            self.close()
            got, body = "gone", None
        if got != "figures":  # it failed there: here, where an error is raised as itself
            return draw_here(there) + mine
        return [*body, *mine]

    def close(self) -> None:
        """End the process (it exits when its input closes)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def __enter__(self) -> Drawer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _call(job: Job) -> list[Figure]:
    module, name, args = job
    if module not in MODULES:
        raise ValueError(f"a figure job names {module}.{name}, not a function of {', '.join(MODULES)}")
    got = getattr(importlib.import_module(module), name)(*args)
    return list(got) if isinstance(got, list) else [got]


def _warm() -> None:
    """What the first figure would pay: pyplot, the Agg canvas, the font cache."""
    from dse.study.report_figures import _pyplot, drawable

    plt = _pyplot()
    _, family = drawable("warm")
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.set_title("warm", fontfamily=family)
    ax.plot([0, 1], [0, 1], label="x")
    ax.legend()
    fig.tight_layout()
    fig.savefig(io.BytesIO(), format="png")
    plt.close(fig)


def _serve(jobs_in: IO[bytes], out: IO[bytes]) -> None:
    """The process: warm matplotlib, then draw each batch of jobs until the input closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run's to handle; it closes the input
    with contextlib.suppress(Exception):  # a warm-up that fails costs the first figure its time
        _warm()
    while True:
        try:
            jobs = pickle.load(jobs_in)
        except (EOFError, OSError, pickle.UnpicklingError):
            return
        try:
            reply: tuple[str, Any] = ("figures", draw_here(jobs))
        except Exception as exc:  # noqa: BLE001 - the parent draws again, and raises it as itself
            reply = ("error", repr(exc))
        try:
            pickle.dump(reply, out)
            out.flush()
        except OSError:
            return


if __name__ == "__main__":
    protocol = os.fdopen(os.dup(1), "wb")  # the replies; anything printed goes to the error stream
    os.dup2(2, 1)
    _serve(sys.stdin.buffer, protocol)
