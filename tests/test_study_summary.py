"""What `dse study run` prints after its trials (the best designs and the best one read out),
`dse study list`, and the read-only commands on a study run from Python with an objective
function."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import TINY, Cli, Result, run_dse

from dse.cli.study_cmd import running_per_instance
from dse.study import Study
from dse.study.spec import load_study, study_files

# one grid point whose target (200 ms) is not the study's own (50 ms); its cheapest design is two
# aggregated H200 pools at different batch caps, taking 1.9 and 8.1 of the 10 requests/s; energy
# is priced
TPOT_GRID = """\
name = "tpot-grid"
model = "deepseek-v3"
hardware = ["h200-sxm"]
seed = 7

[workload]
requests_per_s = 10.0
input_tokens = 4000.0
output_tokens = 1000.0

[slo]
ttft_s = 2.0
tpot_s = 0.05

[sweep]
tpot_s = [0.2]

[simulate]
horizon_s = 600.0
warmup_s = 120.0
dt_s = 2.0

[energy]
usd_per_kwh = 0.5
pue = 1.3
"""


@pytest.fixture(scope="module")
def tpot_grid(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    """`dse study run tpot-grid.toml`: what it printed, and its run folder."""
    folder = tmp_path_factory.mktemp("tpot-grid")
    path = folder / "tpot-grid.toml"
    path.write_text(TPOT_GRID)
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("DSE_CATALOG_DIR", raising=False)
        mp.delenv("DSE_CALIBRATION", raising=False)
        ran = run_dse("study", "run", path, "--out", folder / "runs")
    assert ran.code == 0, ran.err
    return ran, folder / "runs" / "tpot-grid"


def _number(cell: str) -> float:
    return float(cell.replace(",", "").replace("$", ""))


def _pools(out: str) -> list[dict[str, str]]:
    """The pool rows of the best design's table, by header."""
    lines = out.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("pool "))
    heads = re.split(r"\s{2,}", lines[start].strip())
    rows = []
    for line in lines[start + 2 :]:
        if not line.strip():
            break
        rows.append(dict(zip(heads, re.split(r"\s{2,}", line.strip()), strict=True)))
    return rows


def _best(folder: Path) -> dict[str, Any]:
    trials = pl.read_parquet(folder / "exports" / "trials" / "*" / "*.parquet")
    best = trials.filter(pl.col("feasible")).sort("usd_per_million_tokens").row(0, named=True)
    return dict(best)


def test_a_grid_points_best_design_is_held_to_the_points_own_targets(tpot_grid: tuple[Result, Path]) -> None:
    ran, folder = tpot_grid
    best = _best(folder)
    assert best["x_tpot_s"] == pytest.approx(0.2)
    verdict = next(x for x in ran.out.splitlines() if x.startswith("simulated "))
    assert f"TPOT mean {1e3 * best['tpot_mean_s']:.3g} ms against 200 ms;" in verdict  # not the base 50 ms
    assert "against 2 s" in verdict  # the TTFT target, not swept: the study's own
    report = (folder / "report" / "report.md").read_text()
    assert "- **Targets:** TTFT at p50 <= 2 s, TPOT mean <= 200 ms by grid point\n" in report


def test_the_batch_each_pool_runs_splits_the_sequences_in_flight(tpot_grid: tuple[Result, Path]) -> None:
    """Two aggregated pools: the sequences decoding at once (Little's law) are split by the
    requests each is sent, not given whole to each."""
    ran, folder = tpot_grid
    best = _best(folder)
    pools = _pools(ran.out)
    assert [p["pool"] for p in pools] == ["mixed", "mixed"]  # the case this test is about
    in_flight = 10.0 * 1000.0 * best["tpot_mean_s"]
    running = [_number(p["batch run"]) * _number(p["inst"]) for p in pools]
    assert sum(running) == pytest.approx(in_flight, rel=2e-3)
    for p, n in zip(pools, running, strict=True):
        assert n / in_flight == pytest.approx(_number(p["req/s"]) / 10.0, rel=2e-3)
        assert _number(p["batch run"]) <= _number(p["batch cap"])


def test_the_hourly_cost_shows_the_energy_the_cost_per_token_holds(tpot_grid: tuple[Result, Path]) -> None:
    ran, folder = tpot_grid
    best = _best(folder)
    line = next(x for x in ran.out.splitlines() if x.startswith("best design"))
    m = re.search(
        r"\$([\d,.]+)/hour \(own_hyperscaler\) \+ \$([\d,.]+)/hour of energy, \$([\d.]+) per million", line
    )
    assert m is not None, line
    gpus, energy, per_m = (_number(g) for g in m.groups())
    assert energy == pytest.approx(best["energy_usd_per_hour"], abs=0.005) and energy > 0
    tokens_per_hour = best["tokens_per_s_per_gpu"] * best["gpus"] * 3600 / 1e6  # millions
    assert (gpus + energy) / tokens_per_hour == pytest.approx(per_m, rel=1e-3)


