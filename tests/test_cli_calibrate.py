"""`dse calibrate` on bad input: one line, exit 2, no file; runs without latency or of one GPU
type. (That a fit's stage points do not depend on where the runs' file lies, and rows that are no
measurement: tests/test_kernels.py, in the measured tier's fit.)"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import Cli

from dse.paths import CALIBRATION_FILE, PUBLISHED_POINTS


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def test_bad_runs_files_are_one_line_before_any_fit(
    cli: Cli, tmp_path: Path, two_gpu_runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "fitted.json"
    rows = _rows(two_gpu_runs)
    no_tput = _write(tmp_path / "no_tput.csv", [{k: v for k, v in r.items() if k != "tput_per_gpu_total"}
                                                for r in rows])  # fmt: skip
    latin = tmp_path / "latin.csv"
    latin.write_bytes(two_gpu_runs.read_bytes() + "caf\xe9\n".encode("latin-1"))
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    # a shipped stage point's id on another setup: only its value was read, fitted as the published
    # setup's figure
    other = _rows(PUBLISHED_POINTS)
    a4 = next(i for i, r in enumerate(other) if r["id"] == "A4")
    other[a4]["gpus"] = "64"
    other_setup = _write(tmp_path / "points-64.csv", other)
    tabs = tmp_path / "tabs.tsv"  # had been told as "hardware: is a required column"
    tabs.write_text(two_gpu_runs.read_text().replace(",", "\t"))
    cases = {
        (str(tabs),): "tabs.tsv: --data: must be comma-separated: its header line separates its columns",
        (str(no_tput),): "no_tput.csv: tput_per_gpu_total: is a required column",
        (str(empty),): "empty.csv: --data: is empty: a CSV needs a header line naming its columns",
        (str(latin),): "latin.csv: --data: must be UTF-8 text",
        (str(two_gpu_runs), "--points", str(tmp_path / "no.csv")): "no.csv: --points: must be an existing",
        (str(two_gpu_runs), "--points", str(other_setup)): (
            f"points-64.csv line {a4 + 2}: gpus = '64': must be 32 for stage point A4: the fit prices it as "
            "the published setup (deepseek-v3 on 32 h800 GPUs, prefill at 4096 tokens) and reads only "
            "its value; a run of your own goes to --data"
        ),
    }
    for args, want in cases.items():
        res = cli("calibrate", "--data", *args, "--out", str(out), "--no-cross-validation")
        assert res.code == 2 and len(res.err.strip().splitlines()) == 1, res.err
        assert want in res.err, res.err
    folder = cli("calibrate", "--data", str(two_gpu_runs), "--out", str(tmp_path), "--no-cross-validation")
    assert folder.code == 2 and "--out: must be a file to write, not a folder" in folder.err
    under_file = tmp_path / "a-file"
    under_file.write_text("")
    unwritable = cli("calibrate", "--data", str(two_gpu_runs), "--out", str(under_file / "x.json"))
    # found before the fit (it had been a traceback once the whole fit was done)
    assert unwritable.code == 2 and len(unwritable.err.strip().splitlines()) == 1, unwritable.err
    assert "--out = " in unwritable.err and "cannot be written (not a folder)" in unwritable.err
    assert not out.exists()
    # --out naming the runs read (or the points) had written the fit over them, exit 0
    points = tmp_path / "points.csv"
    points.write_bytes(PUBLISHED_POINTS.read_bytes())
    runs = two_gpu_runs.read_bytes()
    for flag, read in (("--data", two_gpu_runs), ("--points", points)):
        args = ["--data", str(two_gpu_runs), "--points", str(points)]
        res = cli("calibrate", *args, "--out", str(read), "--no-cross-validation")
        assert res.code == 2 and len(res.err.strip().splitlines()) == 1, res.err
        assert f"--out: must not be the {flag} file ({read})" in res.err, res.err
    assert two_gpu_runs.read_bytes() == runs and points.read_bytes() == PUBLISHED_POINTS.read_bytes()
    # a fit of runs of one's own without --out would have replaced the shipped calibration
    shipped = CALIBRATION_FILE.read_bytes()
    for own in (["--data", str(two_gpu_runs)], ["--points", str(tmp_path / "no.csv")]):
        res = cli("calibrate", *own, "--no-cross-validation")
        assert res.code == 2 and len(res.err.strip().splitlines()) == 1, res.err
        assert res.err.startswith("dse: error: dse calibrate: --out: is needed where the runs, points"), (
            res.err
        )
    # so would a fit of the shipped runs under a catalog folder's edited B200 (9 TB/s), and a fit
    # whose DSE_CALIBRATION names the shipped file by another path (the paths had been compared as
    # written)
    (tmp_path / "cat" / "hardware").mkdir(parents=True)
    b200 = (Path(__file__).resolve().parents[1] / "hardware_catalog" / "b200.toml").read_text()
    assert b200.count("bandwidth_tb_per_s = 8.0") == 1
    (tmp_path / "cat" / "hardware" / "b200.toml").write_text(
        b200.replace("bandwidth_tb_per_s = 8.0", "bandwidth_tb_per_s = 9.0")
    )
    edited = cli("--catalog-dir", str(tmp_path / "cat"), "calibrate", "--no-cross-validation")
    assert edited.code == 2 and "--out: is needed where the runs, points or catalog entries" in edited.err
    monkeypatch.setenv(
        "DSE_CALIBRATION", str(CALIBRATION_FILE.parent / ".." / "perf" / CALIBRATION_FILE.name)
    )
    aliased = cli("calibrate", "--data", str(two_gpu_runs), "--no-cross-validation")
    assert aliased.code == 2 and "--out: is needed where the runs, points" in aliased.err, aliased.err
    assert CALIBRATION_FILE.read_bytes() == shipped


@pytest.mark.e2e  # a throughput fit alone (no latency to replay): about 10 s
def test_runs_without_latency_fit_throughput_and_say_the_latency_error_is_not_measured(
    cli: Cli, tmp_path: Path, two_gpu_runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs with no TTFT or TPOT column fit the throughput; the latency error is "not measured" in
    the output, null in the file (strict JSON: it had been a bare NaN, and `dse predict --json` then
    failed with a traceback); a throughput past the data files' range is skipped with its reason."""
    import json

    latency = ("median_ttft_s", "mean_ttft_s", "p99_ttft_s", "median_tpot_ms", "mean_tpot_ms", "p99_tpot_ms")
    rows = [{k: v for k, v in r.items() if k not in latency} for r in _rows(two_gpu_runs)]
    rows[0]["tput_per_gpu_total"] = "1e30"
    data = _write(tmp_path / "no_latency.csv", rows)
    out = tmp_path / "fitted.json"
    res = cli("calibrate", "--data", str(data), "--out", str(out), "--no-cross-validation", "--jobs", "1")
    assert res.code == 0, res.err
    assert "skipped: no_latency.csv line 2: tput_per_gpu_total = '1e30': must be 0 or between" in res.out
    assert "median TTFT (closed form): not measured (no row has a median TTFT)" in res.out
    assert "latency, not fitted (no row measures a TTFT or TPOT percentile; the defaults stand)" in res.out
    assert "ttft p50 not measured" in res.out and "RuntimeWarning" not in res.err
    doc = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    assert doc["provenance"]["in_sample_ttft_median_ape"] is None
    assert doc["provenance"]["latency"]["in_sample_median_ape"]["tpot_p99"] is None
    monkeypatch.setenv("DSE_CALIBRATION", str(out))
    pred = cli("predict", "--hardware", "h200", "--conc", "4", "--json")
    assert pred.code == 0, pred.err
    assert json.loads(pred.out)["expected_error"]["latency_median_ape"]["ttft_p50"] is None
    text = cli("predict", "--hardware", "h200", "--conc", "4")
    assert "simulated TTFT p50 / p99 not measured / not measured" in text.out, text.out


