"""Custom objectives from Python: a function checked before a run writes anything, its errors
as one line naming it and the trial, a first run it stops leaving nothing behind, and trials
without a value kept off the Pareto front and out of the best trial."""

from __future__ import annotations

import math
import os
import sqlite3
import warnings
from pathlib import Path

import numpy as np
import optuna
import polars as pl
import pytest
from conftest import Cli

from dse.errors import InputError
from dse.study import Study
from dse.study.objectives import ObjectiveError, ObjectiveWarning
from dse.study.results import best_of, non_dominated, pareto_frame

TINY = Path(__file__).resolve().parent / "data" / "tiny-study.toml"
STUDIES = Path(__file__).resolve().parents[1] / "studies"


def _trials(values: list[float | None], feasible: list[bool] | None = None) -> pl.DataFrame:
    n = len(values)
    return pl.DataFrame(
        {
            "trial": list(range(n)),
            "feasible": feasible if feasible is not None else [True] * n,
            "gpus": [8 * (i + 1) for i in range(n)],
            "objective_o": values,
        },
        schema_overrides={"objective_o": pl.Float64},
    )


def test_a_design_ahead_only_by_rounding_is_beaten() -> None:
    """A design 16% cheaper than another, behind it by 5e-10 in tokens/s per user (negated here,
    as a maximised objective is), beats it: it had left it on the front, two designs where one
    is; designs a real margin apart on each objective both stay."""
    cheap, dear = [0.1462, -23.9253573767], [0.1748, -23.9253573878]
    assert non_dominated(np.array([cheap, dear])).tolist() == [True, False]
    assert non_dominated(np.array([cheap, [0.1748, -23.93]])).tolist() == [True, True]


def test_a_trial_without_a_value_is_on_no_front_and_never_best() -> None:
    """Null (None, nan) compared false both ways: such a trial was never beaten, so it sat on
    the front, and with every value missing best_trial() gave the first trial."""
    assert non_dominated(np.array([[1.0], [math.nan], [2.0]])).tolist() == [True, False, False]
    assert non_dominated(np.array([[1.0, math.nan], [2.0, 1.0], [3.0, 0.5]])).tolist() == [False, True, True]
    assert non_dominated(np.array([[math.nan], [math.nan]])).tolist() == [False, False]
    some = _trials([None, 5.0, None, 7.0])
    front = pareto_frame(some, ["o"], ["maximize"])
    assert front["trial"].to_list() == [3] and front["objective_o"].null_count() == 0
    assert best_of(some, ("o", "maximize")) == 3 and best_of(some, ("o", "minimize")) == 1
    none = _trials([None, None, None])
    assert pareto_frame(none, ["o"], ["maximize"]).is_empty()
    assert best_of(none, ("o", "maximize")) is None
    infeasible_only = _trials([1.0, None], feasible=[False, True])
    assert best_of(infeasible_only, ("o", "minimize")) is None


def test_of_designs_equal_on_the_first_objective_the_best_is_the_one_the_later_objectives_prefer() -> None:
    """A study of [gpus, tokens_per_s_per_user]: trials 0 and 1 both take 24 GPUs, trial 1 is
    faster per user. The best trial (what the summary, the report's detail and `dse deploy`
    take) was the first in trial order, trial 0, which trial 1 dominates; the summary's and the
    report's tables ranked the tied designs in trial order too."""
    from dse.study.results import ranked

    trials = pl.DataFrame(
        {
            "trial": [0, 1, 2, 3],
            "feasible": [True, True, True, True],
            "objective_gpus": [24.0, 24.0, 32.0, 24.0],
            "objective_tokens_per_s_per_user": [32.6, 36.1, 40.1, None],
        }
    )
    both = (("gpus", "minimize"), ("tokens_per_s_per_user", "maximize"))
    assert best_of(trials, *both) == 1
    assert ranked(trials, *both)["trial"].to_list() == [1, 0, 3, 2]
    assert best_of(trials, both[0]) == 0  # one objective: equals in trial order, as before
    front = pareto_frame(trials, [n for n, _ in both], [d for _, d in both])
    assert front["trial"].to_list() == [1, 2]


