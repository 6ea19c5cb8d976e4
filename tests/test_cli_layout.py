"""One command layout: `dse study ...` holds every study command (top-level aliases stay), every
listing takes ``--json``, ``--help`` shows defaults and accepted values, and "no feasible design"
is exit code 3 with its reason from studies and from `dse place` alike."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
from conftest import Cli

from dse.cli.main import build_parser
from dse.perf.frameworks import ENGINES, FRAMEWORK_ENGINE
from dse.perf.params import load_params

TINY = Path(__file__).resolve().parent / "data" / "tiny-study.toml"


def _parsers(parser: argparse.ArgumentParser, prog: str = "dse") -> dict[str, argparse.ArgumentParser]:
    """Every parser of the command line by its command path. argparse has no public walk over its
    sub-commands, so this reads its actions (a test's look inside, not the engine's)."""
    out = {prog: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out |= _parsers(sub, f"{prog} {name}")
    return out


@pytest.mark.parametrize("command", ["export", "report", "worker"])
def test_study_commands_live_under_study_and_keep_their_aliases(command: str) -> None:
    parser = build_parser()
    canonical = parser.parse_args(["study", command, "tiny", "--out", "x", "--storage", "sqlite:///y"])
    alias = parser.parse_args([command, "tiny", "--out", "x", "--storage", "sqlite:///y"])
    assert canonical.study_command == command and alias.command == command
    assert (canonical.name, canonical.out, canonical.storage) == (alias.name, alias.out, alias.storage)


def test_every_option_has_help_and_shows_its_default() -> None:
    for prog, parser in _parsers(build_parser()).items():
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction) or action.dest == "help":
                continue
            assert action.help, f"{prog} {action.option_strings or action.dest}: no help"
        # the help of each option: its entry in the options list, which starts "  --flag"
        entries = re.split(r"\n(?=  -)", parser.format_help().split("options:", 1)[1])
        for action in parser._actions:
            # (0 == False: "not in (None, False, ...)" had passed every default of 0 unshown)
            shown = action.default is not None and action.default is not False
            if action.option_strings and shown and action.default not in (argparse.SUPPRESS, [], ""):
                flag = action.option_strings[-1]
                entry = next(
                    e for e in entries if e.split() and e.split()[0].rstrip(",") in action.option_strings
                )
                assert "default" in entry, f"{prog} {flag}: default {action.default!r} not shown"
        # an empty default (--think, --inventory: none given) is not shown as "(default: )"
        assert not re.search(r"\(default:\s*\)", parser.format_help()), prog


def test_accepted_values_are_listed() -> None:
    helps = {prog: p.format_help() for prog, p in _parsers(build_parser()).items()}
    predict = " ".join(helps["dse predict"].split())
    assert all(f in predict for f in FRAMEWORK_ENGINE)
    place = " ".join(helps["dse place"].split())
    assert all(e in place for e in ENGINES)
    assert "{aggregated,disaggregated,afd,four-stage,auto}" in place
    assert set(ENGINES) == set(load_params().engines)  # the help lists what the engine accepts


@pytest.mark.parametrize("argv", [["catalog", "list"], ["catalog", "list", "models"], ["study", "list"]])
def test_every_listing_takes_json(cli: Cli, argv: list[str]) -> None:
    code, out, _ = cli(*argv, "--json")
    assert code == 0
    doc = json.loads(out)
    if argv == ["catalog", "list"]:
        assert set(doc) == {"hardware", "models"} and any(h["id"] == "b200" for h in doc["hardware"])
    elif argv[0] == "study":
        assert {"study", "model", "hardware", "trials", "objectives"} <= set(doc[0])
        assert "deepseek-v3-blackwell" in {s["study"] for s in doc}
    else:
        assert "deepseek-v3" in {m["id"] for m in doc}


def test_place_with_no_feasible_design_exits_3_with_the_reason(cli: Cli) -> None:
    code, _, err = cli("place", "--hardware", "b200", "--rate", "5", "--ttft", "0.001", "--tpot", "0.05",
        "--no-shadow-prices", "--topology", "aggregated",
    )  # fmt: skip
    assert code == 3
    line = err.strip().splitlines()[-1]
    assert line.startswith("dse: error: no feasible design: ") and any(c.isdigit() for c in line)


def test_a_study_with_no_feasible_design_exits_3_with_the_reason(cli: Cli, tmp_path: Path) -> None:
    spec = tmp_path / "tiny-study.toml"
    spec.write_text(TINY.read_text().replace("tpot_s = 0.06", "tpot_s = 0.0001"))  # no GPU steps that fast
    code, out, err = cli("study", "run", str(spec), "--out", str(tmp_path), "--trials", "3")
    assert code == 3
    line = err.strip().splitlines()[-1]
    assert line.startswith("dse: error: no feasible design: ") and "of 3 trials" in line
    assert (tmp_path / "tiny-study" / "exports").is_dir()  # the tables and report are written first
    assert "wrote" in out


def test_a_study_over_its_gpu_cap_says_by_how_much_alike_on_both_streams(cli: Cli, tmp_path: Path) -> None:
    """A cap of 4 GPUs no design meets: the reason has its numbers (it had said a bare "gpus"),
    and the run's summary says what the error line says (they had named different reasons)."""
    spec = tmp_path / "tiny-study.toml"
    spec.write_text(TINY.read_text() + "\n[limits]\nmax_gpus = 4\n")
    code, out, err = cli("study", "run", str(spec), "--out", str(tmp_path), "--trials", "3", "--no-progress")
    assert code == 3
    line = err.strip().splitlines()[-1]
    # the count is of the GPUs printed; where trials took other GPUs, the constraint's own beside it
    said = r"dse: error: no feasible design: gpus: \d+ GPUs against a cap of 4 "
    said += r"\((3 of 3 trials|[12] of 3 trials; 3 of 3 gave gpus)\)"
    assert re.fullmatch(said, line), line
    assert line.removeprefix("dse: error: ") in out.splitlines()