@pytest.mark.e2e  # a calibration with its latency replays (about 14 s under `make test`)
def test_a_fit_of_few_rows_without_cross_validation_says_to_run_it(
    cli: Cli, tmp_path: Path, two_gpu_runs: Path
) -> None:
    """Ten rows of two GPU types fit with --no-cross-validation: the warning had said to read the
    leave-one-hardware-out error, which such a file does not hold. A row of fewer fields than the
    header and one of more are skipped as such: the short one had been told as "decode_tp = 'None':
    must be a number", and the long one, its cells shifted against the header, fitted."""
    rows = _rows(two_gpu_runs)
    h200, mi355x = ([r for r in rows if r["hardware"] == h] for h in ("h200", "mi355x"))
    rows = h200[:5] + mi355x[:6]  # two GPU types
    data = _write(tmp_path / "few.csv", rows[:10])
    cells = list(rows[10].values())
    with open(data, "a", newline="", encoding="utf-8") as fh:  # lines 12 and 13
        csv.writer(fh).writerows([cells[:15], [*cells, "x", "y"]])
    res = cli("calibrate", "--data", str(data), "--out", str(tmp_path / "f.json"), "--no-cross-validation")
    assert res.code == 0, res.err
    said = "10 rows to fit 25 or so values: the fit is poorly determined; fit with the cross-validation"
    assert said in res.err, res.err
    n = len(cells)
    assert f"skipped: few.csv line 12: has 15 of {n} fields: the row is short (decode_tp and after" in res.out
    seen = json.loads((tmp_path / "f.json").read_text())["provenance"]["catalog"]  # the entries it fitted
    assert set(seen["hardware"]) == {"h200-sxm", "mi355x"} and seen["hardware"]["mi355x"]["hbm"]
    assert f"skipped: few.csv line 13: has {n + 2} fields, 2 more than the header's {n}" in res.out