def test_a_run_keeps_trials_whose_objective_gives_no_value_off_the_front(tmp_path: Path) -> None:
    def small_none(m):  # type: ignore[no-untyped-def]
        return None if m["gpus"] <= 16 else m["tokens_per_s_per_gpu"]

    res = Study.load(TINY).with_objective("o", small_none, "maximize").run(trials=6, out=tmp_path / "a")
    valued = res.trials.filter(pl.col("feasible") & pl.col("objective_o").is_not_null())
    assert res.trials.filter(pl.col("feasible"))["objective_o"].null_count() > 0  # the case is met
    assert res.pareto.height >= 1 and res.pareto["objective_o"].null_count() == 0
    best = res.trials.filter(pl.col("trial") == res.best_trial())
    assert best["objective_o"][0] == valued["objective_o"].max()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = (
            Study.load(TINY)
            .with_objective("o", lambda m: math.nan, "maximize")
            .run(trials=4, out=tmp_path / "b")
        )
    said = [w for w in caught if issubclass(w.category, ObjectiveWarning)]
    assert len(said) == 1, [str(w.message) for w in said]  # once per run, though every trial gave nan
    assert "objective o: returned nan for trial 0" in str(said[0].message)
    assert Path(said[0].filename) == Path(__file__)  # the user's line, not one of dse's
    assert res.trials["feasible"].any() and res.trials["objective_o"].null_count() == res.trials.height
    assert res.pareto.is_empty() and res.best_trial() is None


def test_a_run_whose_objective_never_has_a_value_says_so_not_that_no_design_is_feasible(
    tmp_path: Path, cli: Cli
) -> None:
    """An objective function that gives None for every trial: the report had said "No Pareto
    front: there are no feasible designs." and "No best design to detail." beside its count of
    feasible trials, and `dse study deploy` that the study had no feasible trial (exit 3). They
    say which objective no feasible trial has a value for; deploy still exits 3, naming --trial."""
    res = Study.load(TINY).with_objective("o", lambda m: None).run(trials=4, out=tmp_path)
    feasible = res.trials.filter(pl.col("feasible"))["trial"].to_list()
    assert len(feasible) > 1 and res.best_trial() is None  # the case is met
    said = f"none of the {len(feasible)} feasible trials has a value for o"
    assert cli("study", "report", TINY, "--out", tmp_path).code == 0
    text = (tmp_path / "tiny-study" / "report" / "report.md").read_text()
    assert f"No Pareto front: {said}." in text and f"No best design to detail: {said}." in text
    assert f"But {said}: they are ordered by the rest alone." in text  # the best designs' table
    assert "no feasible design" not in text.lower()
    deploy = cli("study", "deploy", TINY, "--out", tmp_path, "--engine", "sglang")
    assert deploy.code == 3 and deploy.err == (
        f"dse: error: no best design: study tiny-study: {said}, by which the best is picked; name one "
        f"with --trial (as --trial {feasible[0]})\n"
    ), deploy.err
    assert not (tmp_path / "tiny-study" / "deploy").exists()


def test_an_objective_that_cannot_take_the_metrics_is_refused_before_a_run(tmp_path: Path) -> None:
    """A non-function and a function of two arguments failed only at the first trial, with
    Python's bare TypeError, after the storage was written."""
    base = Study.load(TINY)
    with pytest.raises(InputError, match=r"^objective: o: must be a function of one argument.*3 \(int\)"):
        base.with_objective("o", 3)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^objective: o: .*<lambda>\(m, n\) cannot be called with one"):
        base.with_objective("o", lambda m, n: 1.0)
    with pytest.raises(InputError, match=r"cannot be called with one"):
        base.with_objective("o", lambda: 1.0)
    with pytest.raises(InputError, match=r"cannot be called with one"):
        base.with_objective("o", lambda *, m: 1.0)
    with pytest.raises(InputError, match=r"^objective: o\.direction = 'max': must be minimize or maximize"):
        base.with_objective("o", lambda m: 1.0, direction="max")  # type: ignore[arg-type]
    for fine in (
        lambda m, scale=2.0: 1.0,
        lambda *a: 1.0,
        abs,
        type("F", (), {"__call__": lambda s, m: 1.0})(),
    ):
        base.with_objective("o", fine)
    assert not list(tmp_path.iterdir())


