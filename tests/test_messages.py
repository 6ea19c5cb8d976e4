"""Each message says what happened, in the words of the interface the user called; machine output
is strict. The cases an adversarial run found (issue "Reliability, round two")."""

from __future__ import annotations

import csv
import json
import math
import os
import stat
import warnings
from pathlib import Path

import pytest
from conftest import Cli

from dse.errors import InputError
from dse.paths import MEASURED_RUNS
from dse.study import Study

DATA = Path(__file__).resolve().parent / "data"


def _strict(text: str) -> object:
    """JSON as a strict reader takes it: NaN and Infinity are not JSON."""

    def refuse(token: str) -> object:
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def test_predict_json_is_strict_with_typed_deployment_values(cli: Cli) -> None:
    res = cli("predict", "--hardware", "b200", "--decode-max-running-requests", "128", "--json")
    assert res.code == 0, res.err
    doc = _strict(res.out)
    assert isinstance(doc, dict)
    dep = doc["deployment"]
    assert dep["decode_tp"] == 8 and dep["conc"] == 64 and dep["isl"] == 1024
    assert dep["disagg"] is False and dep["decode_dp_attention"] is False
    assert dep["decode_max_running_requests"] == 128 and dep["mtp_draft_tokens"] is None
    assert dep["hardware"] == "b200"
    assert all(v is None or not (isinstance(v, float) and math.isnan(v)) for v in doc["prediction"].values())


@pytest.mark.parametrize("as_json", [True, False])
def test_weights_that_do_not_fit_exit_3_with_the_reason_and_a_wider_instance(cli: Cli, as_json: bool) -> None:
    res = cli("predict", "--hardware", "b200", "--tp", "2", "--ep", "2", *(["--json"] if as_json else []))
    assert res.code == 3
    assert res.out == ""  # no table of NaN, no half a JSON document
    assert res.err.strip() == (
        "dse: error: no feasible design: weights-do-not-fit: weights need 335.5 GB per GPU but b200 offers "
        "185.5 GB after the 4% runtime reserve (the weights fit on 4 GPUs: --tp 4 --ep 4)"
    )
    if as_json:
        return
    assert cli("predict", "--hardware", "b200", "--tp", "4", "--ep", "4").code == 0  # the hint holds
    # one H100 widened 8x still needs 84 GB per GPU: no hint
    alone = cli("predict", "--hardware", "h100", "--tp", "1", "--ep", "1", "--conc", "1")
    # in GB as every figure printed (it had said "has 80 GB", the GiB of the datasheet, against 84 GB)
    assert alone.code == 3
    assert alone.err.strip().endswith("h100-sxm offers 82.5 GB after the 4% runtime reserve")


def test_an_empty_sweep_axis_is_refused_naming_it(cli: Cli, tmp_path: Path) -> None:
    spec = tmp_path / "tiny-grid.toml"
    text = (DATA / "tiny-grid.toml").read_text()
    assert "input_tokens = [2000, 8000]" in text
    spec.write_text(text.replace("input_tokens = [2000, 8000]", "input_tokens = []", 1))
    res = cli("study", "run", spec, "--out", tmp_path)
    assert res.code == 2
    assert res.err.strip() == (
        f"dse: error: {spec}: sweep.input_tokens = []: must list at least one value "
        "(leave the axis out not to sweep it)"
    )
    assert not (tmp_path / "tiny-grid").exists()  # nothing ran


