"""The examples of README.md and docs/*.md run, and the output they show is what the code prints.

Each page runs in its own temporary working directory, its blocks in page order:

- **Shell blocks** (```sh, ```bash, ```shell, ```console): every line that starts with ``dse `` or
  ``$ dse `` (a line ending in ``\\`` continues on the next) runs in-process through
  ``dse.cli.main.main(argv)``, argv from ``shlex.split`` with the comment removed. It must exit 0,
  or N where the line ends in the comment ``# exits N`` (a block that shows a failure on purpose).
  A trailing ``> FILE`` writes the command's standard output to FILE, as the shell would. Other
  lines (``make run``, ``python ...``) are not run.
- **Budgets**: the test runs every ``dse study run`` and ``dse study worker`` line (and the
  ``dse worker`` alias) with ``--trials`` at most 20: it lowers a larger value and appends
  ``--trials 20`` to a line without one. So a page may show a full-budget command; the output
  shown under a line the test changed is compared by the end-to-end test only (the headline).
- **Output**: in a ```console block, the lines after a ``$ dse ...`` line, up to the next line that
  starts with ``$``, are what it prints (standard output, then standard error, as a terminal shows
  them). They are compared line by line, blank lines left out and runs of spaces taken as one (a
  table's column widths follow its values); ``…`` in the shown text stands for one word that
  varies from run to run (seconds, solver milliseconds) and matches anything without a space.
- **Files**: a block right after an ``<!-- file: PATH -->`` comment is written to PATH (a study
  file, a CSV) before the commands after it run.
- **Python**: ```python blocks run with ``exec``, in order, in one namespace per page.

The headline study at its full budget (the command ``make run`` runs, read from the Makefile) is
the end-to-end test: it must print what the README shows (its design is deterministic for the
study's seed; only the seconds vary) and write the files the README lists.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from dse.cli.main import main

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
SHELLS = {"sh", "bash", "shell", "console"}
TRIALS_CAP = 20
README_MAX_LINES = 300
FILE_MARK = re.compile(r"^<!--\s*file:\s*(\S+)\s*-->\s*$")
EXITS = re.compile(r"#\s*exits\s+(\d+)\s*$")
VARIES = "…"


@dataclass
class Command:
    line: str  # as the page shows it, without the `$ `
    where: str  # page:line
    expect_rc: int = 0
    shown: list[str] = field(default_factory=list)  # the output the page shows (console blocks)


@dataclass
class Block:
    kind: str  # "commands", "python" or "file"
    where: str
    text: str = ""
    path: str = ""
    commands: list[Command] = field(default_factory=list)


def parse(page: Path) -> list[Block]:
    """The runnable blocks of a Markdown page, in order."""
    lines = page.read_text(encoding="utf-8").splitlines()
    rel = page.relative_to(REPO)
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        lang, start = m.group(1), i + 1
        end = start
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = lines[start:end]
        where = f"{rel}:{start}"
        mark = FILE_MARK.match(lines[i - 1]) if i > 0 else None
        if mark:
            blocks.append(Block("file", where, text="\n".join(body) + "\n", path=mark.group(1)))
        elif lang == "python":
            blocks.append(Block("python", where, text="\n".join(body) + "\n"))
        elif lang in SHELLS:
            blocks.append(Block("commands", where, commands=_commands(body, lang == "console", rel, start)))
        i = end + 1
    return blocks


def _commands(body: list[str], console: bool, rel: Path, start: int) -> list[Command]:
    out: list[Command] = []
    current: Command | None = None
    n = 0
    while n < len(body):
        raw, lineno = body[n], start + n + 1
        while raw.rstrip().endswith("\\") and n + 1 < len(body):
            n += 1
            raw = raw.rstrip()[:-1] + " " + body[n].strip()
        n += 1
        text = raw.strip()
        prompt = text.startswith("$ ")
        cmd = text[2:].strip() if prompt else text
        if cmd.startswith("dse ") and (prompt or not console):
            m = EXITS.search(cmd)
            current = Command(cmd, f"{rel}:{lineno}", int(m.group(1)) if m else 0)
            out.append(current)
        elif prompt:
            current = None  # a command the test does not run: its output is not ours
        elif console and current is not None:
            current.shown.append(raw)
    return out


def capped(argv: list[str]) -> tuple[list[str], bool]:
    """``argv`` with a study's budget at most TRIALS_CAP; True if that changed it."""
    runs = argv[:2] in (["study", "run"], ["study", "worker"]) or argv[:1] == ["worker"]
    if not runs:
        return argv, False
    if "--trials" in argv:
        k = argv.index("--trials") + 1
        if int(argv[k]) <= TRIALS_CAP:
            return argv, False
        return [*argv[:k], str(TRIALS_CAP), *argv[k + 1 :]], True
    if _budget(argv[2] if argv[0] == "study" else argv[1]) <= TRIALS_CAP:
        return argv, False  # a small grid study: its budget is its grid, which --trials may not exceed
    return [*argv, "--trials", str(TRIALS_CAP)], True