def test_a_fit_of_few_rows_of_one_gpu_type_does_not_ask_for_a_cross_validation(
    cli: Cli, tmp_path: Path, two_gpu_runs: Path
) -> None:
    """Six H200 rows: the warning had said to fit with the cross-validation and read its
    leave-one-hardware-out error, which runs of one GPU type cannot give (the command then says
    "cross-validation skipped" when run without --no-cross-validation)."""
    data = _write(tmp_path / "h200.csv", [r for r in _rows(two_gpu_runs) if r["hardware"] == "h200"][:6])
    res = cli("calibrate", "--data", str(data), "--out", str(tmp_path / "f.json"), "--no-cross-validation",
              "--no-points", "--jobs", "1")  # fmt: skip
    assert res.code == 0, res.err
    said = (
        "6 rows to fit 25 or so values: the fit is poorly determined; its runs are of one GPU type, "
        "so no leave-one-hardware-out error can be measured; check it against runs it did not see"
    )
    assert said in res.err and "fit with the cross-validation" not in res.err, res.err


# A copy of the runs in another folder, a row with no measured throughput and a latency figure that
# is no measurement: read and said in the measured tier's fit, tests/test_kernels.py
# (test_calibrate_fits_the_measured_tier; one fit, not two, 2026-12-05).


