"""Turn parsed TOML (plain dicts) into frozen dataclasses, validating as it goes.

One generic builder serves every data file of the engine (catalogs now, study specs later): the
dataclass declares the schema through its type hints, and per-field rules sit in the field's
metadata (``rule=positive``). Every failure is an :class:`~dse.errors.InputError` naming the file,
the dotted key, the value and the rule, so no raw dict travels past the loader.
"""

from __future__ import annotations

import csv
import dataclasses
import enum
import functools
import math
import numbers
import re
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from dse.errors import InputError

T = TypeVar("T")

Rule = Callable[[Any], "str | None"]
"""A rule returns ``None`` when the value is fine, else the rule text ("must be > 0")."""


def positive(value: float) -> str | None:
    return None if value > 0 else "must be > 0"


def non_negative(value: float) -> str | None:
    return None if value >= 0 else "must be >= 0"


def open_percent(value: float) -> str | None:
    """A percentile: strictly inside (0, 100) (p0 and p100 are a sample's extremes, not a target)."""
    return None if 0 < value < 100 else "must be in (0, 100)"


def at_least_one(value: float) -> str | None:
    return None if value >= 1.0 else "must be at least 1"


def draft_depth(value: int) -> str | None:
    """Draft tokens per speculative step: a whole number from 1 to 16 (as ``dse predict`` takes)."""
    return None if float(value).is_integer() and 1 <= value <= 16 else "must be a whole number from 1 to 16"


def acceptance(value: float) -> str | None:
    return None if 0 < value < 1 else "must be between 0 and 1, exclusive"


def gap_rule(value: float) -> str | None:
    """A relative MIP gap: 0.05 stops within 5% of the optimum; 1 or more accepts any design."""
    return None if 0 <= value < 1 else "must be at least 0 and below 1 (a relative gap: 0.05 is 5%)"


def fraction(value: float) -> str | None:
    return None if 0 <= value <= 1 else "must be between 0 and 1"


def non_empty(value: str | tuple[Any, ...]) -> str | None:
    return None if len(value) > 0 else "must not be empty"


ID_CHARACTERS = re.compile(r"[a-z0-9._-]+")
"""What an id is made of: flags list ids with commas (``--hardware b200,h200``), and a space or a
slash would break those lists and the folders named after them."""


def lower_id(value: str) -> str | None:
    """An id as catalog ids are: not empty, lower case (lookups lower-case what users type), of
    letters, digits, dots, dashes and underscores."""
    if not value:
        return "must not be empty"
    if value != value.lower():
        return "must be lower case"
    return None if ID_CHARACTERS.fullmatch(value) else "must hold only a-z, 0-9, '.', '-' and '_'"


def one_of(*allowed: int) -> Rule:
    def check(value: int) -> str | None:
        shown = ", ".join(str(a) for a in allowed)
        return None if value in allowed else f"must be one of {shown}"

    return check


MAX_MAGNITUDE = 1e12
MIN_MAGNITUDE = 1e-9
"""Every number in a data file is 0 or between these in magnitude. Units live in the key names
and are chosen so that real values sit far inside (the shipped files span 0.04 to 1e6), and the
engine multiplies them by unit factors and by each other without overflowing float64."""


def plausible(value: float) -> str | None:
    """The range rule every number of a data file obeys (see :data:`MAX_MAGNITUDE`)."""
    if value != 0 and not MIN_MAGNITUDE <= abs(value) <= MAX_MAGNITUDE:
        return f"must be 0 or between {MIN_MAGNITUDE:g} and {MAX_MAGNITUDE:g} in magnitude"
    return None