def _budget(study: str) -> int:
    from dse.study.spec import load_study

    return load_study(study).budget()


class _Tee(io.StringIO):
    def __init__(self, both: io.StringIO) -> None:
        super().__init__()
        self.both = both

    def write(self, s: str) -> int:
        self.both.write(s)
        return super().write(s)


def run_dse(argv: list[str]) -> tuple[int, str, str]:
    """Exit code, standard output, and both streams as a terminal shows them."""
    both = io.StringIO()
    out, err = _Tee(both), _Tee(both)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse: --help, a bad flag
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return rc, out.getvalue(), both.getvalue()


def _argv(cmd: Command) -> tuple[list[str], str | None]:
    argv = shlex.split(cmd.line, comments=True)
    assert argv[0] == "dse"
    argv = argv[1:]
    target = None
    if ">" in argv:
        k = argv.index(">")
        assert k == len(argv) - 2, f"{cmd.where}: only a trailing `> FILE` is understood"
        target, argv = argv[k + 1], argv[:k]
    if argv[:1] == ["calibrate"]:  # without --out it would rewrite the shipped dse/perf/calibration.json
        assert "--out" in argv, f"{cmd.where}: a documented `dse calibrate` must write elsewhere (--out)"
    return argv, target


def _pattern(shown: str) -> re.Pattern[str]:
    words = shown.split()
    parts = [r"\S+" if w == VARIES else re.escape(w).replace(re.escape(VARIES), r"\S+") for w in words]
    return re.compile(r"\s+".join(parts))


def matches(shown: list[str], printed: str) -> str | None:
    """None when ``printed`` is what ``shown`` shows; otherwise what differs."""
    want = [s.strip() for s in shown if s.strip()]
    got = [s.strip() for s in printed.splitlines() if s.strip()]
    for k, (w, g) in enumerate(zip(want, got, strict=False)):
        if not _pattern(w).fullmatch(g):
            return f"line {k + 1}:\n  shown:   {w}\n  printed: {g}"
    if len(want) != len(got):
        return f"shown {len(want)} lines, printed {len(got)}:\n" + "\n".join(got)
    return None


def run_page(page: Path, skip: str = "") -> list[str]:
    """Runs a page's blocks in the current directory; returns the commands it ran. A ``skip``
    command that shows output is left to the end-to-end test."""
    ran: list[str] = []
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    for block in parse(page):
        if block.kind == "file":
            path = Path(block.path)
            assert not path.is_absolute() and ".." not in path.parts, block.where
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.text, encoding="utf-8")
        elif block.kind == "python":
            exec(compile(block.text, block.where, "exec"), namespace)  # noqa: S102 - our own docs
        else:
            for cmd in block.commands:
                if cmd.line == skip and cmd.shown:
                    continue
                argv, target = _argv(cmd)
                argv, changed = capped(argv)
                rc, out, both = run_dse(argv)
                assert rc == cmd.expect_rc, (
                    f"{cmd.where}: `{cmd.line}` exited {rc}, not {cmd.expect_rc}:\n{both}"
                )
                if target is not None:
                    Path(target).write_text(out, encoding="utf-8")
                if cmd.shown and not changed:
                    diff = matches(cmd.shown, both)
                    assert diff is None, (
                        f"{cmd.where}: `{cmd.line}` no longer prints what the page shows, {diff}"
                    )
                ran.append(cmd.line)
    return ran