def test_a_broken_calibration_file_is_one_line(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$DSE_CALIBRATION naming a file with a value that is not a number, an efficiency above its
    datasheet peak, a key the model lacks or a missing section: one line naming file and key."""
    import json

    from dse.paths import CALIBRATION_FILE

    base = json.loads(CALIBRATION_FILE.read_text())
    peak = "must be a fraction of the datasheet peak in (0, 1]"
    cases = {
        f"params.gemm_eff = 'fast': {peak}": ("params", "gemm_eff", "fast"),
        f"params.hbm_eff = 7: {peak}": ("params", "hbm_eff", 7),
        "params.warp_eff: is not a parameter of the performance model": ("params", "warp_eff", 0.5),
        "engines: is missing (not a file dse calibrate wrote)": ("engines", None, None),
        "power.idle = 'x': must be a fraction of the TDP in (0, 1]": ("power", "idle", "x"),
        "latency: must be a table of values (not a file dse calibrate wrote)": ("latency", "", [1]),
        "params: must be a table of values (not a file dse calibrate wrote)": ("params", "", [1]),
        "engines.trt.speed = -1: must be a number > 0": ("engines", "trt", "speed=-1"),
        "engines.trt.speed: is missing (not a file dse calibrate wrote)": ("engines", "trt", "speed=gone"),
    }
    for want, (section, key, value) in cases.items():
        doc = json.loads(json.dumps(base))
        if key is None:
            doc.pop(section)
        elif key == "":
            doc[section] = value
        elif value == "speed=-1":
            doc[section][key]["speed"] = -1
        elif value == "speed=gone":
            doc[section][key].pop("speed")
        else:
            doc[section][key] = value
        path = tmp_path / "broken.json"
        path.write_text(json.dumps(doc))
        monkeypatch.setenv("DSE_CALIBRATION", str(path))
        res = cli("predict", "--hardware", "b200")
        assert res.code == 2 and res.err.strip() == f"dse: error: {path}: {want}", res.err


def test_a_calibration_file_s_provenance_and_engine_profiles_are_checked(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provenance a prediction's expected error reads, and each engine's MTP draft depth,
    acceptance and chunk setting, are checked as the file loads: a provenance that was not a table,
    an error figure that was text or a list of fitted ids that was a number had been tracebacks
    once the prediction was made, an acceptance of -1 divided by zero, and "no" read as true."""
    import json

    from dse.paths import CALIBRATION_FILE

    base = json.loads(CALIBRATION_FILE.read_text())
    table = "must be a table of values (not a file dse calibrate wrote)"
    error, latency = (
        "must be a relative error >= 0",
        "must be a table of ttft_p50, ttft_p99, tpot_p50, tpot_p99",
    )
    cases: list[tuple[tuple[str, ...], object, str]] = [
        (("provenance",), 3, f"provenance: {table}"),
        (("provenance", "hardware_fitted"), 5, "provenance.hardware_fitted = 5: must be a list of ids"),
        (("provenance", "models_fitted"), "v3", "provenance.models_fitted = 'v3': must be a list of ids"),
        (
            ("provenance", "in_sample_tput_median_ape"),
            "x",
            f"provenance.in_sample_tput_median_ape = 'x': {error}",
        ),
        (
            ("provenance", "in_sample_ttft_median_ape"),
            -1,
            f"provenance.in_sample_ttft_median_ape = -1: {error}, or null where unmeasured",
        ),
        (("provenance", "latency"), 3, "provenance.latency = 3: must be a table of values"),
        (("provenance", "rows_fitted"), "6", "provenance.rows_fitted = '6': must be a whole number >= 1"),
        (
            ("provenance", "latency", "in_sample_median_ape"),
            {},
            f"provenance.latency.in_sample_median_ape = {{}}: {latency}",
        ),
        (
            ("engines", "trt", "mtp_accept_rate"),
            -1,
            "engines.trt.mtp_accept_rate = -1: must be a chance from 0 to 1",
        ),
        (
            ("engines", "trt", "mtp_draft_tokens"),
            2.5,
            "engines.trt.mtp_draft_tokens = 2.5: must be a whole number from 1 to 16",
        ),
        (
            ("engines", "sglang", "prefill_chunk_per_instance"),
            "no",
            "engines.sglang.prefill_chunk_per_instance = 'no': must be true or false",
        ),
    ]
    for keys, value, want in cases:
        doc = json.loads(json.dumps(base))
        where = doc
        for key in keys[:-1]:
            where = where[key]
        where[keys[-1]] = value
        path = tmp_path / "broken.json"
        path.write_text(json.dumps(doc))
        monkeypatch.setenv("DSE_CALIBRATION", str(path))
        res = cli("predict", "--hardware", "b200", "--conc", "4", "--requests", "20")
        assert res.code == 2 and res.err.strip() == f"dse: error: {path}: {want}", res.err


@pytest.mark.e2e  # a fit of two GPUs' runs: about 5 s
def test_a_power_fit_of_one_run_is_said_poorly_determined(
    cli: Cli, tmp_path: Path, two_gpu_runs: Path
) -> None:
    """Two values (idle, full) fitted to the one run that reports its power had printed "in-sample
    median abs error 0%" and nothing else."""
    rows = _rows(two_gpu_runs)
    first = next(i for i, r in enumerate(rows) if r.get("avg_power_w"))
    rows = [r if i == first else {**r, "avg_power_w": ""} for i, r in enumerate(rows)]
    out = tmp_path / "fitted.json"
    res = cli(
        "calibrate", "--data", _write(tmp_path / "one.csv", rows), "--out", out, "--no-cross-validation"
    )
    assert res.code == 0, res.err
    assert (
        "dse: warning: power: its two values (idle, full) fitted to 1 run that report it: a poorly" in res.err
    )


@pytest.mark.e2e  # a fit of one GPU's runs: about 5 s
def test_runs_of_one_gpu_type_store_no_cross_validation(cli: Cli, tmp_path: Path, two_gpu_runs: Path) -> None:
    """Leaving the one GPU type out fits a fold on no measured run: it had stored 78% / 136% as the
    leave-one-hardware-out error, which `dse predict` then quoted for every other GPU."""
    import json

    rows = [r for r in _rows(two_gpu_runs) if r["hardware"] == "h200"]
    data = _write(tmp_path / "h200.csv", rows)
    out = tmp_path / "fitted.json"
    res = cli("calibrate", "--data", str(data), "--out", str(out), "--jobs", "1")
    assert res.code == 0, res.err
    assert "cross-validation skipped: it leaves one GPU type out at a time, and the runs are all" in res.err
    assert "leave-one-hardware-out abs error" not in res.out
    prov = json.loads(out.read_text())["provenance"]
    assert "loho_tput_median_ape" not in prov and prov["hardware_fitted"] == ["h200-sxm"]


def test_a_run_repeated_cell_for_cell_is_fitted_once_and_listed(tmp_path: Path, two_gpu_runs: Path) -> None:
    """Five rows pasted twice had been fitted twice (weighing double: a cold start fitted 3.15 s
    came out 0 s) and counted among the runs fitted."""
    from dse.calibration.fit import read_measured
    from dse.catalog import load_catalog

    rows = _rows(two_gpu_runs)
    data = _write(tmp_path / "twice.csv", rows + rows[:2])
    catalog = load_catalog(use_env=False)
    fitted, skipped = read_measured(data, catalog)
    alone, _ = read_measured(two_gpu_runs, catalog)
    assert len(fitted) == len(alone)
    n = len(rows)
    assert [s for s in skipped if "repeats" in s] == [
        f"twice.csv line {n + 2}: repeats line 2 cell for cell (fitted once)",
        f"twice.csv line {n + 3}: repeats line 3 cell for cell (fitted once)",
    ]


def test_a_latency_figure_its_own_row_contradicts_is_left_out_and_listed(
    tmp_path: Path, two_gpu_runs: Path
) -> None:
    """A median TTFT typed in milliseconds (longer than the run's median request) and a median TPOT
    a thousandth of what the row's tokens/s per user say had been fitted as measured; each is now
    left out with the reason, the row's other figures fitted."""
    import math

    from dse.calibration.fit import read_measured, unmeasured_figures
    from dse.calibration.latency import measured_latency
    from dse.catalog import load_catalog

    rows = _rows(two_gpu_runs)
    rows[0] = {**rows[0], "median_ttft_s": str(float(rows[0]["median_ttft_s"]) * 1000)}
    rows[1] = {**rows[1], "median_tpot_ms": str(float(rows[1]["median_tpot_ms"]) / 1000)}
    data, _ = read_measured(_write(tmp_path / "units.csv", rows), load_catalog(use_env=False))
    notes = unmeasured_figures(data)
    assert len(notes) == 2, notes
    assert (
        notes[0].startswith("units.csv line 2: median_ttft_s = ")
        and "is longer than the run's median_e2el_s" in notes[0]
    )
    assert (
        notes[1].startswith("units.csv line 3: median_tpot_ms = ")
        and "disagrees with median_intvty_tok_s_user" in notes[1]
    )
    lat = measured_latency(data)
    assert math.isnan(lat[0, 0]) and math.isnan(lat[1, 2]) and not math.isnan(lat[0, 2])
    assert unmeasured_figures(read_measured(two_gpu_runs, load_catalog(use_env=False))[0]) == []


def test_the_rerun_command_names_the_catalog_folders_the_fit_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fit of a folder's own GPU had recorded a command without --catalog-dir: rerun, it skipped
    that GPU's runs as unknown hardware and fitted other values."""
    import argparse
    import shlex

    from dse.cli.calibrate_cmd import _rerun
    from dse.paths import MEASURED_RUNS

    env, flag = tmp_path / "env-cat", tmp_path / "my-cat"
    monkeypatch.setenv("DSE_CATALOG_DIR", str(env))
    flags = {"no_points": False, "kernels": "datasheet", "no_cross_validation": True}
    args = argparse.Namespace(data=MEASURED_RUNS, points=PUBLISHED_POINTS, catalog_dir=[str(flag)], **flags)
    words = shlex.split(str(_rerun(args, (0,))["command"]))
    assert words[:6] == ["dse", "--catalog-dir", str(env), "--catalog-dir", str(flag), "calibrate"]
    monkeypatch.delenv("DSE_CATALOG_DIR")
    args.catalog_dir = None
    assert shlex.split(str(_rerun(args, (0,))["command"]))[:4] == [
        "dse",
        "calibrate",
        "--data",
        "reference/inferencex_calibration.csv",
    ]


def test_an_engine_without_measured_runs_is_said_fitted_to_the_stage_points_where_it_was(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fit of TensorRT-LLM's runs alone still fits SGLang's speed to the stage points (it prices
    them with SGLang's profile): the trust line had called that speed "the calibrated engines'
    mean, an assumption". Without stage points it is that mean."""
    import json

    doc = json.loads(CALIBRATION_FILE.read_text())
    doc["provenance"]["engines_fitted"] = ["trt"]
    for points, said in (
        ("published_points.csv", "its speed is fitted to the stage points alone, its MTP acceptance"),
        (None, "its speed and MTP acceptance are the calibrated engines' mean, an assumption"),
    ):
        doc["provenance"]["stage_points"] = points
        path = tmp_path / f"fit-{points}.json"
        path.write_text(json.dumps(doc))
        monkeypatch.setenv("DSE_CALIBRATION", str(path))
        res = cli("predict", "--hardware", "b200", "--framework", "sglang", "--conc", "4", "--requests", "20")
        assert res.code == 0 and f"engine profile sglang has no measured runs: {said}" in res.out, res.out


def test_a_calibration_file_that_lacks_values_is_warned_of(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file without `params.hbm_eff` (an older dse's, or edited) had predicted B200 15% faster
    with the default in the fit's place, and one without `latency` had dropped the first wave's
    wait, each unsaid. The file still loads (an older dse's files do); the command says what it
    lacks, and the complete file says nothing."""
    import json

    from dse.paths import CALIBRATION_FILE

    doc = json.loads(CALIBRATION_FILE.read_text())
    del doc["params"]["hbm_eff"], doc["latency"]
    path = tmp_path / "lacking.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setenv("DSE_CALIBRATION", str(path))
    said = f"dse: warning: {path}: lacks params.hbm_eff, latency: the uncalibrated defaults stand in"
    res = cli("predict", "--hardware", "b200", "--conc", "4", "--requests", "20")
    assert res.code == 0 and said in res.err, res.err
    placed = cli(
        "place", "--hardware", "b200", "--rate", "5", "--ttft", "2", "--tpot", "0.05", "--no-shadow-prices"
    )
    assert placed.code == 0 and said in placed.err, placed.err
    monkeypatch.setenv("DSE_CALIBRATION", str(CALIBRATION_FILE))
    assert "lacks" not in cli("predict", "--hardware", "b200", "--conc", "4", "--requests", "20").err


def test_a_prediction_with_a_calibration_of_few_runs_says_so(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A calibration fitted on 6 runs (dse calibrate warns as it writes it): a prediction with it had
    quoted its in-sample error (5% / 11% on six H200 runs) as it quotes the shipped fit's of 223."""
    import json

    from dse.paths import CALIBRATION_FILE

    doc = json.loads(CALIBRATION_FILE.read_text())
    few = "the calibration fitted 6 runs, fewer than the 25 or so values it sets: a poorly determined fit"
    for rows, said in ((6, True), (223, False)):
        doc["provenance"]["rows_fitted"] = rows
        path = tmp_path / f"fit{rows}.json"
        path.write_text(json.dumps(doc))
        monkeypatch.setenv("DSE_CALIBRATION", str(path))
        res = cli("predict", "--hardware", "h200", "--conc", "4", "--requests", "20")
        assert res.code == 0 and "expected error against measured runs (" in res.out, res.err
        assert (few in res.out) is said, res.out
        js = cli("predict", "--hardware", "h200", "--conc", "4", "--requests", "20", "--json")
        assert json.loads(js.out)["expected_error"]["rows_fitted"] == rows


def test_a_prediction_calls_hardware_in_sample_only_at_the_numbers_the_fit_saw(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A calibration records the numbers of the catalog entries it fitted. One fitted with H200 at
    5.8 TB/s (a catalog folder's), read with the shipped 4.8, had said "in-sample: the calibration
    saw this hardware"; with the folder's entry it is in-sample again. A file that records none
    (the shipped one) is held to the shipped catalog, as before."""
    from dse.catalog import load_catalog
    from dse.paths import CALIBRATION_FILE, SHIPPED_HARDWARE
    from dse.perf.expected_error import fitted_entries

    faster = tmp_path / "cat" / "hardware"
    faster.mkdir(parents=True)
    text = (SHIPPED_HARDWARE / "h200-sxm.toml").read_text()
    assert "bandwidth_tb_per_s = 4.8" in text
    (faster / "h200-sxm.toml").write_text(
        text.replace("bandwidth_tb_per_s = 4.8", "bandwidth_tb_per_s = 5.8")
    )
    doc = json.loads(CALIBRATION_FILE.read_text())
    doc["provenance"]["catalog"] = fitted_entries(
        load_catalog([faster.parent]), ["h200-sxm"], ["deepseek-v3"]
    )
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setenv("DSE_CALIBRATION", str(path))
    asked = ("predict", "--hardware", "h200", "--conc", "4", "--requests", "20")
    shipped, own = cli(*asked), cli("--catalog-dir", faster.parent, *asked)
    assert shipped.code == own.code == 0, (shipped.err, own.err)
    assert "(datasheet kernels, leave-one-hardware-out: the calibration did not see this hardware; " \
           "your catalog changes h200-sxm from the entry it saw)" in shipped.out, shipped.out  # fmt: skip
    assert "in-sample: the calibration saw this hardware" in own.out, own.out
    # an entry that changes only its prices is the hardware the runs measured (docs/catalogs.md):
    # it had lost its in-sample error under any calibration that records its entries
    priced = tmp_path / "priced" / "hardware"
    priced.mkdir(parents=True)
    assert text.count("own_hyperscaler = 1.41") == 1
    (priced / "h200-sxm.toml").write_text(text.replace("own_hyperscaler = 1.41", "own_hyperscaler = 1.99"))
    doc["provenance"]["catalog"] = fitted_entries(load_catalog(), ["h200-sxm"], ["deepseek-v3"])
    path.write_text(json.dumps(doc))
    mine = cli("--catalog-dir", priced.parent, *asked)
    assert mine.code == 0 and "in-sample: the calibration saw this hardware" in mine.out, mine.out


@pytest.mark.e2e  # two calibrations of one GPU type (about 11 s under `make test`)
def test_a_fit_records_what_reruns_it_and_its_command_refits_the_same_values(
    cli: Cli, tmp_path: Path, two_gpu_runs: Path
) -> None:
    """The provenance names the command, the SHA-256 of the runs and of the engine settings they
    are replayed with, the commit and the seeds (it had held the runs' file name alone); that
    command, run again, writes the same file but for its date, and load_params reads it."""
    import hashlib
    import json
    import shlex
    import subprocess

    from dse.calibration.latency import SEED
    from dse.paths import REPO_ROOT
    from dse.perf.benchmark_rows import RECIPE_SETTINGS
    from dse.perf.params import load_params

    data = _write(tmp_path / "h200.csv", [r for r in _rows(two_gpu_runs) if r["hardware"] == "h200"][:6])
    first = tmp_path / "first.json"
    res = cli("calibrate", "--data", str(data), "--out", str(first), "--no-cross-validation",
              "--no-points", "--jobs", "1")  # fmt: skip
    assert res.code == 0, res.err
    prov = json.loads(first.read_text())["provenance"]
    command = f"dse calibrate --data {data.resolve()} --no-points --kernels datasheet --no-cross-validation"
    assert prov["command"] == command
    assert prov["data_sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    assert prov["recipe_settings"] == RECIPE_SETTINGS.name
    assert prov["recipe_settings_sha256"] == hashlib.sha256(RECIPE_SETTINGS.read_bytes()).hexdigest()
    assert prov["stage_points_sha256"] is None and prov["seeds"] == {"latency_replay": [SEED]}
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert prov["code_commit"] == (head.stdout.strip() if head.returncode == 0 else None)
    assert isinstance(prov["code_modified"], bool) or prov["code_commit"] is None
    assert load_params(first).provenance["data_sha256"] == prov["data_sha256"]
    again = tmp_path / "again.json"
    rerun = cli(*shlex.split(prov["command"])[1:], "--out", str(again), "--jobs", "1")
    assert rerun.code == 0, rerun.err
    a, b = (json.loads(f.read_text()) for f in (first, again))
    a["provenance"].pop("fitted_at_utc")
    b["provenance"].pop("fitted_at_utc")
    assert a == b


def test_the_shipped_calibration_names_the_files_it_was_fitted_on() -> None:
    """The shipped fit's provenance holds the hashes of the runs, the engine settings and the stage
    points it read, and they are the shipped files': a change to one without a refit fails here
    (the refit itself, `dse calibrate`, is test_calibration_is_reproducible's, an e2e test)."""
    import hashlib
    import json

    from dse.paths import MEASURED_RUNS, PUBLISHED_POINTS
    from dse.perf.benchmark_rows import RECIPE_SETTINGS

    prov = json.loads(CALIBRATION_FILE.read_text())["provenance"]

    def sha(path: Path) -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest()

    assert prov["command"] == (
        "dse calibrate --data reference/inferencex_calibration.csv --points reference/published_points.csv "
        "--kernels datasheet"
    )
    assert prov["data_sha256"] == sha(MEASURED_RUNS), "reference/inferencex_calibration.csv changed: refit"
    assert prov["recipe_settings_sha256"] == sha(RECIPE_SETTINGS), "recipe_settings.csv changed: refit"
    assert prov["stage_points_sha256"] == sha(PUBLISHED_POINTS), "published_points.csv changed: refit"
    assert prov["seeds"] == {"latency_replay": [0]} and prov["code_modified"] is False
    assert len(prov["code_commit"]) == 40


@pytest.mark.e2e  # a fit to its evaluation limit and its latency replays (about 21 s under `make test`)
def test_a_malformed_date_or_power_cell_is_said_not_fitted_as_read(
    cli: Cli, tmp_path: Path, two_gpu_runs: Path
) -> None:
    """MI355X runs that measured their power: a date of "yesterday" had been compared as text with
    the date InferenceX's harness began its warm-up (read as after it) and the row fitted; a power
    of "x" was dropped unsaid and one of "inf" fitted. Now the row is skipped naming its line and
    column, and a power that is no measurement is left out of the power fit and said."""
    import json

    rows = [r for r in _rows(two_gpu_runs) if r["hardware"] == "mi355x" and r["avg_power_w"].strip()]
    assert len(rows) >= 6
    rows = rows[:6]
    rows[1]["date"] = "yesterday"
    rows[2]["avg_power_w"], rows[3]["avg_power_w"] = "x", "inf"
    data = _write(tmp_path / "mine.csv", rows)
    out = tmp_path / "f.json"
    res = cli("calibrate", "--data", str(data), "--out", str(out), "--no-cross-validation",
              "--no-points", "--jobs", "1")  # fmt: skip
    assert res.code == 0, res.err
    assert "skipped: mine.csv line 3: date = 'yesterday': must be a date YYYY-MM-DD" in res.out, res.out
    # five runs do not pin the fit's values: it stops at its limit and says so (it had crept on
    # for 400 evaluations, 23 s, saying nothing)
    assert "warning: the fit stopped at its limit of 100 evaluations before converging: 5 runs" in res.err
    for line, cell in ((4, "'x'"), (5, "'inf'")):
        said = f"not a measurement: mine.csv line {line}: avg_power_w = {cell}: must be a measured number > 0"
        assert said in res.out, res.out
    doc = json.loads(out.read_text())
    assert doc["provenance"]["rows_fitted"] == 5 and doc["provenance"]["power"]["rows"] == 3