def test_an_objective_that_raises_on_the_first_trial_leaves_nothing_behind(tmp_path: Path) -> None:
    """It raised the bare ZeroDivisionError and left study.db (with -wal, -shm), spec.json and
    run-lock, so the same folder then refused a mended objective under another name."""
    out = tmp_path / "runs"
    with pytest.raises(ObjectiveError) as caught:
        Study.load(TINY).with_objective("per_gpu", lambda m: 1 / 0).run(trials=3, out=out)
    line = str(caught.value)
    assert line.startswith("objective: per_gpu: raised ZeroDivisionError: division by zero for trial 0")
    assert line.endswith("; nothing was stored") and "\n" not in line
    assert isinstance(caught.value.__cause__, ZeroDivisionError) and caught.value.trial == 0
    assert not out.exists()
    with pytest.raises(
        ObjectiveError, match=r"= 'usd_per_hr': reads a metric .*\(trial 0\).*nothing was stored"
    ):
        Study.load(TINY).with_objective("o", lambda m: m["usd_per_hr"]).run(trials=3, out=out)
    assert not out.exists()
    mended = Study.load(TINY).with_objective("usd_per_gpu", lambda m: m["usd_per_hour"] / m["gpus"])
    assert mended.run(trials=3, out=out).trials.height == 3


def test_an_objective_that_raises_later_keeps_the_trials_stored(tmp_path: Path) -> None:
    calls = []

    def fails_third(m):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 3:
            raise ValueError("bad\nluck")
        return m["gpus"]

    out = tmp_path / "runs"
    with pytest.raises(ObjectiveError) as caught:
        Study.load(TINY).with_objective("o", fails_third).run(trials=8, out=out)
    n = caught.value.trial
    assert n is not None and n >= 2
    assert str(caught.value) == (
        f"objective: o: raised ValueError: bad luck for trial {n} (its traceback is this error's __cause__)"
    )
    stored = optuna.load_study(
        study_name="tiny-study", storage=f"sqlite:///{out / 'tiny-study' / 'study.db'}"
    )
    assert len(stored.get_trials(states=(optuna.trial.TrialState.COMPLETE,))) == n


def test_a_first_run_stopped_by_its_objective_on_a_shared_file_deletes_only_its_study(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    url = f"sqlite:///{db}"
    optuna.create_study(study_name="someone-else", storage=url).enqueue_trial({"x": 1.0})
    with pytest.raises(ObjectiveError, match="nothing was stored"):
        Study.load(TINY).with_objective("o", lambda m: 1 / 0).run(
            trials=2, out=tmp_path / "runs", storage=url
        )
    assert optuna.study.get_all_study_names(storage=url) == ["someone-else"]
    with sqlite3.connect(db) as con:
        assert con.execute("select count(*) from trials").fetchone() == (1,)
    assert not (tmp_path / "runs").exists()
    res = (
        Study.load(TINY)
        .with_objective("o2", lambda m: m["gpus"])
        .run(trials=2, out=tmp_path / "runs", storage=url)
    )
    assert res.trials.height == 2


def test_trials_equal_on_the_objective_rank_the_cheaper_first_then_the_faster_per_gpu() -> None:
    """A fleet sized to its traffic ties on GPUs at every design of the same size (42 trials of
    `deepseek-production` at 1,760 GPUs; 70 of `stage-memory-2027` at one 72-GPU rack), and the
    first trial stood, however dear: the best design is now the cheaper per token, as the
    placement MILP breaks its own ties on GPUs, then the one with more tokens per GPU (a price
    missing, as for hardware without one, ranks last), then the earlier trial."""
    t = pl.DataFrame(
        {
            "trial": [0, 1, 2, 3, 4],
            "feasible": [True] * 5,
            "objective_gpus": [72.0, 72.0, 72.0, 72.0, 80.0],
            "usd_per_million_tokens": [0.04, None, 0.011, 0.011, 0.001],
            "tokens_per_s_per_gpu": [18000.0, 90000.0, 18000.0, 66000.0, 99000.0],
        }
    )
    assert best_of(t, ("gpus", "minimize")) == 3  # 0.011 $/M at 66,000 tokens/s/GPU
    front = pareto_frame(t, ["gpus"], ["minimize"])
    assert front["trial"].to_list()[:1] == [3]
    no_price = t.drop("usd_per_million_tokens")
    assert best_of(no_price, ("gpus", "minimize")) == 1  # the most tokens per GPU of the 72
    # its own column is the objective, not a tie-break: equal costs go by tokens per GPU
    cost = t.with_columns(objective_usd_per_million_tokens=pl.col("usd_per_million_tokens"))
    assert best_of(cost, ("usd_per_million_tokens", "minimize")) == 4
    assert best_of(cost.filter(pl.col("trial") < 4), ("usd_per_million_tokens", "minimize")) == 3


def test_an_objective_functions_digest_does_not_move_with_the_hash_seed() -> None:
    """A set literal compiles to a frozenset constant, whose repr's order moves with
    PYTHONHASHSEED: the same function had digested five ways under five seeds, and a resumed
    study warned that its unchanged objective was other code."""
    import subprocess
    import sys

    code = (
        "from dse.study.objectives import code_digest\n"
        "print(code_digest(lambda m: m['engine'] in {'trt', 'sglang', 'vllm', 'atom', 'x', 'y'}))"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
        ).stdout  # fmt: skip
        for seed in range(1, 6)
    }
    assert len(digests) == 1, digests