def make_run_command() -> str:
    """The command of the Makefile's ``run`` target, as a page writes it (``dse ...``)."""
    lines = (REPO / "Makefile").read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("run:"))
    recipe = lines[k + 1].strip()
    assert recipe.startswith("$(VENV)/bin/dse "), recipe
    return recipe.removeprefix("$(VENV)/bin/")


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DSE_CATALOG_DIR", raising=False)
    return tmp_path


# about 25 s, 10 s and 45 s (the README's `dse calibrate`, 37 s): run beside the quick tests, the
# longer group (with the README there too the quick group was about 70 s the longer, 2026-12-05)
LONG_PAGES = {REPO / "docs" / "cli.md", REPO / "docs" / "studies.md", README}


@pytest.mark.parametrize(
    "page",
    [pytest.param(p, marks=pytest.mark.e2e) if p in LONG_PAGES else p for p in PAGES],
    ids=[str(p.relative_to(REPO)) for p in PAGES],
)
def test_the_examples_of_each_page_run(page: Path, workdir: Path) -> None:
    run_page(page, skip=make_run_command())


def test_the_pages_have_examples_and_the_readme_stays_short() -> None:
    commands = {p.name: [c for b in parse(p) if b.kind == "commands" for c in b.commands] for p in PAGES}
    assert len(commands["README.md"]) >= 10
    for name in ("accuracy.md", "benchmarks.md", "studies.md", "schema.md"):
        assert (REPO / "docs" / name).is_file(), name
    assert len(README.read_text().splitlines()) <= README_MAX_LINES
    readme = [c.line for c in commands["README.md"]]
    for command in ("catalog", "predict", "calibrate", "place", "simulate", "study list", "study show",
                    "study run", "study export", "study report", "study worker"):  # fmt: skip
        assert any(line.startswith(f"dse {command} ") or line == f"dse {command}" for line in readme), command


LINK = re.compile(r"\]\(([^)\s]*)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings."""
    heads = [line.lstrip("#").strip() for line in page.read_text().splitlines() if line.startswith("#")]
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def test_links_between_the_pages_lead_somewhere() -> None:
    broken = []
    for page in [*PAGES, REPO / "FINDINGS.md", REPO / "benchmarks" / "ACCURACY_LOG.md"]:
        for target in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in _anchors(dest)):
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert broken == []


SPAN = re.compile(r"`([^`\n]+)`")
REPO_PATH = re.compile(
    r"(?<![\w./-])((?:dse|formulations|tests|benchmarks|studies|reference|docs|hardware_catalog|model_catalog)"
    r"/[\w./-]*\w)"
)


def test_the_files_the_pages_name_exist() -> None:
    """A repository path a page names in backticks (`python benchmarks/findings.py`) is a file or
    folder of the checkout, from the repository's root or the page's folder (a placeholder such as
    `studies/NAME.toml` aside): reference/README.md named `dse/perf/published.py` after the module
    had moved to dse/calibration/. A path .gitignore lists (`benchmarks/.aic-venv`) is made by a
    command; benchmarks/ACCURACY_LOG.md is a log of what was, and is left out."""
    made = {line.strip().strip("/") for line in (REPO / ".gitignore").read_text().splitlines()}
    missing = []
    for page in [*PAGES, REPO / "FINDINGS.md", REPO / "reference" / "README.md"]:
        spans = SPAN.findall(page.read_text(encoding="utf-8"))
        for path in (p for span in spans for p in REPO_PATH.findall(span)):
            if path.rstrip("/") in made or "NAME" in path:
                continue
            if not any((base / path).exists() for base in (REPO, page.parent)):
                missing.append(f"{page.relative_to(REPO)}: {path}")
    assert missing == []


