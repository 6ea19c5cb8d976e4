"""Bad-input fuzzing: mutated catalog and study files, fuzzed flags of predict, place, simulate and
study run, all through the real command line (`dse.cli.main.main`, in process).

The house rule under test: bad input ends with exit code 2 and exactly one stderr line
`dse: error: <file or command>: <key> = <value>: <rule>` naming the file (or the flag) and the key;
never a traceback, never a half-written output folder. Each case decides explicitly what may
happen:

* a mutation that cannot leave a valid input (`must_fail`: a wrong type, a number out of range or
  of the wrong sign for its rule, NaN or infinity, a missing required key, an unknown key, deep
  junk, an empty or non-UTF-8 or non-TOML file) must exit 2;
* any other mutation (another string, another number in range) may leave a valid input and exit 0;
  if it exits 2, the line must still name the file and a key of the same table;
* `dse place` may also exit 3 (no feasible design, one line) when every flag passes its own rule.

argparse refuses unparsable flags itself (exit 2, a usage line and `argument --flag: ...`): accepted
as long as there is no traceback and the line names the flag.

Hypothesis runs derandomized (the same cases in CI every time) with bounded example counts; the
cases tried are counted per kind and printed by the last test (`pytest -s` shows it). Defects this
fuzzing found outside the code this change may edit are pinned by strict xfail tests at the end.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import datetime
import enum
import io
import json
import math
import os
import re
import shlex
import shutil
import signal
import traceback
import types
import typing
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dse.catalog import Hardware, Model, load_catalog
from dse.cli.main import main
from dse.errors import _printable
from dse.paths import MEASURED_RUNS, SHIPPED_HARDWARE, SHIPPED_MODELS, STUDIES_DIR
from dse.perf.benchmark_rows import AFD_COLUMNS, ENGINE_COLUMNS, INPUT_COLUMNS
from dse.study.spec import StudySpec, Sweep
from dse.typed_data import MAX_MAGNITUDE, MIN_MAGNITUDE, fraction, non_empty, non_negative, positive

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "data" / "tiny-study.toml"
CASE_SECONDS = 60  # one CLI call longer than this is a hang
COUNTS: Counter[str] = Counter()  # CLI calls per kind
EXAMPLES: Counter[str] = Counter()  # hypothesis examples per test
KNOWN: Counter[str] = Counter()  # cases that hit a known defect pinned by an xfail test below
EXITS: Counter[str] = Counter()  # outcomes of every CLI call


SCALE = int(os.environ.get("DSE_FUZZ_SCALE", "1"))
"""Multiplies every example count (the default keeps the file near 30 s; `DSE_FUZZ_SCALE=20` digs)."""


def fuzz_settings(n: int) -> settings:
    return settings(
        max_examples=n * SCALE,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


@pytest.fixture(scope="module", autouse=True)
def _no_catalog_env() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("DSE_CATALOG_DIR", raising=False)
        yield


# ---------------------------------------------------------------------------------------------
# running the CLI


@dataclasses.dataclass
class Outcome:
    argv: list[str]
    code: int
    stdout: str
    stderr: str
    warned: list[str]
    by_argparse: bool

    def context(self) -> str:
        return (
            f"dse {shlex.join(self.argv)}\nexit {self.code}\nstderr: {self.stderr[-2000:]!r}\n"
            f"warnings: {self.warned[:5]}"
        )


class _Hung(BaseException):
    """Raised by the alarm; a BaseException so no `except Exception` in the engine swallows it."""


def _on_alarm(signum: int, frame: object) -> None:
    raise _Hung


def run_cli(kind: str, argv: Sequence[str]) -> Outcome:
    """`dse ARGV` in process: exit code, stdout, stderr and warnings; a traceback or a hang fails."""
    COUNTS[kind] += 1
    argv = [str(a) for a in argv]
    out, err = io.StringIO(), io.StringIO()
    by_argparse = False
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        with (
            warnings.catch_warnings(record=True) as caught,
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            warnings.simplefilter("always")
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse, --help, --version
                by_argparse = True
                code = exc.code if isinstance(exc.code, int) else 1
    except _Hung:
        pytest.fail(f"no answer within {CASE_SECONDS} s: dse {shlex.join(argv)}")
    except Exception:
        pytest.fail(f"traceback from dse {shlex.join(argv)}:\n{traceback.format_exc()}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    EXITS[f"exit {code}" + (" (argparse)" if by_argparse else "")] += 1
    return Outcome(argv, code, out.getvalue(), err.getvalue(), [str(w.message) for w in caught], by_argparse)


def error_line(o: Outcome) -> str:
    """The one stderr line of a refused input."""
    assert "Traceback" not in o.stderr, o.context()
    lines = o.stderr.splitlines()
    assert len(lines) == 1 and o.stderr.endswith("\n"), "not exactly one stderr line:\n" + o.context()
    assert lines[0].startswith("dse: error: "), o.context()
    return lines[0]


def check_refusal(
    o: Outcome,
    *,
    sources: Sequence[str],
    names_key: Callable[[str, str], bool] | None,
    must_fail: bool,
    allowed: tuple[int, ...] = (0, 2),
    known: dict[str, str] | None = None,
) -> None:
    """The common assertions: the exit code, one line naming a source and the key, no warnings.

    ``names_key(source, rest)`` gets the source the line names and the line after
    ``dse: error: <source>: `` (None: any key, or none). ``known`` maps a regex of a known
    defect's line to its name: such lines are counted, not failed (each has an xfail test).
    """
    assert "Traceback" not in o.stderr, o.context()
    assert o.code in allowed, o.context()
    if must_fail:
        assert o.code != 0, "a broken input was accepted:\n" + o.context()
    if o.code == 0:
        assert not o.warned, "accepted, but the engine warned (overflow or NaN?):\n" + o.context()
        return
    if o.by_argparse:
        last = o.stderr.strip().splitlines()[-1]
        assert o.code == 2 and ": error: " in last, o.context()
        return
    line = error_line(o)
    for pattern, name in (known or {}).items():
        if re.match(pattern, line):
            KNOWN[name] += 1
            return
    if o.code != 2:  # exit 3: no feasible design is an answer, it names no input key
        return

    # `<source>: <key> = <value>: <rule>` (a file's row: `<source> line <n>: ...`), or for a flag as
    # the source `--flag = <value>: <rule>`
    def prefix(s: str) -> re.Match[str] | None:
        return re.match(rf"dse: error: {re.escape(_printable(s))}(?: line \d+)?: ", line)

    named = [s for s in sources if prefix(s) or line.startswith(f"dse: error: {s} = ")]
    assert named, f"the line names none of {list(sources)}:\n" + o.context()
    source = max(named, key=len)
    if names_key is not None:
        found = prefix(source)
        rest = line[found.end() if found else len(f"dse: error: {_printable(source)}: ") :]
        assert names_key(source, rest), "the line does not name the key:\n" + o.context()


# ---------------------------------------------------------------------------------------------
# TOML writing (tomllib reads only) and the junk values


@dataclasses.dataclass(frozen=True)
class Raw:
    """A value written verbatim into the TOML text (what a Python value cannot express)."""

    text: str


@dataclasses.dataclass(frozen=True)
class Deep:
    """Arrays or tables nested ``depth`` deep, written without recursion."""

    kind: str
    depth: int

    def toml(self) -> str:
        if self.kind == "array":
            return "[" * self.depth + "]" * self.depth
        return "{a = " * self.depth + "1" + "}" * self.depth


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_string(s: str) -> str:
    # JSON escapes what TOML must have escaped, except DEL
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_value(v: Any) -> str:
    if isinstance(v, Raw):
        return v.text
    if isinstance(v, Deep):
        return v.toml()
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, datetime.datetime):
        return v.isoformat()
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def toml_dumps(doc: dict[str, Any]) -> str:
    """One line per top-level key; tables inline (TOML 1.0)."""
    return "".join(f"{toml_key(k)} = {toml_value(v)}\n" for k, v in doc.items())


INF, NAN = float("inf"), float("nan")
BAD_NUMBERS = [
    0,
    0.0,
    -1,
    -0.5,
    -1e-308,
    1e-308,
    1e308,
    -1e308,
    10**30,
    -(10**30),
    10**400,
    2**63,
    INF,
    -INF,
    NAN,
    1e13,
    1e-10,
]
EDGE_NUMBERS = [1, 2, 1.5, 1e12, 1e-9, 8, 72]
RAW_VALUES = [
    Raw("1" + "0" * 5000),  # an int of more digits than Python converts
    Raw("0x7FFFFFFFFFFFFFFFFFFF"),
    Raw("+nan"),
    Raw("-inf"),
    Raw("1979-05-27T07:32:00Z"),
    Raw("07:32:00"),
    Raw("'''multi\nline'''"),
]
WRONG_TYPES = [
    "",
    "fast",
    "1e3",
    "12",
    True,
    False,
    [],
    [1, "a"],
    {},
    {"x": 1},
    datetime.datetime(1979, 5, 27),
]
JUNK_STRINGS = [
    "",
    " ",
    "\n",
    "a\u2028b",
    "\x00",
    "\x7f",
    "\u202eevil",
    "🦄",
    "ü" * 300,
    "../../etc/passwd",
    "__import__('os').system('true')",
    "B200",
    "nope",
]
DEEP = [Deep(kind, depth) for kind in ("array", "table") for depth in (2, 30, 150, 300, 420, 600, 3000)]

numbers = st.one_of(
    st.sampled_from(BAD_NUMBERS + EDGE_NUMBERS),
    st.integers(-(10**15), 10**15),
    st.floats(allow_nan=True, allow_infinity=True),
)
junk_text = st.one_of(st.sampled_from(JUNK_STRINGS), st.text(st.characters(codec="utf-8"), max_size=20))
junk_keys = st.one_of(
    st.sampled_from(["tdp_watts", "x", "", "a.b", "\n", "é", "[x]", "a\u2028b"]),
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=12),
)
any_value = st.one_of(
    numbers,
    st.sampled_from(WRONG_TYPES),
    st.sampled_from(RAW_VALUES),
    st.sampled_from(DEEP),
    junk_text,
)


# ---------------------------------------------------------------------------------------------
# the schema: what each path of a file must hold, so a mutation knows whether it must fail


@dataclasses.dataclass(frozen=True)
class Slot:
    tp: Any
    required: bool
    rule: Any


def _unwrap(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return inner[0]
    return tp


def slot_of(cls: type, path: tuple[str | int, ...]) -> Slot | None:
    """The declared type, whether required, and the rule of ``path`` in the dataclass ``cls``."""
    tp: Any = cls
    found: Slot | None = None
    for comp in path:
        base = _unwrap(tp)
        if isinstance(comp, int):
            if typing.get_origin(base) is not tuple:
                return None
            tp = typing.get_args(base)[0]
            found = Slot(tp, False, None)
            continue
        if not dataclasses.is_dataclass(base):
            return None
        fields = {f.name: f for f in dataclasses.fields(base)}
        if comp not in fields:
            return None
        f = fields[comp]
        tp = typing.get_type_hints(base)[comp]
        optional = _unwrap(tp) is not tp
        required = (
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and not optional
        )
        found = Slot(tp, required, f.metadata.get("rule"))
    return found


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _toml_equivalent(v: Any) -> Any:
    """What tomllib will read back for ``v`` (Raw values: what kind of thing they are)."""
    if isinstance(v, Raw):
        t = v.text
        if t.startswith("1") and len(t) > 4000:
            return Deep("array", 10**6)  # refused by the reader, like deep junk
        if t.startswith("0x"):
            return int(t, 16)
        if t in ("+nan",):
            return NAN
        if t == "-inf":
            return -INF
        if t.startswith("'''"):
            return t.strip("'")
        return datetime.time()  # a date or a time: no field takes one
    return v


def must_fail_value(slot: Slot | None, value: Any) -> bool:
    """True when no value of this kind can satisfy the slot."""
    value = _toml_equivalent(value)
    if slot is None:
        return True  # an unknown key
    if isinstance(value, Deep):
        return True
    tp = _unwrap(slot.tp)
    if tp in (int, float):
        if not _is_number(value) or (tp is int and not isinstance(value, int)):
            return True
        if isinstance(value, float) and not math.isfinite(value):
            return True
        if value != 0 and not MIN_MAGNITUDE <= abs(value) <= MAX_MAGNITUDE:
            return True
        if slot.rule is positive and value <= 0:
            return True
        if slot.rule is non_negative and value < 0:
            return True
        return slot.rule is fraction and not 0 <= value <= 1
    if tp is bool:
        return not isinstance(value, bool)
    if tp is str:
        return not isinstance(value, str) or (slot.rule is non_empty and value == "")
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return value not in [m.value for m in tp]
    if typing.get_origin(tp) is tuple:
        if not isinstance(value, list):
            return True
        item = Slot(typing.get_args(tp)[0], False, None)
        return any(must_fail_value(item, v) for v in value)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            return True
        missing = any(
            (s := slot_of(tp, (f.name,))) is not None and s.required and f.name not in value
            for f in dataclasses.fields(tp)
        )
        return missing or any(slot_of(tp, (k,)) is None for k in value)
    return False


def dotted(path: Sequence[str | int]) -> str:
    out = ""
    for comp in path:
        comp = '""' if comp == "" else comp  # the empty key, as TOML spells it
        out += f"[{comp}]" if isinstance(comp, int) else (f".{comp}" if out else comp)
    return _printable(out)


def _starts_with_key(rest: str, key: str) -> bool:
    return rest.startswith(key) and rest[len(key) : len(key) + 1] in (" ", ":", ".", "[")


WHOLE_FILE = ("must be valid TOML", "must not nest")


def names_path(m: Mutation, top_level: set[str]) -> Callable[[str, str], bool] | None:
    """The error must name the mutated key, one of its tables, or a key of the same top-level
    table (rules across fields); at the top level, any top-level key. A value the TOML reader
    itself refuses (junk hundreds deep, an int of 5000 digits) is named by the whole file."""
    path = m.path
    if path is None:
        return None

    def ok(source: str, rest: str) -> bool:
        if m.parse_level and rest.startswith(WHOLE_FILE):
            return True
        if rest.startswith("published.") and "what the architecture gives" in rest:
            return True  # the published sizes against the derived ones: any architecture field moves them
        if any(_starts_with_key(rest, dotted(path[:i])) for i in range(1, len(path) + 1)):
            return True
        if len(path) == 1 or path[0] not in top_level or m.referenced:
            return any(_starts_with_key(rest, k) for k in top_level)
        return False

    return ok


# ---------------------------------------------------------------------------------------------
# mutations of a parsed file


@dataclasses.dataclass
class Mutation:
    data: bytes
    path: tuple[str | int, ...] | None  # None: a mutation of the text, no key to name
    must_fail: bool
    what: str
    parse_level: bool = False  # the value is junk the TOML reader refuses before any key is known
    referenced: bool = False  # a string or a table other keys may refer to (an id): any key may fail


def _nodes(doc: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    if path:
        yield path, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _nodes(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _nodes(v, (*path, i))


def _set(doc: Any, path: tuple[str | int, ...], value: Any) -> None:
    for comp in path[:-1]:
        doc = doc[comp]
    doc[path[-1]] = value


def _get(doc: Any, path: tuple[str | int, ...]) -> Any:
    for comp in path:
        doc = doc[comp]
    return doc


@st.composite
def mutations(draw: st.DrawFn, text: str, cls: type) -> Mutation:
    import copy
    import tomllib

    doc = tomllib.loads(text)
    kind = draw(
        st.sampled_from(
            ["replace", "replace", "replace", "number", "number", "delete", "add", "deep", "text", "empty"]
        )
    )
    nodes = list(_nodes(doc))
    if kind in ("replace", "number", "delete", "deep"):
        path, old = draw(st.sampled_from(nodes))
        new = copy.deepcopy(doc)
        # a study's [[variants]] define hardware ids that hardware = [...] and [sweep] refer to
        referenced = isinstance(old, str) or kind == "delete"
        if kind == "delete":
            parent = _get(new, path[:-1])
            if isinstance(parent, list):
                del parent[path[-1]]
                return Mutation(
                    toml_dumps(new).encode(), path[:-1], False, f"delete {dotted(path)}", False, True
                )
            del parent[path[-1]]
            s = slot_of(cls, path)
            fails = bool(s and s.required)
            return Mutation(toml_dumps(new).encode(), path, fails, f"delete {dotted(path)}", False, True)
        value = draw({"replace": any_value, "number": numbers, "deep": st.sampled_from(DEEP)}[kind])
        _set(new, path, value)
        return Mutation(
            toml_dumps(new).encode(),
            path,
            must_fail_value(slot_of(cls, path), value),
            f"{dotted(path)} = {toml_value(value)[:60]}",
            parse_level=isinstance(value, (Deep, Raw)),
            referenced=referenced,
        )
    if kind == "add":
        tables = [((), doc)] + [(p, v) for p, v in nodes if isinstance(v, dict)]
        path, table = draw(st.sampled_from(tables))
        key = draw(junk_keys.filter(lambda k, t=table: k not in t))
        value = draw(any_value)
        new = copy.deepcopy(doc)
        _get(new, path)[key] = value
        full = (*path, key)
        fails = slot_of(cls, full) is None or must_fail_value(slot_of(cls, full), value)
        return Mutation(
            toml_dumps(new).encode(),
            full,
            fails,
            f"add {dotted(full)}",
            parse_level=isinstance(value, (Deep, Raw)),
        )
    if kind == "empty":
        data = draw(st.sampled_from([b"", b"   \n\t\n", b"# only a comment\n", b"\n" * 50]))
        return Mutation(data, None, True, "empty")
    raw = text.encode()
    how = draw(st.sampled_from(["truncate", "insert", "bytes", "nul", "bom", "duplicate"]))
    at = draw(st.integers(0, len(raw)))
    if how == "truncate":
        return Mutation(raw[:at], None, False, f"truncate at {at}")
    if how == "insert":
        junk = draw(
            st.text(
                st.sampled_from(list("[]{}=\"'=#\n\\.,") + ["é", "🦄", "\u2028", "x", "1"]),
                min_size=1,
                max_size=8,
            )
        )
        return Mutation(raw[:at] + junk.encode() + raw[at:], None, False, f"insert {junk!r} at {at}")
    if how == "bytes":
        return Mutation(raw[:at] + b"\xff\xfe\x80" + raw[at:], None, True, f"invalid UTF-8 at {at}")
    if how == "nul":
        return Mutation(raw[:at] + b"\x00" + raw[at:], None, True, f"NUL at {at}")
    if how == "bom":
        return Mutation(b"\xef\xbb\xbf" + raw, None, False, "byte-order mark")  # read as no text
    lines = text.splitlines(keepends=True)
    i = draw(st.integers(0, len(lines) - 1))
    return Mutation("".join(lines[: i + 1] + lines[i:]).encode(), None, False, f"duplicate line {i + 1}")


# ---------------------------------------------------------------------------------------------
# catalog files


def _catalog_files() -> list[tuple[str, Path, type]]:
    hw = [("hardware", p, Hardware) for p in sorted(SHIPPED_HARDWARE.glob("*.toml"))]
    return hw + [("models", p, Model) for p in sorted(SHIPPED_MODELS.glob("*.toml"))]


CATALOG_FILES = _catalog_files()
HARDWARE_TOP = {f.name for f in dataclasses.fields(Hardware)}
MODEL_TOP = {f.name for f in dataclasses.fields(Model)}
STUDY_TOP = {f.name for f in dataclasses.fields(StudySpec)}


@pytest.fixture(scope="module")
def catalog_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every shipped catalog file copied into a user catalog folder (hardware/, models/)."""
    root = tmp_path_factory.mktemp("catalog")
    for sub, path, _ in CATALOG_FILES:
        (root / sub).mkdir(exist_ok=True)
        shutil.copy(path, root / sub / path.name)
    return root


