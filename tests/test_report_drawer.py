"""The report's figures drawn by a process of their own (dse.study.report_drawer): the same files
as drawn in the run's process, and drawn all the same when that process fails."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import polars as pl
import pytest
from conftest import Cli
from test_study_report import OBJECTIVES, _best, _tables

import dse.study.report_drawer as drawer_mod
from dse.study.report import write_report
from dse.study.report_drawer import Drawer, draw_here
from dse.study.spec import load_study

PNGS = ("pareto.png", "hbm_residency.png", "stage_breakdown.png", "sim_trajectory.png")


def _report(folder: Path, draw: drawer_mod.Draw) -> dict[str, bytes]:
    spec = load_study("deepseek-v3-blackwell")
    write_report(folder, spec=spec, objectives=OBJECTIVES, tables=_tables(), best=_best(), draw=draw)
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_drawers_report_is_the_one_drawn_here_byte_for_byte(tmp_path: Path) -> None:
    here = _report(tmp_path / "here", draw_here)
    with Drawer() as drawer:
        there = _report(tmp_path / "there", drawer.draw)
        assert drawer._proc is not None and drawer._proc.poll() is None  # it drew, and waits for more
        again = _report(tmp_path / "again", drawer.draw)
    assert sorted(here) == sorted(there) == sorted(["report.md", *PNGS])
    assert here == there == again


def test_figures_are_drawn_here_when_the_drawers_process_is_gone(tmp_path: Path) -> None:
    here = _report(tmp_path / "here", draw_here)
    drawer = Drawer()
    assert drawer._proc is not None
    os.kill(drawer._proc.pid, signal.SIGKILL)
    drawer._proc.wait()
    assert _report(tmp_path / "there", drawer.draw) == here
    assert drawer._proc is None  # closed: the next report is drawn here at once
    drawer.close()


def test_a_job_that_fails_there_raises_here_as_itself(tmp_path: Path) -> None:
    with Drawer() as drawer:
        empty = ("dse.study.report_figures", "hbm_png", (tmp_path / "h.png", pl.DataFrame()))  # drawn here
        jobs = [("os", "system", ("true",)), empty]
        with pytest.raises(ValueError, match="not a function of dse.study.report_figures"):
            drawer.draw(jobs)


def test_a_long_runs_report_is_drawn_by_a_drawer(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dse study run` starts a drawer for a run of MIN_TRIALS trials and more (here lowered to
    the run's 4), and closes it with the run."""
    started: list[Drawer] = []
    real = Drawer.__init__

    def init(self: Drawer) -> None:
        real(self)
        started.append(self)

    monkeypatch.setattr(drawer_mod, "MIN_TRIALS", 4)
    monkeypatch.setattr(Drawer, "__init__", init)
    tiny = Path(__file__).parent / "data" / "tiny-study.toml"
    ran = cli("study", "run", str(tiny), "--out", str(tmp_path), "--trials", "4")
    assert ran.code == 0, ran.err
    assert len(started) == 1 and started[0]._proc is None  # closed with the run
    report = tmp_path / "tiny-study" / "report"
    assert all((report / png).stat().st_size > 0 for png in PNGS)
    assert Drawer.for_run(drawer_mod.MIN_TRIALS - 1) is None