def test_the_reports_metrics_are_named_as_the_exported_columns(tpot_grid: tuple[Result, Path]) -> None:
    _, folder = tpot_grid
    report = (folder / "report" / "report.md").read_text()
    metrics = report[report.index("### Metrics") :].split("\n### ")[0]
    table = [ln for ln in metrics.splitlines() if ln.startswith("|")]
    names = {ln.split("|")[1].strip() for ln in table[2:]}
    columns = set(pl.read_parquet(folder / "exports" / "trials" / "*" / "*.parquet").columns)
    assert {"ttft_mean_s", "tpot_mean_s", "e2e_mean_s", "decode_batch_sequences"} <= names
    assert table[0] == "| column | value | unit | what |" and names <= columns
    assert not {"ttft_s", "tpot_s", "e2e_s", "decode_batch"} & names


def _pool(role: str, instances: int, requests: float, out_tok: float) -> dict[str, Any]:
    return {"role": role, "instances": instances, "requests_per_s": requests, "output_tokens_per_s": out_tok}


def test_decode_pools_share_the_sequences_by_the_output_they_serve() -> None:
    # disaggregated, decode on two hardware: by decode capacity (the placement sends them no requests)
    pools = [
        _pool("prefill", 1, 40.0, 0.0),
        _pool("decode", 1, 0.0, 33264.0),
        _pool("decode", 2, 0.0, 6547.0),
    ]
    run = running_per_instance(pools, 1064.0)
    assert run[0] is None
    assert run[1] == pytest.approx(1064.0 * 33264.0 / 39811.0)
    assert run[2] == pytest.approx(1064.0 * 6547.0 / 39811.0 / 2)
    # aggregated: each pool decodes the requests it is sent
    mixed = [_pool("mixed", 1, 2.0, 18000.0), _pool("mixed", 3, 8.0, 8000.0)]
    assert running_per_instance(mixed, 500.0) == pytest.approx([100.0, 400.0 / 3])
    # attention-FFN: the attention pools hold the sequences, and every one passes an FFN pool
    afd = [_pool("prefill", 2, 40.0, 0.0), _pool("attention", 4, 0.0, 30000.0), _pool("ffn", 2, 0.0, 31000.0)]
    assert running_per_instance(afd, 800.0) == pytest.approx([None, 200.0, 400.0])
    # one decode pool: all of them, per instance (what it always was)
    assert running_per_instance([_pool("decode", 2, 0.0, 5.0)], 100.0) == [50.0]


def test_study_list_shows_the_trials_a_run_does(cli: Cli) -> None:
    """A grid study runs every point, whatever its file's `trials`."""
    listed = cli("study", "list", "--json")
    assert listed.code == 0, listed.err
    budgets = {s["study"]: s["trials"] for s in json.loads(listed.out)}
    for name, path in study_files().items():
        spec = load_study(path)
        assert budgets[name] == (spec.sweep.size() if spec.is_grid else spec.trials), name
    assert budgets["bandwidth-vs-capacity"] == 360
    table = cli("study", "list")
    row = next(x for x in table.out.splitlines() if x.startswith("stage-memory-2027 "))
    assert row.split()[3] == "96"


def test_a_study_run_with_an_objective_function_is_read_by_the_cli(tmp_path: Path, cli: Cli) -> None:
    """Export, report and deploy read the objectives the study stored; a run still refuses them."""
    study = Study.load(TINY).with_objective(
        "usd_per_user_speed", lambda m: m["usd_per_hour"] / m["tokens_per_s_per_user"]
    )
    res = study.run(trials=3, out=tmp_path)
    best = res.best_trial()
    assert best is not None
    # what the commands below read with, from Python too: the file's objectives give way to the stored ones
    read = Study.load(TINY).with_stored_objectives(out=tmp_path)
    stored = [(o.name, o.direction, o.fn) for o in read.objectives]
    assert stored == [("usd_per_user_speed", "minimize", None)]  # read without the function
    assert read.results(out=tmp_path).best_trial() == best

    exported = cli("study", "export", TINY, "--out", tmp_path)
    assert exported.code == 0, exported.err
    trials = pl.read_parquet(tmp_path / "tiny-study" / "exports" / "trials" / "*" / "*.parquet")
    assert "objective_usd_per_user_speed" in trials.columns
    assert "objective_usd_per_million_tokens" not in trials.columns

    reported = cli("report", TINY, "--out", tmp_path)
    assert reported.code == 0, reported.err
    md = (tmp_path / "tiny-study" / "report" / "report.md").read_text()
    assert "- **Objectives:** usd_per_user_speed (minimize)" in md
    said = f"Trial {best}, the feasible design best by usd_per_user_speed (minimize)"
    assert f"## Best design detail\n\n{said}" in md

    deployed = cli("deploy", TINY, "--out", tmp_path, "--engine", "sglang")
    assert deployed.code == 0, deployed.err
    # a run would need the function, which the study file does not have
    ran = cli("study", "run", TINY, "--out", tmp_path, "--trials", "4", "--no-export")
    assert ran.code == 2 and "the stored study optimises ['usd_per_user_speed']" in ran.err