def test_the_fitted_figures_the_pages_quote_are_the_shipped_calibration_s() -> None:
    """Figures quoted from the fit move with each refit: engine.md had the collective latency at
    0.72 us (0.76 shipped) and the aggregated prefill factor at 0.8 (0.75), catalogs.md NVLink at
    11% of its rate (10%), each the value of a refit some sessions before."""
    from dse.perf.params import load_params

    p = load_params()
    engine = (REPO / "docs" / "engine.md").read_text(encoding="utf-8")
    catalogs = (REPO / "docs" / "catalogs.md").read_text(encoding="utf-8")
    assert f"collective latency once per peer, {p.collective_latency_us:.2f} us)" in engine
    assert f"aggregated prefill factor ({p.latency.agg_prefill_factor:g})" in engine
    assert f"NVLink at {p.link_eff:.0%} of its datasheet rate" in catalogs


def test_the_make_targets_are_documented_as_the_makefile_has_them() -> None:
    """Each target of the Makefile's .PHONY is shown as `make TARGET` in the README or
    docs/development.md (`make clean` was not), and development.md's line for `make lint` names each
    tool the target runs (it said "ruff and mypy"; the target runs lint-imports too)."""
    makefile = (REPO / "Makefile").read_text().splitlines()
    phony = next(line for line in makefile if line.startswith(".PHONY:")).split()[1:]
    dev = (REPO / "docs" / "development.md").read_text(encoding="utf-8")
    shown = set(re.findall(r"^make ([\w-]+)", README.read_text() + dev, flags=re.M))
    assert sorted(set(phony) - shown) == []
    k = makefile.index("lint: $(STAMP)")
    tools = []
    while k + 1 < len(makefile) and makefile[k + 1].startswith("\t"):
        k += 1
        tools.append(makefile[k].split()[0].rsplit("/", 1)[-1])
    line = next(x for x in dev.splitlines() if x.startswith("make lint"))
    assert tools and [t for t in tools if t not in line] == [], (tools, line)


def test_the_readme_examples_run_as_written() -> None:
    """No README example but the headline (the end-to-end test's) is cut down by the test's budget
    cap: a cut example is not the one shown. The worker's `--trials 40` after a run of 20 had been
    cut to 20, so the test's worker ran no trial and "(20 more)" was never seen."""
    headline = make_run_command()
    cut = [c.line for b in parse(README) if b.kind == "commands" for c in b.commands
           if c.line != headline and capped(_argv(c)[0])[1]]  # fmt: skip
    assert cut == []


def inline_examples(page: Path) -> list[str]:
    """The commands a page shows in running text rather than in a block: a span `dse ...` with two
    flags or more (`dse study run NAME --out runs` and `dse calibrate --kernels measured` are
    references to a command, not examples)."""
    prose = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    spans = re.findall(r"`(dse [^`]+)`", " ".join(prose.split()))
    return [s for s in spans if len(re.findall(r"(?<!\S)--[a-z]", s)) >= 2]


def test_the_readmes_inline_examples_run(workdir: Path) -> None:
    """The README's intro shows AIConfigurator's question as a `dse place` line; it runs as shown."""
    examples = inline_examples(README)
    assert examples
    for line in examples:
        argv, changed = capped(_argv(Command(line, "README.md (inline)"))[0])
        assert not changed, line
        rc, _, both = run_dse(argv)
        assert rc == 0, f"`{line}` exited {rc}:\n{both}"


def test_the_readme_says_what_is_not_what_was() -> None:
    """The README reads the present run; a dated before-and-after (the headline's design before
    2026-12-05's prefill pricing) belongs to docs/benchmarks.md, findings-history or ACCURACY_LOG,
    where it already was."""
    assert re.findall(r".{30}\b20\d\d-\d\d-\d\d\b.{0,30}", " ".join(README.read_text().split())) == []


