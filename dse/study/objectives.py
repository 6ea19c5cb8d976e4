"""A study's objectives: recorded metrics, or Python functions of a trial's metrics."""

from __future__ import annotations

import hashlib
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from dse.errors import InputError
from dse.metrics import METRICS, objective_rule

# the magnitude of the value a trial without one gets (no design, or an objective that gave nan):
# the worst either way, so samplers still rank it; the exports show no value
NO_VALUE = 1e12
NO_VALUE_KEY = "no_value"
"""The key of a trial's record that lists its objectives without a value (told as the worst
value, whose magnitude a function's real values may reach: tokens per year)."""

MetricFn = Callable[[Mapping[str, float]], float]
NAME = re.compile(r"[A-Za-z0-9_.-]+")  # a custom objective's name


class ObjectiveError(InputError):
    """A custom objective failed on trial ``trial``'s metrics: it raised (the exception is this
    error's ``__cause__``), read a metric trials do not have, or returned no number. One line
    naming the objective; ``rule`` names the trial (:func:`at`)."""

    def __init__(self, name: str, trial: int | None, rule: str, value: object = ...) -> None:
        self.name, self.trial = name, trial
        super().__init__("objective", name, rule, value)

    def noted(self, note: str) -> ObjectiveError:
        """The same error with ``note`` added to its line."""
        return type(self)(self.name, self.trial, f"{self.rule}; {note}", self.value)


class MissingMetric(ObjectiveError, KeyError):
    """A custom objective read a metric trials do not have. A ``KeyError`` too, as any mapping's
    missing key is: a function that handles one itself (``except KeyError: ...``) goes on (it had
    stopped the run all the same); one that does not stops the run with the metrics listed."""

    __str__ = Exception.__str__  # one line, not KeyError's quoted repr


def at(trial: int | None) -> str:
    """A trial, as an objective's error or warning names it."""
    return f"trial {trial}" if trial is not None else "a trial"


class ObjectiveWarning(UserWarning):
    """A custom objective returned nan or an infinity: the trial is stored without a value; or a
    resumed study's function is not the one its stored trials were valued by."""


def code_digest(fn: Any) -> str | None:
    """A digest of a function's code (its bytecode, constants and names, nested functions'
    too), to tell whether a resumed study's objective is the function its trials were valued
    by; None for a callable without Python code (a builtin). The same source under another
    Python may digest otherwise, and values a closure captures are not in it."""
    code = getattr(fn, "__code__", None) or getattr(type(fn).__call__, "__code__", None)
    if code is None:
        return None
    h = hashlib.sha256()

    def add(c: Any) -> None:
        h.update(c.co_code)
        h.update(repr(c.co_names).encode())
        for const in c.co_consts:
            if hasattr(const, "co_code"):
                add(const)
            elif isinstance(const, frozenset):  # (its repr's order moves with PYTHONHASHSEED)
                h.update(repr(sorted(map(repr, const))).encode())
            else:
                h.update(repr(const).encode())

    add(code)
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class ObjectiveDef:
    """A study objective: a recorded metric, or a Python function of the trial's metrics."""

    name: str
    direction: Literal["minimize", "maximize"]
    fn: MetricFn | None = None

    @classmethod
    def custom(cls, name: str, fn: MetricFn, direction: Literal["minimize", "maximize"]) -> ObjectiveDef:
        """``fn`` of a trial's metrics, under a name of its own (a column ``objective_<name>``);
        checked here, before a run writes anything: a function that cannot be called with the
        metrics alone would fail only at the first trial."""
        # a column name BI tools and Hive partitions take as it is
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise InputError("objective", "name", "must be ASCII letters, digits, '_', '-' or '.'", name)
        if name in METRICS:
            rule = "is a built-in metric's name: give the function a name of its own"
            raise InputError("objective", "name", rule, name)
        why = _not_unary(fn)
        if why is not None:
            rule = f"must be a function of one argument, the trial's metrics (m['gpus'], ...): {why}"
            raise InputError("objective", name, rule)
        return cls(name, direction, fn)

    @classmethod
    def metric(cls, name: str) -> ObjectiveDef:
        why = objective_rule(name)
        if why is not None:
            raise InputError("objective", "name", why, name)
        m = METRICS[name]
        assert m.direction in ("minimize", "maximize")
        return cls(name, "minimize" if m.direction == "minimize" else "maximize")


def _not_unary(fn: Any) -> str | None:
    """Why ``fn`` cannot be called with one positional argument (a trial's metrics), or None
    (also when Python cannot tell: a builtin without a signature)."""
    if not callable(fn):
        return f"{_short(fn)} ({type(fn).__name__}) cannot be called"
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    try:
        sig.bind(None)
    except TypeError as exc:
        label = getattr(fn, "__name__", type(fn).__name__)
        return f"{label}{sig} cannot be called with one ({exc})"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