def test_a_study_with_nothing_stored_reads_with_its_own_objectives(tmp_path: Path) -> None:
    """Nothing stored: the study as it is, and no database created by asking (results says there
    is no run)."""
    study = Study.load(TINY)
    assert study.with_stored_objectives(out=tmp_path) is study
    assert not (tmp_path / "tiny-study").exists()


def test_a_summary_at_p99_says_its_ttft_once(tmp_path: Path, cli: Cli) -> None:
    """A study whose target is at p99 prints its TTFT p99 once, not again in brackets as a study at
    another percentile does."""
    text = (Path(__file__).resolve().parent / "data" / "tiny-study.toml").read_text()
    for q, twice in ((99.0, False), (90.0, True)):
        study = tmp_path / f"p{q:g}" / "tiny-study.toml"
        study.parent.mkdir()
        study.write_text(text.replace("percentile = 90.0", f"percentile = {q}"))
        ran = cli("study", "run", study, "--out", study.parent, "--trials", "3", "--no-export")
        assert ran.code == 0, ran.err
        verdict = next(x for x in ran.out.splitlines() if x.startswith("simulated "))
        assert f"TTFT p{q:g} " in verdict and ("(p99 " in verdict) == twice, verdict


def test_study_show_takes_json_as_every_listing_command_does(cli: Cli) -> None:
    """The README: every command that lists or predicts takes --json; `study show` prints JSON
    with it or without it (it had refused the flag)."""
    plain = cli("study", "show", "deepseek-v3-blackwell")
    flagged = cli("study", "show", "deepseek-v3-blackwell", "--json")
    assert plain.code == 0 and flagged.code == 0, flagged.err
    assert json.loads(flagged.out) == json.loads(plain.out)
    assert json.loads(plain.out)["name"] == "deepseek-v3-blackwell"


def test_a_run_of_a_study_file_named_by_its_folder_says_to_name_the_file(
    cli: Cli, tiny_cli_run: Result, tmp_path: Path
) -> None:
    """`dse study export tiny-study --out RUNS`, for a study run from its own file, said "unknown
    study id" and listed the shipped studies, though RUNS/tiny-study/spec.json was there: the
    line now says what the folder is and how to name the study, exit 2."""
    assert tiny_cli_run.code == 0, tiny_cli_run.err
    for command in ("export", "report", "deploy"):
        engine = ("--engine", "dynamo") if command == "deploy" else ()
        proc = cli("study", command, "tiny-study", "--out", tmp_path, *engine)
        assert proc.code == 2, proc.err
        line = proc.err.strip()
        assert "\n" not in line and "is not a shipped study" in line, line
        assert f"name the file, as the run did (dse study {command} path/to/tiny-study.toml --out" in line
    alias = cli("report", "tiny-study", "--out", tmp_path)  # the top-level alias: a traceback, once
    assert alias.code == 2, alias.err
    assert "as the run did (dse report path/to/tiny-study.toml --out" in alias.err, alias.err
    elsewhere = cli("study", "export", "tiny-study", "--out", tmp_path / "none")
    assert elsewhere.code == 2 and "unknown study id" in elsewhere.err  # no run there: the ids, as before


IDLE = """\
name = "idle"
model = "deepseek-v3"
hardware = ["gb200-nvl72"]
seed = 3
trials = 2
[workload]
requests_per_s = 10.0
input_tokens = 2000.0
output_tokens = 500.0
[slo]
ttft_s = 2.0
tpot_s = 0.05
[search]
topologies = ["aggregated"]
[search.prefill]
shapes = ["8gpu-dpa-ep8"]
chunk_tokens = [8192]
[search.decode]
shapes = ["64gpu-dpa-ep64"]
max_batch = [16, 4096]
"""


def test_the_best_design_says_its_objective_and_the_gpus_its_pools_leave_idle(
    cli: Cli, tmp_path: Path
) -> None:
    """One 64-GPU instance in a 72-GPU rack: the line had said 72 GPUs over a pool of 64 and never
    what the design is best by (decode-variability's best by TTFT p99 is not its cheapest)."""
    spec = tmp_path / "idle.toml"
    spec.write_text(IDLE)
    run = cli("study", "run", spec, "--out", tmp_path, "--no-export")
    assert run.code == 0, run.err
    line = next(x for x in run.out.splitlines() if x.startswith("best design "))
    assert re.match(
        r"best design by usd_per_million_tokens \(minimize\), trial \d: aggregated, 72 GPUs "
        r"\(8 of them idle in the nodes or racks bought\), \$",
        line,
    ), line
    pools = re.findall(r"^mixed\s+gb200-nvl72\s+64gpu-dpa-ep64\s+1\s+64\s", run.out, flags=re.M)
    assert len(pools) == 1, run.out