def test_a_study_of_hardware_without_a_price_fails_before_its_folder(cli: Cli, tmp_path: Path) -> None:
    """H800 has no own_hyperscaler price: a study that prices its designs says so in one line, in
    `study show` too, and `study run` leaves no folder (it had failed in its first trial, leaving
    the study file, its lock and its spec). Counting GPUs, it runs."""
    spec = tmp_path / "tiny-study.toml"
    spec.write_text(
        TINY.read_text().replace('hardware = ["b200", "h200-sxm"]', 'hardware = ["b200", "h800-sxm"]')
    )
    for command in (("study", "show", str(spec)), ("study", "run", str(spec), "--out", str(tmp_path / "o"))):
        code, _, err = cli(*command)
        said = "hardware[1] = 'h800-sxm': has no own_hyperscaler price in the catalog; choose another"
        assert code == 2 and err.strip().endswith(f"{said} price_tier or count GPUs"), err
    assert not (tmp_path / "o").exists()
    counted = spec.read_text()
    spec.write_text(counted + '\n[objectives]\nnames = ["gpus"]\n')
    assert cli("study", "show", str(spec))[0] == 0
    # counting GPUs first and pricing them after still needs the price: the price-less GPU's
    # designs had been the best design, without a cost, and on no front of the two
    spec.write_text(counted + '\n[objectives]\nnames = ["gpus", "usd_per_million_tokens"]\n')
    code, _, err = cli("study", "show", str(spec))
    assert code == 2 and "hardware[1] = 'h800-sxm': has no own_hyperscaler price" in err, err


def test_python_m_dse_is_the_dse_command() -> None:
    """``python -m dse`` had no ``__main__``: "No module named dse.__main__". It runs the same
    command line, exit codes included."""
    import subprocess
    import sys

    ok = subprocess.run([sys.executable, "-m", "dse", "--version"], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.startswith("dse ")
    argv = [sys.executable, "-m", "dse", "predict", "--hardware", "b200", "--conc", "0"]
    bad = subprocess.run(argv, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "--conc" in bad.stderr


def test_study_show_checks_as_a_run_does_and_names_hardware_by_its_ids(cli: Cli, tmp_path: Path) -> None:
    """`dse study show` printed an alias as written (and one hardware twice, by its alias and its
    id) and took a shape no hardware of the study runs, which `study run` then refused: it now
    checks the file as a run does and prints the hardware as the run stores it."""
    spec = tmp_path / "tiny-study.toml"
    listed = 'hardware = ["b200", "h200", "h200-sxm"]'
    aliased = TINY.read_text().replace('hardware = ["b200", "h200-sxm"]', listed)
    spec.write_text(aliased)
    code, out, err = cli("study", "show", str(spec))
    assert code == 0, err
    assert json.loads(out)["hardware"] == ["b200", "h200-sxm"]
    unrunnable = '"8gpu-dpa-ep8", "8gpu-tp8-ep16"]'
    spec.write_text(aliased.replace('"8gpu-dpa-ep8", "16gpu-dpa-ep16"]', unrunnable, 1))
    for command in (("study", "show", str(spec)), ("study", "run", str(spec), "--out", str(tmp_path / "o"))):
        code, _, err = cli(*command)
        assert code == 2 and "8gpu-tp8-ep16" in err and err.strip().count("\n") == 0, err


def test_export_and_report_of_a_study_none_of_whose_trials_is_feasible(cli: Cli, tmp_path: Path) -> None:
    """Every trial infeasible (TPOT 0.1 ms): `run` exits 3 with the reason, its figures included (it
    had read "TPOT 0.1 ms cannot be met even at batch 1"); `export` and `report` still write readable
    tables and a report that says no design met the targets, exit 0, and now say so in a note on
    stderr (they had printed their paths alone)."""
    import polars as pl

    spec = tmp_path / "tiny-study.toml"
    spec.write_text(TINY.read_text().replace("tpot_s = 0.06", "tpot_s = 0.0001"))
    ran = cli("study", "run", str(spec), "--out", str(tmp_path), "--trials", "3", "--no-export")
    assert ran.code == 3
    reason = re.search(r"TPOT 0\.1 ms cannot be met: at batch 1 a token takes [\d.]+ ms", ran.err)
    assert reason is not None, ran.err
    note = ran.err.strip().replace("dse: error: ", "dse: note: tiny-study: ")
    exported = cli("study", "export", str(spec), "--out", str(tmp_path))
    assert exported.code == 0 and exported.err.strip() == note, exported.err
    trials = pl.read_parquet(
        tmp_path / "tiny-study" / "exports" / "trials" / "study=tiny-study" / "part-0.parquet"
    )
    assert trials.height == 3 and not trials["feasible"].any()
    assert trials["binding"].str.contains("at batch 1 a token takes").any()
    for table in ("pareto", "placements", "kv_tiers", "sim_timeseries"):
        assert pl.read_parquet(
            tmp_path / "tiny-study" / "exports" / table / "study=tiny-study" / "part-0.parquet"
        ).is_empty()
    reported = cli("study", "report", str(spec), "--out", str(tmp_path))
    assert reported.code == 0 and reported.err.strip() == note, reported.err
    text = (tmp_path / "tiny-study" / "report" / "report.md").read_text()
    assert "0 feasible, 3 infeasible" in text and "No feasible designs." in text