def test_a_short_or_long_batch_row_says_so(cli: Cli, tmp_path: Path) -> None:
    with open(MEASURED_RUNS, newline="") as fh:
        rows = list(csv.reader(fh))
    header, row = rows[0], rows[1]
    src = tmp_path / "in.csv"
    with open(src, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerows([header, row[:8], row + ["x", "y"], row])
    res = cli("predict", "--batch", src, "--out", tmp_path / "out.csv")
    assert res.code == 0, res.err
    with open(tmp_path / "out.csv", newline="") as fh:
        errors = [r["pred_error"] for r in csv.DictReader(fh)]
    n = len(header)
    assert (
        errors[0]
        == f"in.csv line 2: has 8 of {n} fields: the row is short ({header[8]} and after are missing)"
    )
    assert errors[1] == f"in.csv line 3: has {n + 2} fields, 2 more than the header's {n}"
    assert errors[2] == ""


def test_the_python_api_names_its_arguments_not_the_flags(tmp_path: Path) -> None:
    """After a run with one objective, the same folder with another objective is refused in the
    words of the API (``out=``), not of the command line (``--out``)."""
    study = Study.load(DATA / "tiny-study.toml")
    study.run(trials=2, out=tmp_path)
    other = study.with_objective("tokens_per_s_per_gpu", direction="maximize")
    with pytest.raises(InputError, match=r"use another out= or storage= for other objectives") as caught:
        other.run(trials=2, out=tmp_path)
    assert "--" not in str(caught.value)
    with pytest.raises(InputError, match=r"^trials = 0: must be at least 1$"):
        study.run(trials=0, out=tmp_path)


def test_a_study_name_the_font_lacks_plots_without_warnings(tmp_path: Path) -> None:
    from dse.study.report_figures import drawable

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a glyph warning fails the test
        title, family = drawable("小研究: 3 feasible trials")
        assert family
        assert title.endswith(": 3 feasible trials")
        # an installed font that covers the name draws it; otherwise its code points stand in
        assert title.startswith("小研究") or title.startswith("U+5C0FU+7814U+7A76")
        assert drawable("deepseek-v3-blackwell") == ("deepseek-v3-blackwell", family)


def test_an_out_file_is_written_through_its_link_and_a_pipe_is_not_replaced(cli: Cli, tmp_path: Path) -> None:
    """`--out` that is a symbolic link writes the file it points at (a link that stayed a link);
    a pipe or a device is refused rather than swapped for a file (as root, /dev/full had been)."""
    with open(MEASURED_RUNS, newline="") as fh:
        rows = list(csv.reader(fh))[:2]
    src = tmp_path / "in.csv"
    with open(src, "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    (tmp_path / "shared").mkdir()
    target, link = tmp_path / "shared" / "real.csv", tmp_path / "link.csv"
    target.write_text("old\n")
    link.symlink_to(target)
    res = cli("predict", "--batch", src, "--out", link)
    assert res.code == 0, res.err
    assert link.is_symlink() and target.read_text().startswith(",".join(rows[0]))
    pipe = tmp_path / "pipe.csv"
    os.mkfifo(pipe)
    res = cli("predict", "--batch", src, "--out", pipe)
    assert res.code == 2 and res.out == ""
    assert res.err.strip() == (
        f"dse: error: dse predict: --out = '{pipe}': cannot be written (a device, pipe or socket, "
        "not a regular file)"
    )
    assert stat.S_ISFIFO(os.stat(pipe).st_mode) and not list(tmp_path.glob(".pipe.csv.*"))


def test_a_table_never_prints_a_figure_in_exponent_form() -> None:
    """9,999.6 tokens/s had printed as 1e+04 beside 9,999 in the next run (`dse simulate`)."""
    from dse.cli.table import format_table

    text = format_table(["out tok/s"], [[9999.6], [9999.4], [12.345678], [123456.7]])
    assert text.split("\n")[2:] == ["   10,000", "    9,999", "    12.35", "  123,457"]


def test_a_study_summary_without_a_feasible_design_names_the_commonest_reason() -> None:
    """Trials with no recorded reason (null) beside others: the summary names the reason the
    others give, where it had tried to print None (a TypeError), as the error line does."""
    from types import SimpleNamespace

    import polars as pl

    from dse.cli.study_cmd import summary

    schema = {"feasible": pl.Boolean, "binding": pl.Utf8}
    t = pl.DataFrame({"feasible": [False] * 3, "binding": [None, None, "tpot: 61 ms > 50 ms"]}, schema=schema)
    said = "no feasible design: tpot: 61 ms > 50 ms (1 of 3 trials)"
    assert summary(SimpleNamespace(trials=t)) == said  # type: ignore[arg-type]
    none = pl.DataFrame({"feasible": [False], "binding": [None]}, schema=schema)
    unsaid = "no feasible design: unknown: no trial recorded why (1 of 1 trials)"
    assert summary(SimpleNamespace(trials=none)) == unsaid  # type: ignore[arg-type]


def test_a_study_without_a_feasible_design_counts_the_reason_it_prints() -> None:
    """The exit-3 line printed one trial's reason with the count of its whole family: "(7 of 10
    trials)" for a unit and a time only 3 trials gave, the 7 being every "no decode unit". It
    prints the family's commonest reason with its own count, and the family's beside it."""
    from types import SimpleNamespace

    import polars as pl

    from dse.cli.study_cmd import summary

    unmet = "TPOT 2 ms cannot be met: at batch 1 a token takes"
    slow = f"no decode unit: gb200-nvl72 16gpu-dpa-ep16: {unmet} 10.6 ms"
    other = f"no decode unit: b200 8gpu-dpa-ep8: {unmet} 8.3 ms"
    said = [
        other,
        slow,
        "ttft: 3 s > 2 s",
        slow,
        other,
        "ttft: 4 s > 2 s",
        slow,
        other,
        "ttft: 5 s > 2 s",
        slow,
    ]
    t = pl.DataFrame({"feasible": [False] * 10, "binding": said})
    head = slow.removeprefix("no decode unit: ")
    want = f"no feasible design: no decode unit: {head} (4 of 10 trials; 7 of 10 gave no decode unit)"
    assert summary(SimpleNamespace(trials=t)) == want  # type: ignore[arg-type]
    alike = pl.DataFrame({"feasible": [False] * 2, "binding": [slow, slow]})
    assert (
        summary(SimpleNamespace(trials=alike))
        == f"no feasible design: no decode unit: {head} (2 of 2 trials)"
    )  # type: ignore[arg-type]


def test_the_help_says_what_a_worker_and_goodput_need(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's --storage has no default (it is required, and a SQLite URL serves workers on one
    machine); goodput takes a --budget, a --power-kw or an --inventory of every --hardware."""
    monkeypatch.setenv("COLUMNS", "400")  # argparse wraps the help at the terminal's width
    worker = " ".join(cli("study", "worker", "--help").out.split())
    assert "--storage STORAGE Optuna storage URL the workers share, required: sqlite:///PATH" in worker
    assert "default: sqlite in the run folder" not in worker
    assert "default: sqlite in the run folder" in cli("study", "run", "--help").out  # a run's own
    missing = cli("worker", DATA / "tiny-study.toml")
    assert missing.code == 2 and missing.err.strip() == (
        "dse: error: dse worker: --storage: is required: workers share a database "
        "(sqlite:///PATH on one machine, postgresql://user@host/db across machines)"
    )
    place = " ".join(cli("place", "--help").out.split())
    assert "goodput (the most traffic the caps allow: --budget, --power-kw, or an --inventory" in place
    assert "--budget BUDGET cap in $/hour (--objective goodput needs it, --power-kw or an" in place
    assert "required by --objective goodput" not in place and "most traffic under --budget" not in place


def test_an_empty_path_flag_is_refused_not_read_as_the_current_folder(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--out "$UNSET"`: an empty path had been the current folder, where `dse simulate` wrote its
    summary, trajectories and plot and `dse study run` its run folder, exit 0. Each flag that names
    a file or folder now refuses it, one line naming the flag, exit 2, nothing written."""
    monkeypatch.chdir(tmp_path)
    tiny = DATA / "tiny-study.toml"
    cases = {
        "simulate --out": "simulate --hardware b200 --rate 5 --ttft 2 --tpot 0.05 --out".split(),
        "study run --out": ["study", "run", tiny, "--trials", "1", "--no-export", "--no-progress", "--out"],
        "predict --trace": ["predict", "--hardware", "b200", "--load", "trace", "--trace"],
        "calibrate --out": ["calibrate", "--no-cross-validation", "--out"],
    }
    for name, argv in cases.items():
        flag = name.split()[-1]
        res = cli(*argv, "")
        assert res.code == 2, (name, res.err)
        assert res.err.endswith(
            f"argument {flag}: must name a file or folder, not be empty (see dse {argv[0]}"
            f"{' run' if argv[0] == 'study' else ''} --help)\n"
        ), res.err
        assert res.err.count("\n") == 1 and list(tmp_path.iterdir()) == [], (name, res.err)


def test_a_sqlite_url_is_the_file_sqlalchemy_opens(cli: Cli, tmp_path: Path) -> None:
    """A `sqlite:///` URL's path is read as SQLAlchemy reads it: `a%20b.db` had been stored in
    `a b.db` but locked, and looked for by `export`, under `a%20b.db` (`study.db: does not exist`),
    and `?mode=ro` had been a lock file of its own beside the one every other process takes on the
    same database (and SQLAlchemy's multi-line warning): a query string is now refused, exit 2."""
    tiny = DATA / "tiny-study.toml"
    url = f"sqlite:///{tmp_path}/new%20dir/a%20b.db"
    ran = cli(
        "study", "run", tiny, "--storage", url, "--out", tmp_path / "out", "--trials", "1", "--no-export"
    )
    assert ran.code == 0, ran.err
    beside = {p.name for p in (tmp_path / "new dir").iterdir()}
    assert {"a b.db", "a b.db.run-lock"} <= beside and all(n.startswith("a b.db") for n in beside), beside
    exported = cli("study", "export", tiny, "--storage", url, "--out", tmp_path / "out")
    assert exported.code == 0, exported.err
    query = f"sqlite:///{tmp_path}/q/w.db?mode=ro"
    res = cli("study", "worker", tiny, "--storage", query, "--trials", "1")
    assert res.code == 2 and res.err.count("\n") == 1, res.err
    assert res.err.startswith("dse: error: --storage: url = 'sqlite:///") and res.err.endswith(
        ": must name the database file alone, without a query string (?mode=ro): dse opens and locks it\n"
    )
    assert not (tmp_path / "q").exists()