def test_catalogs_md_quotes_the_batch_cap_its_visible_gib_example_gives(tmp_path: Path) -> None:
    """docs/catalogs.md's `visible_gib` example: the decode pool's batch cap with B300's own
    visible_gib and with the page's own figure in its place, as `dse place` gives them (the page
    said 280.8 and 346.9 after decode batches had become whole sequences, 280 and 346)."""
    import json

    page = " ".join((REPO / "docs" / "catalogs.md").read_text(encoding="utf-8").split())
    figure = r"([\d,]+(?:\.\d+)?)"
    said = re.search(rf"\(`(dse place [^`]+)`\) has a `batch cap` of {figure} in place of {figure}", page)
    mine = re.search(r"`visible_gib = (\d+(?:\.\d+)?)`", page)
    assert said and mine, "docs/catalogs.md no longer quotes its visible_gib example as this test reads it"
    shipped = (REPO / "hardware_catalog" / "b300.toml").read_text()
    assert re.search(r"^visible_gib = ", shipped, flags=re.M)
    (tmp_path / "hardware").mkdir()
    own = re.sub(r"^visible_gib = .*$", f"visible_gib = {mine[1]}", shipped, flags=re.M)
    (tmp_path / "hardware" / "b300.toml").write_text(own)
    argv = [*shlex.split(said[1])[1:], "--no-shadow-prices", "--json"]

    def decode_cap(extra: list[str]) -> float:
        rc, out, both = run_dse([*extra, *argv])
        assert rc == 0, both
        doc = json.loads(out[out.index("{") :])
        return next(p["unit"]["decode_batch"] for p in doc["best"]["pools"] if p["unit"]["role"] == "decode")

    got = (decode_cap(["--catalog-dir", str(tmp_path)]), decode_cap([]))
    assert got == (float(said[2].replace(",", "")), float(said[3].replace(",", ""))), (said[0], got)


def test_the_checker_itself() -> None:
    assert matches(["a  1.5 s  …", "", "x"], "a 1.5   s 12.25\nx\n") is None
    assert matches(["a 1.5 s"], "a 1.6 s") is not None
    assert matches(["a", "b"], "a") is not None
    assert matches(["run in … s (0 before)"], "run in 12.7 s (0 before)") is None
    head = ["study", "run", "deepseek-v3-blackwell"]
    assert capped(head) == ([*head, "--trials", "20"], True)
    assert capped([*head, "--trials", "500"]) == ([*head, "--trials", "20"], True)
    assert capped([*head, "--trials", "5"]) == ([*head, "--trials", "5"], False)
    assert capped(["place", "--rate", "1"])[1] is False
    assert capped(["worker", "deepseek-v3-blackwell"])[1] is True


@pytest.mark.e2e  # the headline study's 500 trials: with the long tests
def test_make_run_prints_what_the_readme_shows(workdir: Path) -> None:
    headline = make_run_command()
    blocks = [c for b in parse(README) if b.kind == "commands" for c in b.commands if c.line == headline]
    assert blocks and blocks[0].shown, f"the README shows no output of `{headline}` (make run)"
    rc, _, both = run_dse(shlex.split(headline)[1:])
    assert rc == 0, both
    diff = matches(blocks[0].shown, both)
    assert diff is None, f"make run no longer prints what the README shows, {diff}"
    name = shlex.split(headline)[3]
    folder = workdir / "runs" / name
    for table in ("trials", "pareto", "placements", "kv_tiers", "sim_timeseries"):
        assert (folder / "exports" / table / f"study={name}" / "part-0.parquet").is_file(), table
    for f in ("study.db", "spec.json", "report/report.md", "report/pareto.png", "report/stage_breakdown.png",
              "report/hbm_residency.png", "report/sim_trajectory.png"):  # fmt: skip
        assert (folder / f).is_file(), f
    text = README.read_text()
    for f in ("report.md", "pareto.png", "stage_breakdown.png", "hbm_residency.png", "sim_trajectory.png"):
        assert f in text, f"the README does not name {f}"
    trials = folder / "exports" / "trials" / f"study={name}" / "part-0.parquet"
    assert_readme_prose_matches(text, both, trials)
    # "run it again and it resumes: `0 trials run ... (500 before)`", with the first run's counts
    said = re.search(r"resumes: `0 trials run \.\.\. \((\d+) before\)`", " ".join(text.split()))
    assert said, "the README no longer says what a second run prints"
    rc, _, again = run_dse(shlex.split(headline)[1:])
    first = blocks[0].shown[0].split(" trials run ", 1)
    want = f"{name}: 0 trials run in … s ({said[1]} before);{first[1].split(';', 1)[1]}"
    assert rc == 0 and matches([want], again.splitlines()[0]) is None, (want, again.splitlines()[0])