def test_reading_a_study_with_its_objective_function_writes_nothing(tmp_path: Path) -> None:
    """Reading (results) with a function attached had stored the function's digest in a study
    stored before the digest existed: a write, which read-only media refuse."""

    def per_user(m):  # type: ignore[no-untyped-def]
        return m["usd_per_hour"] / m["tokens_per_s_per_user"]

    Study.load(TINY).with_objective("speed_cost", per_user).run(trials=2, out=tmp_path)
    db = tmp_path / "tiny-study" / "study.db"
    with sqlite3.connect(db) as con:
        con.execute("delete from study_user_attributes where key = 'objective_code'")
    Study.load(TINY).with_objective("speed_cost", per_user).results(out=tmp_path)
    with sqlite3.connect(db) as con:
        keys = {r[0] for r in con.execute("select key from study_user_attributes")}
    assert "objective_code" not in keys


def test_an_objective_set_in_python_sizes_the_placements_as_the_files_would(tmp_path: Path) -> None:
    """``with_objective("gpus")`` had left the study file's first objective (cost) in the spec the
    trials read, so every trial's MILP, the warm start's too, sized its pools for cost while the
    study ranked GPUs: 7 of 20 trials differed from the same study with ``names = ["gpus"]`` in its
    file. They are now the same trials, with the same values."""
    headline = STUDIES / "deepseek-v3-blackwell.toml"
    by_python = Study.load(headline).with_objective("gpus").run(trials=10, out=tmp_path / "a")
    gpus = tmp_path / "deepseek-v3-blackwell.toml"
    text = headline.read_text()
    assert text.count('names = ["usd_per_million_tokens"') == 1
    gpus.write_text(text.replace('names = ["usd_per_million_tokens"', 'names = ["gpus"'))
    by_file = Study.load(gpus).run(trials=10, out=tmp_path / "b")
    cols = ["trial", "gpus", "usd_per_hour", "objective_gpus"]
    assert by_python.trials.select(cols).equals(by_file.trials.select(cols))
    # the warm start sized for GPUs differs from cost's: the comparison can tell the two apart
    by_cost = Study.load(headline).run(trials=10, out=tmp_path / "c")
    assert not by_cost.trials.select(cols[:3]).equals(by_file.trials.select(cols[:3]))


def test_objectives_no_run_can_value_are_refused_before_it_writes(tmp_path: Path) -> None:
    """A study read back with ``with_stored_objectives`` holds a function objective's name alone:
    run again, its trials had been stored without a value, in silence. An objective's direction
    other than minimize or maximize had failed as "differ from the stored study's" on a new study,
    leaving its database; one named twice had run a two-objective study of one column."""
    from dse.study.objectives import ObjectiveDef

    first = Study.load(TINY).with_objective("o", lambda m: m["gpus"]).run(trials=2, out=tmp_path)
    assert first.trials["objective_o"].null_count() == 0
    read = Study.load(TINY).with_stored_objectives(out=tmp_path)
    assert [o.name for o in read.objectives] == ["o"] and read.objectives[0].fn is None
    with pytest.raises(InputError, match="objectives: o: has no function to value the trials with"):
        read.run(trials=4, out=tmp_path)
    assert read.results(out=tmp_path).trials.height == 2  # refused before a trial ran
    spec = Study.load(TINY).spec
    with pytest.raises(InputError, match="objectives: gpus.direction = 'sideways': must be minimize or"):
        Study(spec, (ObjectiveDef("gpus", "sideways"),))  # type: ignore[arg-type]
    with pytest.raises(InputError, match="objectives: name = 'gpus': must not name an objective twice"):
        Study(spec, (ObjectiveDef.metric("gpus"),) * 2)