def test_rewritten_valid_files_are_accepted(catalog_copy: Path, tmp_path: Path) -> None:
    """The baseline the mutations start from: every shipped file, written back by toml_dumps,
    is accepted, so a refusal below is the mutation's doing."""
    import tomllib

    for sub, path, _ in CATALOG_FILES:
        target = catalog_copy / sub / path.name
        target.write_text(toml_dumps(tomllib.loads(path.read_text())))
        try:
            o = run_cli("baseline", ["--catalog-dir", catalog_copy, "catalog", "show", path.stem, "--json"])
            assert o.code == 0 and o.stderr == "", o.context()
        finally:
            shutil.copy(path, target)
    for path in sorted(STUDIES_DIR.glob("*.toml")):
        target = tmp_path / path.name
        target.write_text(toml_dumps(tomllib.loads(path.read_text())))
        o = run_cli("baseline", ["study", "show", target])
        assert o.code == 0 and o.stderr == "", o.context()


@pytest.mark.e2e
@fuzz_settings(110)
@given(data=st.data())
def test_mutated_catalog_files(catalog_copy: Path, data: st.DataObject) -> None:
    EXAMPLES["catalog files"] += 1
    sub, path, cls = data.draw(st.sampled_from(CATALOG_FILES))
    m = data.draw(mutations(path.read_text(), cls))
    target = catalog_copy / sub / path.name
    target.write_bytes(m.data)
    names = names_path(m, HARDWARE_TOP if cls is Hardware else MODEL_TOP)
    try:
        listed = run_cli("catalog", ["--catalog-dir", catalog_copy, "catalog", "list", sub, "--json"])
        check_refusal(listed, sources=[str(target)], names_key=names, must_fail=m.must_fail)
        if listed.code != 0:
            return
        # accepted: the values must also survive the commands that compute with them
        eid = path.stem
        shown = run_cli("catalog", ["--catalog-dir", catalog_copy, "catalog", "show", eid, "--json"])
        check_refusal(shown, sources=[str(target)], names_key=names, must_fail=False)
        flags = ["--hardware", eid] if cls is Hardware else ["--hardware", "b200", "--model", eid]
        predicted = run_cli("catalog", ["--catalog-dir", catalog_copy, "predict", *flags, "--json"])
        check_refusal(  # 3: the model's weights do not fit this hardware's default instance
            predicted,
            sources=["dse predict", str(target)],
            names_key=None,
            must_fail=False,
            allowed=(0, 2, 3),
        )
        hw = eid if cls is Hardware else "b200"
        model = ["--model", eid] if cls is Model else []
        placed = run_cli(
            "catalog",
            [
                "--catalog-dir",
                catalog_copy,
                "place",
                "--hardware",
                hw,
                *model,
                "--rate",
                "2",
                "--ttft",
                "3",
                "--tpot",
                "0.08",
                "--topology",
                "disaggregated",
                "--no-shadow-prices",
                "--time-limit",
                "10",
            ],
        )
        check_refusal(
            placed, sources=["dse place", str(target)], names_key=None, must_fail=False, allowed=(0, 2, 3)
        )
    finally:
        shutil.copy(path, target)


