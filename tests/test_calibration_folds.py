"""`dse calibrate --jobs`: the leave-one-hardware-out folds side by side in forked processes
(dse.calibration.folds). That the answers are the ones one process gives is checked on the whole
calibration by test_calibration_is_reproducible, whose `dse calibrate` runs with a job per CPU
against the shipped file, which one job fitted."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import Cli

from dse import interrupt
from dse.calibration import folds
from dse.calibration.folds import PARENT_POLL_S, map_folds
from dse.errors import InputError


def test_folds_run_in_other_processes_and_answer_in_order() -> None:
    here = os.getpid()
    out = map_folds(lambda x: (x * x, os.getpid()), list(range(7)), jobs=2)  # a lambda: nothing pickled
    assert [v for v, _ in out] == [x * x for x in range(7)]
    workers = {pid for _, pid in out}  # two at most: one may take every fold while the other starts
    assert here not in workers and 1 <= len(workers) <= 2
    alone = map_folds(lambda x: (x + 1, os.getpid()), [1, 2], jobs=1)
    assert alone == [(2, here), (3, here)]
    # Ctrl-C is the parent's to handle: a worker that took it would print its own traceback
    assert (
        map_folds(lambda _: signal.getsignal(signal.SIGINT) is signal.SIG_IGN, [0, 1], jobs=2) == [True] * 2
    )


def test_a_fold_error_reaches_the_caller_as_itself() -> None:
    def bad(x: int) -> int:
        if x == 2:
            raise InputError("runs.csv", "conc", "must be > 0", -1)
        return x

    with pytest.raises(InputError, match="runs.csv: conc = -1: must be > 0"):
        map_folds(bad, [1, 2, 3], jobs=2)


def _gone(pid: int) -> bool:
    """Exited: no process, or one nobody has reaped yet (a zombie)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_workers_exit_when_their_parent_is_killed() -> None:
    script = (
        "import os, sys, time\n"
        "from dse.calibration.folds import map_folds\n"
        "def fold(x):\n"
        "    os.write(1, f'{os.getpid()}\\n'.encode())  # one write: the two workers' lines stay whole\n"
        "    time.sleep(60)\n"
        "map_folds(fold, [1, 2], jobs=2)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        workers = [int(proc.stdout.readline()) for _ in range(2)]
    finally:
        proc.kill()  # SIGKILL: the parent gets no chance to stop its workers
        proc.wait()
    deadline = time.monotonic() + 10 * PARENT_POLL_S + 5.0
    while not all(_gone(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = [w for w in workers if not _gone(w)]
    for w in alive:  # leave nothing behind whatever the verdict
        os.kill(w, signal.SIGKILL)
    assert alive == []


def test_jobs_below_one_is_one_line(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "unused.json"
    res = cli("calibrate", "--jobs", "0", "--out", str(out))
    assert res.code == 2 and len(res.err.strip().splitlines()) == 1
    assert "--jobs" in res.err and "at least 1" in res.err and not out.exists()


IN_A_FOLD = """
import os, signal, sys, tempfile, time
import dse.calibration.folds as folds
real = folds._one
real_worker, first = folds._worker, tempfile.mktemp()
def worker(parent):  # the second worker still starting when the Ctrl-C comes, as on a busy machine
    try:
        os.close(os.open(first, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        time.sleep(1.0)
    real_worker(parent)
folds._worker = worker
def one(k):  # Ctrl-C to the whole process group as the first fold starts in its worker
    if k == 0:
        os.killpg(0, signal.SIGINT)
    time.sleep(5.0)  # a fold longer than stopping takes, on a busy machine too (a fit on two GPUs is quick)
    answer = real(k)
    os.write(1, f"fold {k} done\\n".encode())  # a fold that ran on after the Ctrl-C
    return answer
folds._one = one
from dse.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.e2e  # a fit on two GPUs' runs before the folds start (about 5 s)
def test_ctrl_c_in_the_folds_is_one_line_and_leaves_no_worker(
    tmp_path: Path, clean_env: dict[str, str], two_gpu_runs: Path
) -> None:
    """SIGINT to the process group (a terminal's Ctrl-C reaches the workers too) while the folds
    run: `dse calibrate` stops them rather than waiting for them, says so in one line with exit
    code 130, writes no file, and leaves no worker behind."""
    data = two_gpu_runs
    out = tmp_path / "fitted.json"
    argv = ["calibrate", "--data", str(data), "--out", str(out), "--jobs", "2"]
    proc = subprocess.Popen(
        [sys.executable, "-c", IN_A_FOLD, *argv],
        env=clean_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    printed, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == ["dse: interrupted"] and not out.exists()
    assert "done" not in printed  # the workers were stopped, not waited for
    time.sleep(2 * PARENT_POLL_S)
    left = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert left == []


def test_workers_are_forked_with_ctrl_c_held_not_lost() -> None:
    """In the block the folds fork their workers in, SIGINT is blocked (a child inherits the mask,
    so a Ctrl-C before its initializer runs stays pending there); one sent meanwhile reaches the
    parent after the block; the initializer ignores it and unblocks it. Python's own Ctrl-C
    handler is put in first: `make test` runs pytest as a background job, born ignoring SIGINT."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        held = False
        with pytest.raises(KeyboardInterrupt):
            with folds._ctrl_c_held():
                assert signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
                # to this thread: one sent to the process may go to another thread of pytest's
                signal.pthread_kill(threading.get_ident(), signal.SIGINT)
                time.sleep(0.05)  # held: nothing raised here
                held = True
        assert held and signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    finally:
        signal.signal(signal.SIGINT, previous)
    child = os.fork()  # the initializer in a process of its own, as a worker still starting
    if child == 0:
        code = 1
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            os.kill(os.getpid(), signal.SIGINT)  # pending, as in a worker still starting
            folds._worker(os.getppid())
            time.sleep(0.05)  # a Ctrl-C not dropped would raise here
            ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            unblocked = signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
            code = 0 if ignored and unblocked else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_one_set_of_replays_is_dealt_over_the_jobs_and_put_back_in_order(catalog) -> None:  # type: ignore[no-untyped-def]
    """`dse calibrate --no-cross-validation` replays the runs under one set of step costs: dealt
    over two processes, the replays (TTFT, TPOT, the groups' names) are the ones one process gives."""
    import numpy as np

    from dse.calibration import fit as cal
    from dse.calibration.latency import _replays, replay_measured
    from dse.paths import MEASURED_RUNS
    from dse.perf.params import load_params

    data, _ = cal.read_measured(MEASURED_RUNS, catalog)
    some = data[::15]  # 15 runs of every engine: parts of unequal length and name widths
    assert len({m.row.engine for m in some}) >= 2 and len(some) % 2 == 1
    params = load_params()
    alone = replay_measured(some, catalog, params)
    (dealt,) = _replays(some, catalog, [params], 2, (0,))
    assert alone.keys() == dealt.keys()
    for f, r in alone.items():
        assert np.array_equal(r.ttft, dealt[f].ttft) and np.array_equal(r.tpot, dealt[f].tpot)
        assert r.group.tolist() == dealt[f].group.tolist()


@pytest.mark.e2e  # a fit with its folds and their latency replays (about 10 s under `make test`)
def test_each_fold_keeps_its_latency_fit_and_predicts_its_gpu_with_it(catalog, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The leave-one-hardware-out latency fit records each fold's offsets and factors (what
    `benchmarks/latency_accuracy.py` prints), each on its grid, and the held-out GPU's errors are
    the ones that fold's fit gives its runs (one pass: the replays' clients resend at once). With
    a second pass each set is replayed again with its clients looping at the offsets the first
    fitted, and fitted anew."""
    from dataclasses import replace

    import numpy as np

    import dse.calibration.latency as lat
    from dse.calibration import fit as cal
    from dse.calibration.latency import (
        AGG_PREFILL_GRID,
        SLOWDOWN_GRID,
        _rows,
        abs_errors,
        factors_of,
        fit_latency,
        measured_latency,
        medians,
        predicted,
        replay_measured,
    )
    from dse.paths import MEASURED_RUNS
    from dse.perf.params import load_params

    data, _ = cal.read_measured(MEASURED_RUNS, catalog)
    some = [m for m in data if m.row.hardware in ("h200-sxm", "mi355x")][::6]
    assert {m.row.disagg for m in some} == {False, True}
    params = load_params()
    monkeypatch.setattr(lat, "LOOP_PASSES", 1)
    fit = fit_latency(some, catalog, params, {"h200-sxm": params, "mi355x": params})
    assert fit.loho_params is not None and fit.loho_by_hardware is not None
    assert set(fit.loho_params) == {"h200-sxm", "mi355x"}
    at_once = replace(params, latency=replace(params.latency, frontend_s=0.0, handoff_s=0.0))
    reps = replay_measured(some, catalog, at_once)
    meas = measured_latency(some)
    disagg = np.array([m.row.disagg for m in some])
    for held, lp in fit.loho_params.items():
        assert lp.dp_prefill_slowdown in SLOWDOWN_GRID and lp.agg_prefill_factor in AGG_PREFILL_GRID
        mine = np.array([m.row.hardware == held for m in some])
        pred = predicted(_rows(reps, mine)[factors_of(lp)], disagg[mine], lp)
        assert medians(abs_errors(pred, meas[mine])) == fit.loho_by_hardware[held]
        assert fit.loho_predicted is not None  # each run's row is the one its fold gave it
        np.testing.assert_array_equal(fit.loho_predicted[mine], pred)
    # the second pass: replayed where the first fit put the offsets
    pass1 = fit_latency(some, catalog, params)  # one pass, as set above
    offsets = (pass1.params.frontend_s, pass1.params.handoff_s)
    loops: list[tuple[float, float]] = []
    real = lat.replay_measured

    def spy(data, catalog, params, seeds=(lat.SEED,)):  # type: ignore[no-untyped-def]
        loops.append((params.latency.frontend_s, params.latency.handoff_s))
        return real(data, catalog, params, seeds)

    monkeypatch.setattr(lat, "replay_measured", spy)
    monkeypatch.setattr(lat, "LOOP_PASSES", 2)
    lat.fit_latency(some, catalog, params)
    assert offsets != (0.0, 0.0) and loops == [(0.0, 0.0), offsets]


def test_a_ctrl_c_python_swallowed_still_stops_the_folds() -> None:
    """A Ctrl-C that was only remembered (raised in a finalizer, where Python ignores it, or
    handed by the kernel to another thread while the main thread waits on a lock) stops the folds
    within a poll: the parent had waited for every fold to end (seen once in CI)."""

    def slow(x: int) -> int:
        time.sleep(30.0)
        return x

    with interrupt.remembered():
        threading.Timer(0.3, interrupt._remember, (signal.SIGINT, None)).start()
        began = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            map_folds(slow, [1, 2], jobs=2)
        took = time.monotonic() - began
    assert took < 0.3 + 3 * PARENT_POLL_S + 5.0  # a poll after the Ctrl-C, not the folds' 30 s
    assert multiprocessing.active_children() == []  # the workers were stopped, not left


def test_a_fold_error_comes_while_the_other_folds_still_run() -> None:
    def one(x: int) -> int:
        if x == 1:
            raise InputError("runs.csv", "conc", "must be > 0", -1)
        time.sleep(30.0)
        return x

    began = time.monotonic()
    with pytest.raises(InputError, match="must be > 0"):
        map_folds(one, [0, 1], jobs=2)
    assert time.monotonic() - began < 10.0  # not after fold 0's 30 s
