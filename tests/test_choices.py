"""benchmarks/choices.py, how good dse's choice among measured configurations is: the scoring of
its picks and of the two pickers without its latency model, on questions small enough to score by
hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def choices(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the script imports its sibling `record`
    import choices as module

    return module


def test_picks_are_scored_by_the_measurements(choices) -> None:  # type: ignore[no-untyped-def]
    # q1: c is the fastest and predicted to meet TTFT 1 s, but measured 1.5 s; q2: dse's latency
    # model rules out the faster b (predicted 1.2 s), which measured 0.9 s; q3: one feasible, skipped
    question = [("q1",)] * 3 + [("q2",)] * 2 + [("q3",)] * 2
    measured = np.array([100.0, 200.0, 300.0, 50.0, 80.0, 10.0, 20.0])
    meas_ttft = np.array([0.5, 0.8, 1.5, 0.3, 0.9, 0.5, 3.0])
    predicted = np.array([110.0, 190.0, 320.0, 60.0, 70.0, 10.0, 20.0])
    pred_ttft = np.array([0.4, 0.9, 0.95, 0.3, 1.2, 0.5, 0.5])
    tpot = np.full(7, 0.01)
    got = choices.score(question, measured, meas_ttft, tpot, predicted, pred_ttft, tpot, 1.0, 0.03)
    assert got["dse"] == choices.Scores(2, 1.0, 0.0, 0.3125, 0)  # c infeasible (0), a in q2 at 50/80
    assert got["latency-blind"] == choices.Scores(2, 1.0, 1.0, 0.5)  # c (0), then b, the best
    random = got["random"]  # q1: 2 of 3 feasible, 1 of 3 the best, shares 0.5, 1, 0; q2: both, 1 of 2
    assert random.questions == 2
    assert random.feasible == pytest.approx(2 / 3 + 1) and random.best == pytest.approx(1 / 3 + 1 / 2)
    assert random.share_median == pytest.approx((0.5 + (50 / 80 + 1) / 2) / 2)


def test_a_question_dse_finds_nothing_feasible_in_is_unanswered_and_scores_nothing(choices) -> None:  # type: ignore[no-untyped-def]
    question = [("q",)] * 2
    ones, two = np.ones(2), np.array([1.0, 2.0])
    got = choices.score(question, two, 0.1 * ones, 0.01 * ones, two, 5.0 * ones, 0.01 * ones, 1.0, 0.03)
    assert got["dse"] == choices.Scores(1, 0.0, 0.0, 0.0, 1)
    assert got["latency-blind"].best == 1.0