# ---------------------------------------------------------------------------------------------
# study files

STUDY_FILES = sorted(STUDIES_DIR.glob("*.toml"))


@pytest.mark.e2e
@fuzz_settings(160)
@given(data=st.data())
def test_mutated_study_files(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    EXAMPLES["study files"] += 1
    path = data.draw(st.sampled_from(STUDY_FILES))
    m = data.draw(mutations(path.read_text(), StudySpec))
    target = tmp_path_factory.mktemp("study") / path.name
    target.write_bytes(m.data)
    o = run_cli("study show", ["study", "show", target])
    names = names_path(m, STUDY_TOP)
    check_refusal(o, sources=[str(target)], names_key=names, must_fail=m.must_fail)
    if o.code == 0:
        assert json.loads(o.stdout)["name"] == path.stem, o.context()


@fuzz_settings(30)
@given(data=st.data())
def test_broken_study_files_never_start_a_run(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """`study run` of a file that cannot be valid: exit 2, one line, and no run folder at all."""
    EXAMPLES["study run files"] += 1
    m = data.draw(mutations(TINY.read_text(), StudySpec).filter(lambda m: m.must_fail))
    base = tmp_path_factory.mktemp("run")
    target = base / TINY.name
    target.write_bytes(m.data)
    out = base / "out"
    o = run_cli("study run file", ["study", "run", target, "--out", out, "--trials", "1", "--no-export"])
    check_refusal(
        o,
        sources=[str(target)],
        names_key=names_path(m, STUDY_TOP),
        must_fail=True,
    )
    assert not out.exists(), f"a refused study left {sorted(map(str, out.rglob('*')))}:\n{o.context()}"


# ---------------------------------------------------------------------------------------------
# flags

NUMBER_TEXTS = [
    "-1",
    "0",
    "-0",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e308",
    "1e400",
    "1e-308",
    "1e12",
    "1e13",
    "abc",
    "",
    " ",
    "1_000",
    "0x10",
    "--",
    "\u0661\u0662",
    "\uff11\uff12",
    "1e",
    "+5",
    "2**8",
    "1+1",
    "0.5",
    "3",
    "8",
    "64",
]
number_text = st.one_of(
    st.sampled_from(NUMBER_TEXTS),
    st.integers(-(10**20), 10**20).map(str),
    st.floats().map(repr),
    st.text(st.characters(codec="utf-8"), max_size=10),
)


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def bad_float(text: str, rule: Callable[[float], str | None] | None) -> bool:
    """A flag value no float rule can accept: unparsable, not finite, implausible, or ``rule`` broken."""
    v = _float_or_none(text)
    if v is None or not math.isfinite(v) or (v != 0 and not MIN_MAGNITUDE <= abs(v) <= MAX_MAGNITUDE):
        return True
    return rule is not None and rule(v) is not None


def bad_int(text: str, rule: Callable[[float], str | None] | None) -> bool:
    try:
        v = int(text)
    except ValueError:
        return True
    return abs(v) > MAX_MAGNITUDE or (rule is not None and rule(v) is not None)


def check_flags(
    o: Outcome,
    mutated: dict[str, str],
    must_fail: bool,
    sources: Sequence[str],
    allowed: tuple[int, ...] = (0, 2),
) -> None:
    """One flag-fuzz case: a refusal by a command names a flag (the mutated one when it alone must
    fail); a refusal by a file the flags name (--placement, --trace) names that file."""

    def names(source: str, rest: str) -> bool:
        if source not in ("dse predict", "dse place", "dse simulate"):
            return True  # a file: any key of it
        if not rest.startswith("--"):
            return False
        if must_fail and len(mutated) == 1:
            return _starts_with_key(rest, next(iter(mutated)))
        return True

    check_refusal(o, sources=sources, names_key=names, must_fail=must_fail, allowed=allowed)
    if o.by_argparse and o.code == 2:
        named = any(f"argument {f}" in o.stderr for f in mutated)
        assert named or "expected one argument" in o.stderr, o.context()


PREDICT_FLOATS = {"--isl": positive, "--osl": positive, "--conc": positive}
PREDICT_INTS = {
    "--tp": positive,
    "--ep": non_negative,
    "--prefill-tp": positive,
    "--prefill-ep": non_negative,
    "--prefill-workers": non_negative,
    "--prefill-gpus": positive,
    "--decode-workers": non_negative,
    "--decode-gpus": positive,
    "--ffn-gpus": positive,
    "--ffn-workers": non_negative,
    "--ffn-ep": non_negative,
    "--decode-max-running-requests": positive,
    "--mtp-draft-tokens": positive,  # and at most 16, or 0 without --mtp: _predict_bad
    "--scheduler-recv-interval": positive,  # and at most 1000: _predict_bad
}
PREDICT_IDS = {
    "--hardware": ["b200", "gb200", "h100", "mi355x"],
    "--model": ["deepseek-v3", "kimi-k3", "llama-3.1-70b"],
    "--framework": ["trt", "sglang", "atom"],
    "--precision": ["fp4", "fp8", "bf16"],
}


def _predict_bad(flag: str, text: str, mtp: bool) -> bool:
    if flag == "--mtp-draft-tokens":  # 1-16 drafts with MTP; none (0) without

        def drafts(v: float) -> str | None:
            return None if (1 <= v <= 16 if mtp else v == 0) else "out of range"

        return bad_int(text, drafts)
    if flag == "--scheduler-recv-interval":
        return bad_int(text, lambda v: None if 1 <= v <= 1000 else "out of range")
    if flag in PREDICT_FLOATS:
        return bad_float(text, PREDICT_FLOATS[flag])
    if flag in PREDICT_INTS:
        return bad_int(text, PREDICT_INTS[flag])
    return _unknown_id(flag, text)


@fuzz_settings(200)
@given(data=st.data())
def test_predict_flags(data: st.DataObject) -> None:
    EXAMPLES["predict flags"] += 1
    n = data.draw(st.integers(1, 3))
    chosen = data.draw(
        st.lists(
            st.sampled_from([*PREDICT_FLOATS, *PREDICT_INTS, *PREDICT_IDS]),
            min_size=n,
            max_size=n,
            unique=True,
        )
    )
    mutated: dict[str, str] = {}
    for flag in chosen:
        if flag in PREDICT_IDS:
            mutated[flag] = data.draw(st.one_of(st.sampled_from(PREDICT_IDS[flag]), junk_text))
        else:
            mutated[flag] = data.draw(number_text)
    switches = data.draw(
        st.lists(
            st.sampled_from(["--disagg", "--afd", "--dp-attention", "--prefill-dp-attention", "--mtp"]),
            unique=True,
            max_size=2,
        )
    )
    must_fail = any(_predict_bad(f, v, "--mtp" in switches) for f, v in mutated.items())
    base = {"--hardware": "b200"}
    argv = ["predict", *[f"{k}={v}" for k, v in {**base, **mutated}.items()], *switches, "--json"]
    o = run_cli("predict flags", argv)
    check_flags(o, mutated, must_fail, ["dse predict"], allowed=(0, 2, 3))
    if o.code == 0:  # strict JSON (no NaN), typed values; a deployment that cannot serve exits 3
        doc = json.loads(
            o.stdout, parse_constant=lambda token: pytest.fail(f"{token} in --json:\n{o.context()}")
        )
        assert isinstance(doc["deployment"]["decode_tp"], int) and isinstance(
            doc["deployment"]["disagg"], bool
        )
        assert math.isfinite(doc["prediction"]["tput_per_gpu"]), o.context()
    elif o.code == 3:
        assert error_line(o).startswith("dse: error: no feasible design: "), o.context()


@pytest.fixture(scope="module")
def batch_rows() -> list[dict[str, str]]:
    with open(MEASURED_RUNS, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))[:6]


def _csv_text(rows: list[dict[str, str]], header: list[str]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=header, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


@fuzz_settings(50)
@given(data=st.data())
def test_predict_batch_files(
    batch_rows: list[dict[str, str]], tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """`predict --batch IN.csv --out OUT.csv` with junk cells and junk files: a row it cannot
    model gets its own `pred_error` (exit 0, every row written back); a file it cannot read at all
    is refused (exit 2, one line naming the file) and OUT.csv is not written."""
    EXAMPLES["predict batch"] += 1
    rows = [dict(r) for r in batch_rows]
    if data.draw(st.booleans()):  # attention-FFN disaggregated rows: the optional columns
        rows = [dict(r, num_ffn_gpu="16", ffn_num_workers="1", ffn_ep="16") for r in rows]
    if data.draw(st.booleans()):  # the optional running-request cap
        rows = [dict(r, decode_max_running_requests="128") for r in rows]
    if data.draw(st.booleans()):  # the optional draft depth (2 in MTP rows, empty in the others)
        rows = [dict(r, mtp_draft_tokens="2" if r["spec_method"] == "mtp" else "") for r in rows]
    header = list(rows[0])
    optional = [c for c in (*AFD_COLUMNS, *ENGINE_COLUMNS) if c in header]
    kind = data.draw(st.sampled_from(["cell", "cell", "cell", "column", "text", "ragged"]))
    must_fail = False
    if kind == "cell":
        i = data.draw(st.integers(0, len(rows) - 1))
        col = data.draw(st.sampled_from([*INPUT_COLUMNS, *optional]))
        rows[i][col] = data.draw(st.one_of(number_text, junk_text))
        raw = _csv_text(rows, header).encode("utf-8", "surrogatepass")
    elif kind == "ragged":  # a row cut short or run long: its error says so, the others are modelled
        lines = _csv_text(rows, header).splitlines()
        i = data.draw(st.integers(1, len(lines) - 1))
        cells = lines[i].split(",")
        cut = data.draw(st.integers(1, len(cells) + 3))
        lines[i] = ",".join(cells[:cut] + ["x"] * max(0, cut - len(cells)))
        raw = ("\n".join(lines) + "\n").encode()
        ragged = (
            i,
            "the row is short" if cut < len(cells) else "more than the header" if cut > len(cells) else "",
        )
    elif kind == "column":
        header.remove(data.draw(st.sampled_from(list(INPUT_COLUMNS))))
        raw = _csv_text(rows, header).encode()
        must_fail = True
    else:
        text = _csv_text(rows, header).encode()
        at = data.draw(st.integers(0, len(text)))
        junk = data.draw(st.sampled_from([b"\xff\xfe", b"\x00", b'"', b"\n\n", b",,,,", b"\r"]))
        raw = text[:at] + junk + text[at:]
        must_fail = junk == b"\xff\xfe"
    folder = tmp_path_factory.mktemp("batch")
    src, out = folder / "in.csv", folder / "out.csv"
    src.write_bytes(raw)
    o = run_cli("predict batch", ["predict", "--batch", src, "--out", out])
    check_refusal(o, sources=[str(src)], names_key=None, must_fail=must_fail)
    if o.code == 0:
        with open(out, newline="", encoding="utf-8") as fh:
            got = list(csv.DictReader(fh))
        with open(src, newline="", encoding="utf-8") as fh:
            assert len(got) == len(list(csv.DictReader(fh)))
        # each row is modelled (finite; a pool of 94 million GPUs rounds to 0 tokens/s/GPU) or says why not
        assert all(r["pred_error"] or 0 <= float(r["pred_tput_per_gpu"]) < math.inf for r in got), o.context()
        assert all("\n" not in (r["pred_error"] or "") for r in got)
        if kind == "ragged" and ragged[1]:
            assert ragged[1] in got[ragged[0] - 1]["pred_error"], o.context()
    else:
        assert not out.exists() and sorted(p.name for p in folder.iterdir()) == ["in.csv"], o.context()


def _unknown_id(flag: str, text: str) -> bool:
    """An id no catalog entry or choice has (aliases count)."""
    cat = _catalog()
    key = text.strip().lower()
    if flag == "--hardware":
        return key not in cat.hardware_by_id and not any(
            key in h.aliases for h in cat.hardware_by_id.values()
        )
    if flag == "--model":
        return key not in cat.models_by_id and not any(key in m.aliases for m in cat.models_by_id.values())
    if flag == "--framework":
        return key not in ("trt", "dynamo-trt", "sglang", "dynamo-sglang", "mori-sglang", "atom", "vllm")
    if flag == "--engine":
        return text not in ("trt", "sglang", "atom")
    return text not in PREDICT_IDS.get(flag, [])


_CATALOG: list[Any] = []


def _catalog() -> Any:
    if not _CATALOG:
        _CATALOG.append(load_catalog(use_env=False))
    return _CATALOG[0]


PLACE_BASE = {
    "--hardware": "b200",
    "--rate": "5",
    "--isl": "2000",
    "--osl": "400",
    "--ttft": "2",
    "--tpot": "0.06",
    "--topology": "disaggregated",
    "--time-limit": "10",
}
PLACE_FLOATS: dict[str, Callable[[float], str | None] | None] = {
    "--rate": positive,
    "--isl": positive,
    "--osl": positive,
    "--returning-share": fraction,
    "--prefix": non_negative,
    "--suffix": non_negative,
    "--ttft": positive,
    "--tpot": positive,
    "--percentile": lambda v: None if 0 < v < 100 else "out",
    "--budget": positive,
    "--power-kw": positive,
    "--network-kv-tb": non_negative,
    "--network-kv-usd-per-tb-hour": non_negative,
    "--latency-usd-per-s": non_negative,
    "--time-limit": positive,
    "--gap": non_negative,
}
PLACE_TEXTS = {
    "--think": ["0.6:30,0.4:600", "1:30", "0.5:30,0.5:x", "1:nan", ":", "1:30:5", "1:-5", "2:30", "1:1e308"],
    "--inventory": ["b200=16", "b200=-1", "nope=8", "b200=1e3", "=8", "b200", "b200=99999999999999999999"],
    "--hardware": ["b200", "b200,h200", "b200,,h200", "b200,nope", ",", "B200 ", "gb200"],
    "--model": ["deepseek-v3", "kimi-k2", "nope", ""],
    "--engine": ["trt", "sglang", "nope", ""],
    "--objective": ["cost", "gpus", "goodput", "speed"],
    "--topology": ["aggregated", "disaggregated", "afd", "sideways"],
    "--price-tier": ["own_hyperscaler", "rent_3yr", "free"],
}


def _place_bad(flag: str, text: str) -> bool:
    if flag in PLACE_FLOATS:
        return bad_float(text, PLACE_FLOATS[flag])
    if flag in ("--hardware", "--model", "--engine"):
        parts = [p for p in text.split(",") if p.strip()] if flag == "--hardware" else [text]
        return not parts or any(_unknown_id(flag, p) for p in parts)
    if flag in ("--think", "--inventory") and not any(part.strip() for part in text.split(",")):
        return False  # no bins, no caps
    if flag == "--think":
        return text not in ("0.6:30,0.4:600", "1:30", "2:30")  # 2:30 is a share above 1: may fail later
    if flag == "--inventory":
        return text not in ("b200=16",)
    if flag in ("--objective", "--topology", "--price-tier"):
        return text in ("speed", "sideways", "free")
    return False


@fuzz_settings(90)
@given(data=st.data())
def test_place_flags(data: st.DataObject) -> None:
    EXAMPLES["place flags"] += 1
    n = data.draw(st.integers(1, 2))
    chosen = data.draw(
        st.lists(st.sampled_from([*PLACE_FLOATS, *PLACE_TEXTS]), min_size=n, max_size=n, unique=True)
    )
    mutated = {
        f: data.draw(
            st.one_of(st.sampled_from(PLACE_TEXTS[f]), junk_text) if f in PLACE_TEXTS else number_text
        )
        for f in chosen
    }
    if "--returning-share" in mutated or "--think" in mutated:  # the think bins need a returning share
        extra = {"--prefix": "8000", "--suffix": "300", "--returning-share": "0.4", "--think": "1:60"}
        flags = {**PLACE_BASE, **extra, **mutated}
    else:
        flags = {**PLACE_BASE, **mutated}
    must_fail = any(_place_bad(f, v) for f, v in mutated.items())
    o = run_cli("place flags", ["place", *[f"{k}={v}" for k, v in flags.items()], "--no-shadow-prices"])
    check_flags(o, mutated, must_fail, ["dse place"], allowed=(0, 2) if must_fail else (0, 2, 3))


# simulate

SIM_FLOATS: dict[str, Callable[[float], str | None] | None] = {
    "--rate-scale": positive,
    "--burst-factor": positive,
    "--burst-start": non_negative,
    "--burst-s": non_negative,
    "--amplitude": fraction,
    "--period": positive,
    "--buffer": positive,
    "--planner-period": positive,
    "--planner-delay": non_negative,
    "--switch-s": non_negative,
    "--horizon": positive,
    "--warmup": non_negative,
    "--dt": positive,
}
SIM_TEXTS = {
    "--lengths": ["0.9:300,0.1:2300", "1:500", "0.5:nan,0.5:1", "1:-5", "2:300", "1:1e308", "x", "0.5:1"],
    "--arrivals": ["constant", "burst", "diurnal", "trace", "poisson"],
    "--planner": ["none", "reactive", "hysteresis", "predictive", "magic"],
}


@pytest.fixture(scope="module")
def sim_inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A real placement from `dse place --json`, and broken placement and trace files."""
    root = tmp_path_factory.mktemp("sim")
    placed = run_cli(
        "baseline", ["place", *[f"{k}={v}" for k, v in PLACE_BASE.items()], "--no-shadow-prices", "--json"]
    )
    assert placed.code == 0, placed.context()
    files = {"good": root / "place.json"}
    files["good"].write_text(placed.stdout)
    junk: dict[str, bytes] = {
        "empty": b"",
        "brace": b"{",
        "list": b"[]",
        "null": b"null",
        "deep": b"[" * 100_000 + b"]" * 100_000,
        "bigint": b'{"best": 1' + b"0" * 5000 + b"}",
        "utf8": b'{"best": "\xff\xfe"}',
        "nobest": b'{"request": {}, "best": null}',
        "nan": b'{"request": NaN}',
    }
    for name, data in junk.items():
        files[name] = root / f"{name}.json"
        files[name].write_bytes(data)
    files["missing"] = root / "missing.json"
    files["folder"] = root
    traces = {
        "trace-ok": "t_s,rate_per_s\n0,5\n300,8\n",
        "trace-empty": "",
        "trace-header": "t_s,rate_per_s\n",
        "trace-nan": "t_s,rate_per_s\n0,nan\n",
        "trace-inf": "t_s,rate_per_s\n0,inf\n",
        "trace-huge": "t_s,rate_per_s\n0,1e308\n",
        "trace-neg": "t_s,rate_per_s\n0,-5\n",
        "trace-down": "t_s,rate_per_s\n10,5\n0,5\n",
        "trace-text": "t_s,rate_per_s\n0,lots\n",
        "trace-missing-cell": "t_s,rate_per_s\n0,\n",
        "trace-cols": "time,rate\n0,5\n",
        "trace-junk": "\x00\xff🦄\n,,,\n",
    }
    for name, text in traces.items():
        files[name] = root / f"{name}.csv"
        files[name].write_text(text, encoding="utf-8", errors="surrogateescape")
    (root / "a-file").write_text("x")
    files["out-file"] = root / "a-file"
    return files


def _sim_bad(flag: str, text: str) -> bool:
    if flag in SIM_FLOATS:
        return bad_float(text, SIM_FLOATS[flag])
    if flag == "--seed":
        return bad_int(text, non_negative)
    if flag == "--lengths":
        return text not in ("0.9:300,0.1:2300", "1:500", "2:300", "0.5:1")
    return text in ("poisson", "magic")


@fuzz_settings(90)
@given(data=st.data())
def test_simulate_flags(
    sim_inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    EXAMPLES["simulate flags"] += 1
    n = data.draw(st.integers(1, 2))
    pool = [*SIM_FLOATS, *SIM_TEXTS, "--seed", "--placement", "--trace"]
    chosen = data.draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n, unique=True))
    mutated: dict[str, str] = {}
    must_fail = False
    for flag in chosen:
        if flag == "--placement":
            name = data.draw(st.sampled_from([k for k in sim_inputs if not k.startswith(("trace", "out"))]))
            mutated[flag] = str(sim_inputs[name])
            must_fail |= name != "good"
        elif flag == "--trace":
            name = data.draw(st.sampled_from([k for k in sim_inputs if k.startswith("trace")]))
            mutated[flag] = str(sim_inputs[name])
            mutated["--arrivals"] = "trace"
            must_fail |= name != "trace-ok"
        elif flag in SIM_TEXTS:
            mutated[flag] = data.draw(st.one_of(st.sampled_from(SIM_TEXTS[flag]), junk_text))
            must_fail |= _sim_bad(flag, mutated[flag])
        else:
            mutated[flag] = data.draw(number_text)
            must_fail |= _sim_bad(flag, mutated[flag])
    if mutated.get("--arrivals") == "trace" and "--trace" not in mutated:
        must_fail = True
    flags = {"--placement": str(sim_inputs["good"]), "--horizon": "600", "--warmup": "60", **mutated}
    out = tmp_path_factory.mktemp("simout") / "out"
    where = data.draw(st.sampled_from(["none", "none", "fresh", "file"]))
    extra = {"none": [], "fresh": ["--out", str(out)], "file": ["--out", str(sim_inputs["out-file"])]}[where]
    if where == "file":
        mutated["--out"] = str(sim_inputs["out-file"])
        must_fail = True
    o = run_cli("simulate flags", ["simulate", *[f"{k}={v}" for k, v in flags.items()], *extra])
    files = [v for k, v in mutated.items() if k in ("--placement", "--trace")]
    check_flags(o, mutated, must_fail, ["dse simulate", *files])
    if where == "fresh":
        if o.code == 0:
            assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUT_FILES), o.context()
        else:
            assert not out.exists(), o.context()
        assert [p.name for p in out.parent.iterdir() if p.name != "out"] == [], o.context()  # no temporaries
    if where == "file":
        assert sim_inputs["out-file"].read_text() == "x", o.context()


OUTPUT_FILES = ["summary.json", "trajectories.parquet", "trajectories.png"]


# study run

STORAGE_URLS = [
    "junk",
    "junk://x",
    # (a well-formed URL whose server does not answer is a storage fault, exit 1: test_safety)
    "postgresql://bob:hunter2@127.0.0.1:abc/dse",
    "postgresql://bob:hunter2@127.0.0.1:1/dse?sslmode=bogus",
    "mysql://bob:hunter2@127.0.0.1:1/dse",
    "sqlite://bob:hunter2@/x.db",
    "bob:hunter2@host",
    "::",
    "\u2028",
]


@fuzz_settings(30)
@given(data=st.data())
def test_study_run_flags(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    """Bad --trials, --seed, --storage and --out: exit 2, one line naming the flag, no traceback,
    no password, no run folder. Every drawn value is bad (a good one would run trials)."""
    EXAMPLES["study run flags"] += 1
    base = tmp_path_factory.mktemp("runflags")
    (base / "a-file").write_text("x")
    mutated: dict[str, str] = {}
    flags = ["--trials", "--seed", "--storage", "--out"]
    for flag in data.draw(st.lists(st.sampled_from(flags), min_size=1, max_size=3, unique=True)):
        if flag == "--storage":
            unwritable = [f"sqlite:///{base}/a-file/x/study.db", f"sqlite:///{base}"]
            mutated[flag] = data.draw(
                st.one_of(
                    st.sampled_from(STORAGE_URLS + unwritable),
                    junk_text.filter(lambda s: "sqlite" not in s and s.strip() != ""),
                )
            )
        elif flag == "--out":
            mutated[flag] = data.draw(st.sampled_from([str(base / "a-file"), str(base / "a-file" / "sub")]))
        elif flag == "--trials":
            bad = st.sampled_from(["x", "1.5", "1e3", "", "--", "0x10", "nan", "0", "-1"])
            mutated[flag] = data.draw(
                st.one_of(bad, number_text).filter(lambda s: (_int_or_none(s) or 0) <= 0)
            )
        else:
            bad = st.sampled_from(
                ["x", "1.5", "1e3", "", "--", "0x10", "nan", "-1", str(2**32), "-99999999999"]
            )
            mutated[flag] = data.draw(
                st.one_of(bad, junk_text).filter(lambda s: not 0 <= (_int_or_none(s) or -1) < 2**32)
            )
    out = base / "out"
    argv = ["study", "run", TINY, "--out", out, "--no-export", *[f"{k}={v}" for k, v in mutated.items()]]
    o = run_cli("study run flags", argv)
    assert "hunter2" not in o.stderr + o.stdout, o.context()
    check_refusal(o, sources=list(mutated), names_key=None, must_fail=True)
    if o.by_argparse:
        assert any(f"argument {f}" in o.stderr for f in mutated), o.context()
    assert not out.exists(), f"left {sorted(map(str, out.rglob('*')))}:\n{o.context()}"
    assert sorted(p.name for p in base.iterdir()) == ["a-file"] and (base / "a-file").read_text() == "x"


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------
# defects the fuzzing found in dse/study and dse/sim, each pinned by its reproducer


def _tiny_copy(tmp_path: Path, old: str = "", new: str = "") -> Path:
    text = TINY.read_text()
    assert old in text
    path = tmp_path / TINY.name
    path.write_text(text.replace(old, new, 1))
    return path


def test_study_run_refuses_a_negative_seed(tmp_path: Path) -> None:
    o = run_cli("known", ["study", "run", TINY, "--out", tmp_path / "out", "--seed", "-1", "--no-export"])
    assert o.code == 2 and "--seed" in error_line(o)


def test_a_negative_seed_in_a_study_file_is_refused(tmp_path: Path) -> None:
    path = _tiny_copy(tmp_path, "seed = 3", "seed = -1")
    o = run_cli("known", ["study", "show", path])
    assert o.code == 2 and "seed" in error_line(o)


def test_study_run_out_under_a_file_names_out(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    argv = ["study", "run", TINY, "--out", tmp_path / "a-file" / "sub", "--trials", "1", "--no-export"]
    o = run_cli("known", argv)
    assert o.code == 2 and error_line(o).startswith("dse: error: --out")


def test_a_placement_with_zero_instances_is_bad_input(sim_inputs: dict[str, Path], tmp_path: Path) -> None:
    doc = json.loads(sim_inputs["good"].read_text())
    doc["best"]["pools"][-1]["instances"] = 0
    bad = tmp_path / "zero.json"
    bad.write_text(json.dumps(doc))
    o = run_cli("known", ["simulate", "--placement", bad, "--horizon", "600", "--warmup", "60"])
    assert o.code == 2 and "instances" in error_line(o)


@pytest.mark.parametrize("axis", [f.name for f in dataclasses.fields(Sweep)])
def test_an_empty_sweep_axis_is_refused_naming_it(axis: str, tmp_path: Path) -> None:
    """Every axis of `[sweep]` written as an empty list is a slip (left out, it is not swept)."""
    head, _, rest = (REPO / "tests" / "data" / "tiny-grid.toml").read_text().partition("[sweep]\n")
    sweep, _, tail = rest.partition("\n[")  # the [sweep] table alone, without the axis if it sweeps it
    kept = [ln for ln in sweep.splitlines() if not ln.startswith(f"{axis} = ")]
    spec = tmp_path / "tiny-grid.toml"
    spec.write_text(head + "[sweep]\n" + "\n".join([f"{axis} = []", *kept]) + "\n\n[" + tail)
    o = run_cli("empty sweep axis", ["study", "run", spec, "--out", tmp_path / "runs"])
    assert o.code == 2, o.context()
    assert error_line(o) == (
        f"dse: error: {spec}: sweep.{axis} = []: "
        "must list at least one value (leave the axis out not to sweep it)"
    )
    assert not (tmp_path / "runs").exists()


def test_zz_fuzz_counts() -> None:
    """The number of cases tried (runs last in this file; `pytest -s` shows the line)."""
    fuzzed = {k: v for k, v in COUNTS.items() if k not in ("baseline", "known")}
    print(
        f"\nfuzz: {sum(fuzzed.values())} CLI cases ("
        + ", ".join(f"{k} {v}" for k, v in sorted(fuzzed.items()))
        + "); outcomes of all CLI calls: "
        + ", ".join(f"{k}: {v}" for k, v in sorted(EXITS.items()))
        + (f"; known defects hit: {dict(KNOWN)}" if KNOWN else "")
    )
    for test in EXAMPLES:  # every fuzz test that ran tried cases
        assert EXAMPLES[test] > 0


def test_fuzz_settings_are_deterministic() -> None:
    s = fuzz_settings(5)
    assert s.derandomize and s.deadline is None and s.database is None
    assert os.environ.get("DSE_CATALOG_DIR") is None
