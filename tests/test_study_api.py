"""Studies as a user writing them in Python and running them on shared storage meets them:
arguments of the wrong type (a folder as a string, 2.5 trials, a storage path) refused or taken
in one line before anything is written; custom objectives (a missing metric handled as a
``KeyError``, values of 1e12 and more, none in the progress bar); errors naming the study file
and saying how a stored study is read or resumed; exports whose study name hive readers would
misread; and the study file's GPU cap and a worker's --stale-after."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest
from conftest import TINY, run_dse

from dse.errors import InputError
from dse.study import Study
from dse.study.objectives import ObjectiveError


def test_a_folder_may_be_a_string_and_bad_arguments_are_one_line(tmp_path: Path) -> None:
    """``out="runs/x"`` had failed with Python's bare ``TypeError`` (str / str) in run, results,
    with_stored_objectives and export; ``trials=2.5`` had run 3 trials, ``trials="5"`` raised a
    ``TypeError`` and ``trials=True`` ran one."""
    study = Study.load(TINY)
    for bad in ({"trials": 2.5}, {"trials": "5"}, {"trials": True}, {"trials": 2, "seed": 1.5}):
        with pytest.raises(InputError, match=r"^(trials|seed) = .*: must be a whole number \(an int\)$"):
            study.run(out=tmp_path / "bad", **bad)  # type: ignore[arg-type]
    assert not (tmp_path / "bad").exists()
    with pytest.raises(InputError, match=r"^out = 3: must be a folder"):
        study.run(trials=2, out=3)  # type: ignore[arg-type]

    out = str(tmp_path / "runs")
    res = study.run(trials=2, out=out)
    assert (tmp_path / "runs" / "tiny-study" / "study.db").is_file() and res.trials.height == 2
    again = study.with_stored_objectives(out=out).results(out=out)
    assert again.trials["trial"].to_list() == res.trials["trial"].to_list()
    paths = again.export(str(tmp_path / "exports"))
    back = pl.read_parquet(tmp_path / "exports" / "trials" / "*" / "*.parquet", hive_partitioning=True)
    assert len(paths) == 5 and back["trial"].to_list() == res.trials["trial"].to_list()

    # a trial the study does not hold: one line naming it, not a bare KeyError
    with pytest.raises(InputError, match=r"trials = \[7\]: has 7, which is not a complete trial .*0 to 1"):
        again.sim_timeseries([7])
    with pytest.raises(InputError, match=r"trials = 0: must be a list of trial numbers"):
        again.sim_timeseries(0)  # type: ignore[arg-type]
    assert set(again.sim_timeseries([0])["trial"].to_list()) <= {0}


def test_a_metric_objective_in_the_wrong_direction_names_its_direction() -> None:
    """It had said ``direction = 'gpus'``: the metric's name as the direction's value."""
    with pytest.raises(InputError) as err:
        Study.load(TINY).with_objective("gpus", direction="maximize")
    assert str(err.value) == (
        "objective: gpus.direction = 'maximize': is minimized by its metric's definition, not maximized"
    )


def test_an_objective_that_handles_a_missing_metric_itself_goes_on(tmp_path: Path) -> None:
    """A metric trials lack is a ``KeyError`` too: ``except KeyError`` in the function had not
    caught it, and the run had stopped all the same. Unhandled, it stops the run as before."""

    def with_fallback(m):  # type: ignore[no-untyped-def]
        try:
            return m["energy_cost"]
        except KeyError:
            return m["usd_per_hour"]

    res = Study.load(TINY).with_objective("cost", with_fallback).run(trials=2, out=tmp_path / "a")
    assert res.trials["objective_cost"].to_list() == res.trials["usd_per_hour"].to_list()

    with pytest.raises(ObjectiveError, match=r"reads a metric trials do not have.*nothing was stored") as err:
        Study.load(TINY).with_objective("cost", lambda m: m["energy_cost"]).run(trials=2, out=tmp_path / "b")
    assert isinstance(err.value, KeyError) and "\n" not in str(err.value)
    assert not str(err.value).startswith(("'", '"'))  # one line, not KeyError's quoted repr
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("cap", ["0.5", "12.5", "0"])
def test_a_gpu_cap_is_a_whole_number_of_gpus(tmp_path: Path, cap: str) -> None:
    """``max_gpus = 0.5`` had been taken, every trial then infeasible against a cap no design meets."""
    spec = tmp_path / "tiny-study.toml"
    spec.write_text(TINY.read_text() + f"\n[limits]\nmax_gpus = {cap}\n")
    code, out, err = run_dse("study", "run", str(spec), "--out", str(tmp_path / "o"), "--trials", "2")
    said = f"dse: error: {spec}: limits.max_gpus = {cap}: must be a whole number of GPUs, at least 1"
    assert (code, out, err.strip()) == (2, "", said)
    assert not (tmp_path / "o").exists()
    spec.write_text(TINY.read_text() + "\n[limits]\nmax_gpus = 64.0\n")
    assert run_dse("study", "show", str(spec)).code == 0


def test_a_study_name_hive_readers_would_misread_reads_back_as_written(tmp_path: Path) -> None:
    """Exports are hive-partitioned by the study's name: ``50%20off`` had read back as ``50 off``
    (polars, DuckDB decode the folder's name). A name like a date or a number reads as a string
    when the reader is told so (docs/schema.md: polars, DuckDB, pyarrow and pandas); a name with
    '=', whose run folder a reader takes for a column (``runs/a=b/``: a column ``a``), is
    refused."""
    import duckdb
    import pandas as pd
    import pyarrow as pa
    import pyarrow.dataset as ds

    study = ds.partitioning(pa.schema([("study", pa.string())]), flavor="hive")  # as the page says
    for name in ("50%20off", "2026-12-05", "123"):
        spec = tmp_path / f"{name}.toml"
        spec.write_text(TINY.read_text().replace('name = "tiny-study"', f'name = "{name}"'))
        code, _, err = run_dse(
            "study", "run", str(spec), "--out", str(tmp_path), "--trials", "2", "--no-progress"
        )
        assert code == 0, err
        for table in ("trials", "pareto", "placements", "kv_tiers", "sim_timeseries"):
            glob = str(tmp_path / name / "exports" / table / "*" / "*.parquet")
            read = pl.read_parquet(glob, hive_partitioning=True, hive_schema={"study": pl.String})
            assert read.schema["study"] == pl.String and set(read["study"].to_list()) <= {name}, table
            if table == "trials":
                assert read["study"].to_list() == [name, name]
                hive = "hive_partitioning = true, hive_types = {'study': VARCHAR}"
                assert duckdb.sql(
                    f"select distinct study from read_parquet('{glob}', {hive})"
                ).fetchall() == [(name,)]
                folder = tmp_path / name / "exports" / table
                assert ds.dataset(folder, partitioning=study).to_table()["study"].to_pylist() == [name] * 2
                assert pd.read_parquet(folder, partitioning=study)["study"].tolist() == [name] * 2

    spec = tmp_path / "a=b.toml"
    spec.write_text(TINY.read_text().replace('name = "tiny-study"', 'name = "a=b"'))
    code, out, err = run_dse("study", "run", str(spec), "--out", str(tmp_path / "o"), "--trials", "2")
    assert code == 2 and out == "" and not (tmp_path / "o").exists()
    said = "must not hold '=': hive readers of the exports take a folder named key=value as a column"
    assert err.strip() == f"dse: error: {spec}: name = 'a=b': {said}"
    # the name hive readers take for a null partition: polars, DuckDB and pyarrow had read the
    # study column as null
    hive = "__HIVE_DEFAULT_PARTITION__"
    spec = tmp_path / f"{hive}.toml"
    spec.write_text(TINY.read_text().replace('name = "tiny-study"', f'name = "{hive}"'))
    code, out, err = run_dse("study", "run", str(spec), "--out", str(tmp_path / "o"), "--trials", "2")
    assert code == 2 and out == "" and not (tmp_path / "o").exists()
    said = "must not be the name hive readers of the exports read as a missing value"
    assert err.strip() == f"dse: error: {spec}: name = '{hive}': {said}"


def test_an_objective_of_1e12_and_more_is_a_value(tmp_path: Path) -> None:
    """Tokens per year run to 1e12 and more: such values had been exported as null (the magnitude
    of the value told for none), every trial then off the front and best_trial() None. A trial
    whose function gives None is still without a value."""

    def tokens_per_year(m):  # type: ignore[no-untyped-def]
        return None if m["gpus"] <= 8 else m["tokens_per_s_per_gpu"] * m["gpus"] * 86400 * 365

    res = (
        Study.load(TINY)
        .with_objective("tokens_per_year", tokens_per_year, "maximize")
        .run(trials=4, out=tmp_path)
    )
    t = res.trials.filter(pl.col("feasible"))
    big = t.filter(pl.col("gpus") > 8)
    assert big.height > 0 and t.filter(pl.col("gpus") <= 8).height > 0  # both cases are met
    assert big["objective_tokens_per_year"].min() >= 1e12  # type: ignore[operator]
    assert (
        t.filter(pl.col("gpus") <= 8)["objective_tokens_per_year"].null_count()
        == t.filter(pl.col("gpus") <= 8).height
    )
    assert (
        res.best_trial()
        == big.sort("objective_tokens_per_year", descending=True, maintain_order=True)["trial"][0]
    )
    assert not res.pareto.is_empty() and res.pareto["objective_tokens_per_year"].null_count() == 0


def test_reading_a_study_stored_with_other_objectives_says_how_to_read_it(tmp_path: Path) -> None:
    """Reading a study run with an objective function of its own, with the study file's
    objectives: the error had said to use another out= (what a run with other objectives
    needs), not how to read the study that is there."""
    Study.load(TINY).with_objective("per_gpu", lambda m: m["usd_per_hour"] / m["gpus"]).run(
        trials=2, out=tmp_path
    )
    with pytest.raises(InputError) as err:
        Study.load(TINY).results(out=tmp_path)
    assert str(err.value).endswith(
        "objectives = ['usd_per_million_tokens']: the stored study optimises ['per_gpu']: read it as "
        "stored with Study.load('tiny-study').with_stored_objectives(out=...).results(out=...)"
    )
    res = Study.load(TINY).with_stored_objectives(out=tmp_path).results(out=tmp_path)
    assert res.names == ["per_gpu"] and res.trials["objective_per_gpu"].null_count() == 0


def test_a_run_from_python_names_the_study_file_it_was_loaded_from(tmp_path: Path) -> None:
    """An unknown id or a shape no hardware runs is found when the study runs: from Python the
    error had named ``study tiny-study``, where the command line names the file."""
    spec = tmp_path / "tiny-study.toml"
    for old, new, said in (
        ('model = "deepseek-v3"', 'model = "deepseek-v9"', "model = 'deepseek-v9': unknown model id"),
        (
            '"8gpu-tp8-ep8", "8gpu-dpa-ep8"]',
            '"8gpu-tp9-ep8"]',
            "search.prefill.shapes[0] = '8gpu-tp9-ep8': no",
        ),
    ):
        spec.write_text(TINY.read_text().replace(old, new, 1))
        with pytest.raises(InputError) as err:
            Study.load(spec).with_objective("o", lambda m: m["gpus"]).run(trials=1, out=tmp_path / "o")
        assert str(err.value).startswith(f"{spec}: {said}"), str(err.value)
        assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("stale", ["inf", "nan", "0", "-1"])
def test_a_worker_refuses_a_stale_after_that_is_no_finite_time(tmp_path: Path, stale: str) -> None:
    """``--stale-after inf`` had been a traceback (heartbeats every inf // 4 seconds), after
    creating the SQLite file."""
    db = tmp_path / "s.db"
    code, out, err = run_dse(
        "study",
        "worker",
        str(TINY),
        "--storage",
        f"sqlite:///{db}",
        "--stale-after",
        stale,
        "--out",
        str(tmp_path),
    )
    said = f"dse: error: dse worker: --stale-after = {stale}: must be a finite number of seconds > 0"
    assert (code, out, err.strip()) == (2, "", said)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("stale", ["1", "3.5"])
def test_a_worker_refuses_a_stale_after_shorter_than_four_heartbeats(tmp_path: Path, stale: str) -> None:
    """Heartbeats come every second: three workers of a 12-point grid with ``--stale-after 1``
    failed a live worker's 1.6 s trial as a dead worker's and ran it again (its result dropped)."""
    db = tmp_path / "s.db"
    argv = ("--storage", f"sqlite:///{db}", "--stale-after", stale, "--out", str(tmp_path))
    code, out, err = run_dse("study", "worker", str(TINY), *argv)
    said = f"dse: error: dse worker: --stale-after = {stale}: must be at least 4 seconds: "
    assert code == 2 and out == "" and err.startswith(said) and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []


def test_resuming_from_the_command_line_a_study_run_with_a_function_says_where_it_resumes(
    tmp_path: Path,
) -> None:
    """The command line cannot give the function: its refusal had said only to use another
    --out, which starts another study, not how this one resumes."""
    Study.load(TINY).with_objective("per_gpu", lambda m: m["usd_per_hour"] / m["gpus"]).run(
        trials=2, out=tmp_path
    )
    code, out, err = run_dse("study", "run", str(TINY), "--out", str(tmp_path), "--trials", "3")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert err.strip().endswith(
        "the stored study optimises ['per_gpu']; use another --out or --storage for other objectives (or "
        "resume it from Python: 'per_gpu' is an objective function of its own, "
        "Study.with_objective('per_gpu', fn))"
    )
    again = (
        Study.load(TINY)
        .with_objective("per_gpu", lambda m: m["usd_per_hour"] / m["gpus"])
        .run(trials=3, out=tmp_path)
    )
    assert again.stats is not None and (again.stats.completed_before, again.stats.ran) == (2, 1)


def test_the_progress_bar_shows_no_best_of_trials_without_a_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bar took the value told for none (1e12, the worst) as a trial's value: with an
    objective that gave None it read ``best o 1e+12``."""
    Study.load(TINY).with_objective("o", lambda m: None).run(trials=3, out=tmp_path / "a", progress=True)
    last = capsys.readouterr().err.strip().split("\r")[-1]
    assert last.startswith("[") and "3/3 trials" in last, last
    assert "no value yet" in last and "e+12" not in last, last
    Study.load(TINY).with_objective("o", lambda m: m["gpus"]).run(trials=3, out=tmp_path / "b", progress=True)
    last = capsys.readouterr().err.strip().split("\r")[-1]
    assert "best o 8" in last, last


def test_a_study_built_from_a_spec_has_the_spec_s_objectives(tmp_path: Path) -> None:
    """``Study(spec)`` ran with the spec's objectives but held none: its run then failed in
    best_trial() with an ``IndexError``, after storing its trials."""
    from dse.study import load_study

    study = Study(load_study(TINY))
    assert [o.name for o in study.objectives] == ["usd_per_million_tokens"]
    res = study.run(trials=2, out=tmp_path)
    feasible = res.trials.filter(pl.col("feasible"))
    feasible = feasible.sort("objective_usd_per_million_tokens", maintain_order=True)
    assert feasible.height > 0 and res.best_trial() == feasible["trial"][0]


def test_a_storage_given_as_a_path_says_how_to_write_its_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``storage=Path("x.db")`` had failed with ``AttributeError`` ('PosixPath' object has no
    attribute 'startswith'); ``--storage x.db`` said SQLAlchemy could not parse it."""
    monkeypatch.chdir(tmp_path)
    said = f"must be a storage URL string: sqlite:///{tmp_path / 'x.db'} for a SQLite file"
    for storage in (Path("x.db"), "x.db"):
        with pytest.raises(InputError) as err:
            Study.load(TINY).run(trials=2, out=tmp_path / "o", storage=storage)  # type: ignore[arg-type]
        assert str(err.value).startswith(f"storage = {str(storage)!r}: {said}"), str(err.value)
    with pytest.raises(InputError) as err:  # a server's without its scheme: its password is not shown
        Study.load(TINY).run(trials=2, out=tmp_path / "o", storage="bob:hunter2@host")
    assert str(err.value).startswith("storage = 'bob:***@host': must be a storage URL string: sqlite:///PATH")
    for command in ("run", "worker", "export"):
        code, out, err_text = run_dse(
            "study", command, str(TINY), "--storage", "x.db", "--out", str(tmp_path / "o")
        )
        assert (code, out) == (2, "") and err_text.startswith(f"dse: error: --storage = 'x.db': {said}"), (
            err_text
        )
    assert list(tmp_path.iterdir()) == []


def test_a_trajectory_asked_twice_or_of_a_trial_without_a_design_is_one_line(tmp_path: Path) -> None:
    """``sim_timeseries([0, 0])`` had returned trial 0's series twice (a sum over the table
    doubled) and ``sim_timeseries([n])`` of a trial the MILP placed nothing for an empty table,
    without a word."""
    res = Study.load(TINY).run(trials=2, out=tmp_path / "runs")
    once = res.sim_timeseries([0])
    assert once.height > 0 and set(once["trial"].to_list()) == {0}
    with pytest.raises(InputError, match=r"^trials = \[0, 0\]: has 0 twice: list each trial once$"):
        res.sim_timeseries([0, 0])
    broke = tmp_path / "tiny-study.toml"
    broke.write_text(TINY.read_text() + "\n[limits]\nbudget_usd_hour = 0.001\n")  # no design fits
    none = Study.load(broke).run(trials=2, out=tmp_path / "none")
    assert none.trials["gpus"].null_count() == none.trials.height == 2
    with pytest.raises(InputError, match=r"^trials = \[1\]: has 1, a trial without a design to simulate"):
        none.sim_timeseries([1])
    assert none.sim_timeseries().is_empty()  # the default, the front's designs: none, and no error


def test_load_of_no_name_and_run_arguments_of_the_wrong_type_are_one_line(tmp_path: Path) -> None:
    """``Study.load(None)`` had failed inside pathlib with ``TypeError``; ``run(catalog="x")`` and
    ``run(params={})`` with an ``AttributeError`` after writing the run folder, and ``then=3`` with
    ``TypeError: 'int' object is not callable`` after every trial had run; ``progress="no"`` and
    ``with_objective(replace_all="no")`` had been taken as True."""
    for bad in (None, 3):
        with pytest.raises(
            InputError, match=rf"^name_or_path = {bad}: must be a study's name or a study file's path$"
        ):
            Study.load(bad)  # type: ignore[arg-type]
    study = Study.load(TINY)
    out = tmp_path / "runs"
    with pytest.raises(InputError, match=r"^catalog = 'x': must be a Catalog or None, not str$"):
        study.run(trials=1, out=out, catalog="x")  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^params = \{\}: must be a PerfParams or None, not dict$"):
        study.run(trials=1, out=out, params={})  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^then = 3: must be a function of the results, or None$"):
        study.run(trials=1, out=out, then=3)  # type: ignore[arg-type]
    # a truthy value of another kind had drawn the bar ("no" too), a falsy one had not
    for bad, kind in (("yes", "str"), ("no", "str"), (1, "int"), (None, "NoneType")):
        with pytest.raises(InputError, match=rf"^progress = {bad!r}: must be a bool, not {kind}$"):
            study.run(trials=1, out=out, progress=bad)  # type: ignore[arg-type]
    assert not out.exists()
    with pytest.raises(InputError, match=r"^replace_all = 'no': must be a bool, not str$"):
        study.with_objective("gpus", replace_all="no")  # type: ignore[arg-type]  # it had replaced them
    with pytest.raises(InputError, match=r"^catalog = 'b200': must be a Catalog or None, not str$"):
        study.results(out=out, catalog="b200")  # type: ignore[arg-type]


def test_a_study_built_with_objectives_of_another_kind_is_one_line(tmp_path: Path) -> None:
    """``Study(spec, objectives="gpus")`` had run, written its folder and failed with
    ``AttributeError: 'str' object has no attribute 'name'``."""
    spec = Study.load(TINY).spec
    with pytest.raises(InputError, match=r"^objectives = 'gpus': must be a tuple of ObjectiveDef"):
        Study(spec, objectives="gpus")  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^spec = 'tiny': must be a StudySpec, not str$"):
        Study("tiny")  # type: ignore[arg-type]
    assert Study(spec, objectives=[]).objectives == Study(spec).objectives  # a list is taken


def test_a_spec_made_in_python_is_held_to_the_rules_of_a_study_file() -> None:
    """``Study(replace(spec, ...))`` had skipped the study file's rules: a sampler "bogus" ran TPE,
    a name "a=b" and a seed of -3 ran, a topology "sideways" or a reversed batch range failed with
    a traceback after the run made its database. Each is now one line naming the key."""
    from dataclasses import replace

    s = Study.load("deepseek-v3-blackwell").spec
    decode = replace(s.search.decode, max_batch=(4096, 16))
    for bad, said in (
        (replace(s, search=replace(s.search, sampler="bogus")), "spec: search.sampler = 'bogus': must be"),
        (replace(s, name="a=b"), "spec: name = 'a=b': must not hold '='"),
        (replace(s, seed=-3), "spec: seed = -3: must be between 0 and"),
        (
            replace(s, search=replace(s.search, topologies=("aggregated", "sideways"))),
            "search.topologies = 'sideways'",
        ),
        (
            replace(s, search=replace(s.search, decode=decode)),
            "search.decode.max_batch = [4096, 16]: must be",
        ),
    ):
        with pytest.raises(InputError, match=re.escape(said)):
            Study(bad)
    assert Study(s).spec == s  # a spec left as the file made it is taken as it is