def printed_headers(shown: list[str]) -> list[str]:
    """The column headers of the tables in a shown output: each line above a rule of dashes, cut
    where the rule's dashes are (headers such as `batch cap` hold a space)."""
    heads = []
    for line, rule in zip(shown, shown[1:], strict=False):
        if rule.strip() and set(rule.strip()) <= {"-", " "}:
            heads += [line[m.start() : m.end()].strip() for m in re.finditer(r"-+", rule)]
    return heads


def test_the_readme_explains_every_column_its_headline_run_prints() -> None:
    """Every column of the tables the README's headline run shows (which the end-to-end test holds
    to what the run prints) is named in backticks in the README's prose: the best design's `inst`,
    `HBM GB/GPU` and `$/hour` and the KV table's `returns/s` and `GB/session` were not."""
    headline = make_run_command()
    runs = [c for b in parse(README) if b.kind == "commands" for c in b.commands if c.line == headline]
    shown = runs[0].shown
    prose = re.sub(r"^```.*?^```", "", README.read_text(encoding="utf-8"), flags=re.M | re.S)
    named = set(re.findall(r"`([^`]+)`", " ".join(prose.split())))  # a span may wrap a line
    heads = printed_headers(shown)
    assert len(heads) > 30 and [h for h in heads if h not in named] == []


def test_the_readme_describes_the_headline_traffic_as_its_study_file_has_it() -> None:
    """The Quick start's traffic is the study file's (it left out the 400 new tokens of a returning
    turn, without which the 302,400 tokens/s the table's reading quotes does not add up), and so
    is that sum."""
    from dse.study.spec import load_study

    w = load_study(shlex.split(make_run_command())[3]).workload
    text = " ".join(README.read_text(encoding="utf-8").split())
    said = re.search(
        r"at ([\d,]+) requests/s \(([\d,]+)-token prompts, ([\d,]+)-token answers, (\d+)% of requests "
        r"later turns of a conversation: ([\d,]+) cached tokens and ([\d,]+) new\)",
        text,
    )
    assert said, "the README's Quick start no longer describes the headline traffic as this test reads it"
    rate, isl, osl, share, prefix, suffix = (float(g.replace(",", "")) for g in said.groups())
    study = (w.requests_per_s, w.input_tokens, w.output_tokens, w.returning_share, w.cached_prefix_tokens,
             w.suffix_tokens)  # fmt: skip
    assert (rate, isl, osl, share / 100, prefix, suffix) == study
    fresh, back = rate * (1 - share / 100), rate * share / 100
    total = fresh * (isl + osl) + back * (prefix + suffix + osl)
    sum_ = (f"is the {total:,.0f} tokens/s of the traffic ({fresh:.0f} new requests/s of {isl + osl:,.0f} "
            f"tokens, {back:.0f} returning of {prefix + suffix + osl:,.0f})")  # fmt: skip
    assert sum_ in text


