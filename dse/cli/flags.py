"""Flags more than one command takes, spelled and explained once."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_precision(p: argparse.ArgumentParser) -> None:
    """``--precision``: the routed experts' weights; none given, the model's serving precision
    (:attr:`dse.catalog.model.Model.serving_precision`)."""
    p.add_argument(
        "--precision",
        choices=["fp4", "fp8", "bf16"],
        help="routed-expert weight precision (default: the model's serving precision, fp4 for "
        "checkpoints that ship fp4 experts, else fp8; `dse catalog show MODEL`)",
    )


def path_arg(text: str) -> Path:
    """The type of a flag that names a file or folder: an empty one (`--out "$UNSET"`) is refused,
    where ``Path("")`` would be the current folder and a command would write its files there."""
    if not text:
        raise argparse.ArgumentTypeError("must name a file or folder, not be empty")
    return Path(text)


class Typed(float):
    """A number flag's value: a float, shown in messages as it was typed (``--conc 4`` is
    ``--conc = 4``, not ``4.0``). Arithmetic on it gives plain floats."""

    _text: str

    def __new__(cls, text: object) -> Typed:
        value = super().__new__(cls, text)  # type: ignore[arg-type]
        value._text = str(text).strip() if isinstance(text, str) else float.__repr__(value)
        return value

    def __repr__(self) -> str:
        return self._text

    def __reduce__(self) -> tuple[object, ...]:
        return (Typed, (self._text,))


def number(text: str) -> float:
    """The type of a number flag (argparse's ``type=float``), which remembers how it was typed."""
    return Typed(text)


number.__name__ = "float"  # argparse names the type in its refusals: "invalid float value: 'abc'"


def note_given(action: argparse.Action) -> None:
    """``action`` as it was, noting in ``args.given`` that its flag was given (in full,
    abbreviated or with ``=``): a flag of another kind of arrivals, of no planner, or of the
    request beside ``--placement`` (``dse simulate``), or of one deployment beside ``--batch``
    (``dse predict``), is refused when given at all, its default value too (``--burst-factor 2``
    without ``--arrivals burst`` had run a constant rate, and said nothing). Each keeps its own
    action (``--mtp`` stores True); the parser sets ``given=frozenset()`` as a default."""

    class Noting(type(action)):  # type: ignore[misc]
        def __call__(
            self,
            parser: argparse.ArgumentParser,
            namespace: argparse.Namespace,
            values: Any,
            option_string: str | None = None,
        ) -> None:
            super().__call__(parser, namespace, values, option_string)
            namespace.given = frozenset(getattr(namespace, "given", frozenset())) | {self.dest}

    action.__class__ = Noting