def check_number(value: float, *, source: str, key: str, check: Rule | None = None) -> float:
    """A number from a data file or a flag: finite, plausible, and ``check`` when given."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(source, key, "must be a finite number", value)
    broken = plausible(value)
    if broken and check is not None and check(0) is not None:  # 0 is refused too: not offered as a way out
        broken = f"must be between {MIN_MAGNITUDE:g} and {MAX_MAGNITUDE:g}"
    broken = broken or (check(value) if check is not None else None)
    if broken:
        raise InputError(source, key, broken, value)
    return value


def rule(check: Rule) -> dict[str, Rule]:
    """Field metadata carrying a validation rule: ``field(metadata=rule(positive))``."""
    return {"rule": check}


def measured_number(text: str | None, source: str, key: str) -> float:
    """A measured figure of a CSV cell (a throughput, a published rate) that a fit takes the
    logarithm of: a finite number > 0, else one line naming the source, the key and the cell."""
    try:
        value = float(text or "nan")
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InputError(source, key, "must be a measured number > 0", text)
    if broken := plausible(value):
        raise InputError(source, key, broken, text)
    return value


def read_csv(path: Path, key: str) -> tuple[list[str], list[dict[str, str]], list[int]]:
    """(header, rows, lines) of a CSV file: with each row, the line of the file it ends on (the
    header is line 1; blank lines, which hold no row, are counted), so that an error names the line
    an editor, or a spreadsheet's row number, shows. An unreadable file, one that is not UTF-8 or
    not CSV becomes one InputError line naming it and ``key`` (the flag or field that gave the
    path)."""
    try:
        # utf-8-sig: the byte-order mark a spreadsheet's "CSV UTF-8" starts with is not a column's
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            if reader.fieldnames is None:  # had been told as its first required column missing
                raise InputError(str(path), key, "is empty: a CSV needs a header line naming its columns")
            names = list(reader.fieldnames)
            other = next((sep for sep in ("\t", ";") if len(names) == 1 and sep in names[0]), None)
            if other is not None:  # had been told as its first required column missing
                said = "tabs" if other == "\t" else "semicolons"
                rule = f"must be comma-separated: its header line separates its columns with {said}"
                raise InputError(str(path), key, rule)
            # (empty names, a spreadsheet's trailing commas, hold no column anything reads)
            twice = next((n for i, n in enumerate(names) if n and n in names[:i]), None)
            if twice is not None:  # the later column would silently win over the earlier
                raise InputError(str(path), twice, "is a column the header names twice")
            rows, lines = [], []
            for row in reader:
                rows.append(row)
                lines.append(reader.line_num)
            return list(reader.fieldnames or []), rows, lines
    except OSError as exc:
        raise InputError(str(path), key, f"cannot be read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise InputError(str(path), key, f"must be UTF-8 text ({exc.reason})") from None
    except csv.Error as exc:
        raise InputError(str(path), key, f"must be CSV ({exc})") from None


def row_shape_problem(row: Mapping[Any, object]) -> str:
    """What is wrong with a CSV row that has fewer or more fields than the header (``csv.DictReader``
    gives the missing ones ``None`` and files the extra ones under the key ``None``); "" if none."""
    missing = [k for k, v in row.items() if k is not None and v is None]
    if missing:
        have = len(row) - len(missing)
        return f"has {have} of {len(row)} fields: the row is short ({missing[0]} and after are missing)"
    extra = row.get(None)
    if extra:
        n = len(extra) if isinstance(extra, list) else 1
        return f"has {len(row) - 1 + n} fields, {n} more than the header's {len(row) - 1}"
    return ""


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; a syntax error becomes one InputError line."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark, as some editors write, is no text
    except UnicodeDecodeError as exc:
        raise InputError(str(path), "", f"must be UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise InputError(str(path), "", f"cannot be read ({exc.strerror})") from None
    if not text.strip():
        raise InputError(str(path), "", "must not be empty")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(str(path), "", f"must be valid TOML ({exc})") from None
    except RecursionError:
        raise InputError(str(path), "", "must not nest arrays or tables hundreds deep") from None
    except ValueError as exc:  # tomllib lets Python's own limits through: an int of 4300+ digits
        raise InputError(str(path), "", f"must be valid TOML ({str(exc).split(';')[0]})") from None


def build(cls: type[T], data: Mapping[str, Any], *, source: str, prefix: str = "") -> T:
    """Build the frozen dataclass ``cls`` from ``data``, validating every field.

    A class may define ``problem(self) -> (key, rule, value) | None`` for rules across fields; it
    is called once the fields are valid.

    Unknown keys, missing required keys, wrong types, NaN/inf and broken field rules raise
    :class:`InputError` with ``source`` and the dotted key.
    """
    if not isinstance(data, Mapping):
        raise InputError(source, prefix.rstrip("."), "must be a table", data)
    hints, fields = _schema(cls)  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        shown = unknown[0] or '""'  # the empty key, as TOML spells it (else the line names no key)
        raise InputError(source, prefix + shown, f"unknown key; valid keys: {', '.join(sorted(fields))}")
    kwargs: dict[str, Any] = {}
    for name, fld in fields.items():
        key = prefix + name
        if name not in data:
            if fld.default is dataclasses.MISSING and fld.default_factory is dataclasses.MISSING:
                if not _is_optional(hints[name]):
                    raise InputError(source, key, "is required")
                kwargs[name] = None
            continue
        value = _convert(hints[name], data[name], source=source, key=key)
        check = fld.metadata.get("rule")
        if check is not None and value is not None:
            broken = check(value)
            if broken:
                raise InputError(source, key, broken, data[name])
        kwargs[name] = value
    obj = cls(**kwargs)
    problem = obj.problem() if hasattr(obj, "problem") else None
    if problem is not None:
        key, rule_text, value = problem  # "" names the table itself ("sweep", not "sweep.")
        raise InputError(source, prefix + key if key else prefix.rstrip("."), rule_text, value)
    return obj


@functools.cache
def _schema(cls: type) -> tuple[dict[str, Any], dict[str, dataclasses.Field[Any]]]:
    """A dataclass's type hints and init fields, read once per class (resolving the hints is most
    of what a build costs, and a placement request builds its workload and targets again)."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    return typing.get_type_hints(cls), fields


def _is_optional(tp: Any) -> bool:
    return _is_union(tp) and type(None) in typing.get_args(tp)


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _convert(tp: Any, value: Any, *, source: str, key: str) -> Any:
    if _is_union(tp):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"unsupported union {tp} for {key}")
        return _convert(inner[0], value, source=source, key=key)
    origin = typing.get_origin(tp)
    if origin is tuple:
        (item_tp, _ellipsis) = typing.get_args(tp)
        if not isinstance(value, list):
            raise InputError(source, key, "must be a list", value)
        return tuple(_convert(item_tp, v, source=source, key=f"{key}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(tp):
        return build(tp, value, source=source, prefix=key + ".")  # type: ignore[arg-type, type-var]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        valid = [m.value for m in tp]
        if value not in valid:
            raise InputError(source, key, f"must be one of {', '.join(map(str, valid))}", value)
        return tp(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise InputError(source, key, "must be true or false", value)
        return value
    # numpy's numbers too (np.int64 is no int, np.float32 no float): a value read from a frame or
    # an array had been refused from Python as "must be a number"
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise InputError(source, key, "must be an integer", value)
        return check_number(int(value), source=source, key=key)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise InputError(source, key, "must be a number", value)
        return float(check_number(float(value), source=source, key=key))
    if tp is str:
        if not isinstance(value, str):
            raise InputError(source, key, "must be a string", value)
        return value
    raise TypeError(f"unsupported field type {tp} for {key}")


def to_plain(obj: Any) -> Any:
    """The inverse of :func:`build`: a dataclass as plain JSON-ready values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, tuple):
        return [to_plain(v) for v in obj]
    return obj