def assert_readme_prose_matches(readme: str, printed: str, trials_file: Path) -> None:
    """The README's reading of the headline run ("**Here**") names figures the console block does
    not show: the warm start's GPUs and cost (from the trials export), and the other trials of the
    cheapest design with their TTFT range (from the printed table). Each must be the run's."""
    here = " ".join(readme.split("**Here**", 1)[1].split("\n\n", 1)[0].split())
    warm = re.search(r"warm start's design \(trial 0\), \w+ on (\d+) GPUs, costs \$(\d+\.\d+)", here)
    others = re.search(r"\(trials ([\d, and]+):", here)
    span = re.search(r"\((\d+\.\d+)(?:-(\d+\.\d+))? s at p90\)", here)  # a range, or one value
    assert warm and others and span, f"the README's **Here** no longer reads as this test expects: {here}"
    first = pl.read_parquet(trials_file).filter(pl.col("trial") == 0).row(0, named=True)
    assert (int(warm[1]), warm[2]) == (int(first["gpus"]), f"{first['usd_per_million_tokens']:.4f}"), warm[0]
    lines = printed.splitlines()
    header = next(line for line in lines if line.startswith("trial  trials"))
    column = header.index("TTFT p90 s")  # the cells are right-aligned under their header's end
    table = [line for line in lines if re.match(r"\s*\d+\s+\d+\s+\w", line)]
    rows = {int(line.split()[0]): line for line in table}
    named = [int(t) for t in re.findall(r"\d+", others[1])]
    assert all(t in rows for t in named), f"the README names trials {named}; the table shows {sorted(rows)}"
    ttft = [float(rows[t][: column + len("TTFT p90 s")].split()[-1]) for t in named]
    assert (span[1], span[2] or span[1]) == (f"{min(ttft):.2f}", f"{max(ttft):.2f}"), (span[0], ttft)


def _flags(parser: Any, command: str = "dse") -> Iterator[tuple[str, str]]:
    """(command, flag) for every long option of ``parser`` and its subcommands."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _flags(sub, f"{command} {name}")
        else:
            yield from ((command, o) for o in action.option_strings if o.startswith("--") and o != "--help")


def test_every_flag_is_named_in_the_docs() -> None:
    """A flag only `--help` names is one a reader of the pages never meets (--dt, --prefill-tp,
    --latency-usd-per-s were)."""
    from dse.cli.main import build_parser

    text = "".join(p.read_text(encoding="utf-8") for p in PAGES)
    missing = {f"{cmd} {flag}" for cmd, flag in _flags(build_parser())
               if not re.search(re.escape(flag) + r"(?![\w-])", text)}  # fmt: skip
    assert missing == set()


def _keys(cls: Any, skip: Any = None) -> Iterator[str]:
    """The keys of a data file read into dataclass ``cls``, its tables' keys included (those of
    ``skip``'s table left out)."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if cls is not skip:
            yield f.name
        for t in (hints[f.name], *typing.get_args(hints[f.name])):
            if dataclasses.is_dataclass(t) and t is not cls:
                yield from _keys(t, skip)


def _unnamed(keys: Iterator[str], text: str) -> set[str]:
    return {k for k in keys if not re.search(rf"(?<![\w-]){k}(?![\w-])", text)}


def test_every_study_file_key_is_in_the_table_of_studies_md() -> None:
    """Each key of the spec (the sweep's axes apart: they have their own paragraph) appears in the
    table of docs/studies.md ([search] population did not)."""
    from dse.study.spec import StudySpec, Sweep

    page = (REPO / "docs" / "studies.md").read_text(encoding="utf-8")
    table = "\n".join(line for line in page.splitlines() if line.startswith("| "))
    assert _unnamed(_keys(StudySpec, skip=Sweep), table) == set()


def test_every_catalog_key_is_named_in_catalogs_md() -> None:
    """A model file's keys (the page had none) and a hardware file's, in its example or its list."""
    from dse.catalog.hardware import Hardware
    from dse.catalog.model import Model

    page = (REPO / "docs" / "catalogs.md").read_text(encoding="utf-8")
    assert _unnamed(_keys(Model), page) == set() and _unnamed(_keys(Hardware), page) == set()


def test_studies_md_quotes_the_agentic_study_at_the_findings_best() -> None:
    """What docs/studies.md says of the MILP's answer for agentic-kv-tiering is FINDINGS.md's best
    (the tiered policy's row of its table): the page quoted a price two refits old."""
    findings = (REPO / "FINDINGS.md").read_text()
    best = re.search(r"\| tiered \(the MILP chooses per class\) \| \*\*([0-9.]+)\*\* \|", findings)
    assert best is not None, "FINDINGS.md: the agentic-kv-tiering table's tiered row"
    page = (REPO / "docs" / "studies.md").read_text()
    bullet = page.split("- `agentic-kv-tiering`", 1)[1].split("\n- ", 1)[0]
    assert re.findall(r"\$([0-9.]+[0-9])", bullet)[0] == best.group(1)
