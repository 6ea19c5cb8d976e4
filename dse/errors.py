"""The small error family of the engine.

Three kinds, as the style guide asks:

* :class:`InputError` - bad input (a catalog file, a study file, a flag). The CLI prints its one
  line and exits with code 2. It always names where the input came from, the field, the value and
  the rule it broke.
* :class:`NoFeasibleDesign` - an expected outcome: no design satisfies the constraints. One line
  naming the binding constraint with its numbers; exit code 3.
* :class:`NoBestDesign` - feasible designs, none of them with a value for the objective the best
  is picked by (an objective function that gave None for each): one line saying so; exit code 3.
* :class:`StorageFault` - the disk or database a run writes to refused (full, read-only,
  locked): one line naming the cause and the path; exit code 1. What was stored is kept.
* :class:`Interrupted` - Ctrl-C (or SIGTERM) with what it left: one line, exit code 130 (143).
  A ``KeyboardInterrupt``, not an ``Exception``: a caller's ``except Exception`` (a script that
  logs a failed study and goes on to the next) must not catch a Ctrl-C.
* everything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import errno
import re


class DseError(Exception):
    """Base class of the errors the CLI turns into one line."""

    exit_code = 1

    def __reduce__(self) -> tuple[object, ...]:
        # rebuilt from its message and attributes, whatever the subclass's constructor takes: a
        # study's sampler process hands its errors to the run this way
        return (_restore, (type(self), str(self), dict(self.__dict__)))


def _restore(
    cls: type[DseError] | type[Interrupted], message: str, state: dict[str, object]
) -> DseError | Interrupted:
    err = cls.__new__(cls)
    BaseException.__init__(err, message)
    err.__dict__.update(state)
    return err


class InputError(DseError):
    """Bad input: names the source, the field, the value and the rule.

    Parameters
    ----------
    source
        Where the input came from (a file path, ``--flag``, ``study spec``).
    field
        Dotted field name inside the source, empty if the whole source is bad.
    rule
        The rule that was broken, stated as a rule ("must be > 0").
    value
        The offending value, shown with ``repr``; omitted when ``...`` (the default).
    """

    exit_code = 2

    def __init__(self, source: str, field: str, rule: str, value: object = ...) -> None:
        self.source = str(source)
        self.field = field
        self.rule = rule
        self.value = value
        # one line whatever the input holds: a key or a path may carry a newline, and a rule may
        # quote a driver's multi-line message
        src, key = _printable(self.source), _printable(field)
        where = f"{src}: {key}" if field else src
        shown = "" if value is ... else f" = {_short_repr(value)}"
        super().__init__(f"{where}{shown}: {_printable(_LINE_BREAKS.sub(' ', rule))}")


def typed_arg(value: object, cls: type, arg: str, *, optional: bool = True) -> None:
    """Bad input naming ``arg`` when ``value`` (an argument of the Python API) is not a ``cls``
    (or None, when ``optional``): the object had been used as one deep inside, and failed there
    with an ``AttributeError`` naming an attribute the caller never wrote."""
    if (value is None and optional) or isinstance(value, cls):
        return
    what = f"a {cls.__qualname__}" + (" or None" if optional else "")
    raise InputError(arg, "", f"must be {what}, not {type(value).__name__}", value)


class Written(str):
    """A value as the input spelled it (a CSV cell, a flag's text): a number is shown bare, as it
    was typed (``--tp = 7``; it had been ``7.0``, or ``'7'``), other text quoted, so that an empty
    or odd value stays visible."""

    __slots__ = ()

    def __repr__(self) -> str:
        text = str.__str__(self)
        try:
            float(text)  # (of the plain text: float's own error message would call this repr)
        except ValueError:
            return repr(text)
        return text


class UnknownIdError(InputError):
    """An id that is not in a catalog; the message lists the valid ids."""

    def __init__(self, kind: str, wanted: str, valid: list[str], source: str = "catalog") -> None:
        self.valid = sorted(valid)
        super().__init__(source, kind, f"unknown {kind} id; valid ids: {', '.join(self.valid)}", wanted)


class NoFeasibleDesign(DseError):
    """No design satisfies the constraints; ``binding`` names the constraint family."""

    exit_code = 3

    def __init__(self, binding: str, detail: str) -> None:
        self.binding = binding
        self.detail = detail
        super().__init__(_printable(_LINE_BREAKS.sub(" ", f"no feasible design: {binding}: {detail}")))


class NoBestDesign(DseError):
    """Feasible designs, but none to pick as the best: none has a value for the objective that
    ranks them (it had been said as no feasible design, beside a count of feasible trials)."""

    exit_code = 3

    def __init__(self, subject: str, detail: str) -> None:
        self.subject = subject
        self.detail = detail
        super().__init__(_printable(_LINE_BREAKS.sub(" ", f"no best design: {subject}: {detail}")))


class StorageFault(DseError):
    """The storage a run writes to refused a write or an open: ``cause`` in words, ``where`` the path
    or (password-free) URL. Nothing already stored is lost; the same command resumes once it is
    fixed."""

    exit_code = 1

    def __init__(self, where: str, cause: str, detail: str = "") -> None:
        self.where, self.cause = where, cause
        more = f" ({detail})" if detail else ""
        super().__init__(_printable(_LINE_BREAKS.sub(" ", f"{where}: {cause}{more}")))


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM, said in one line (what was kept, how to resume); exit code 130 (143 for
    SIGTERM). A ``KeyboardInterrupt`` as Python's own Ctrl-C is, so ``except Exception`` lets it
    through; the command line prints it as it prints a :class:`DseError`."""

    exit_code = 130

    def __reduce__(self) -> tuple[object, ...]:
        return (_restore, (type(self), str(self), dict(self.__dict__)))


REFUSALS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk is full",
    errno.EROFS: "it is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
}
"""What an output's write error means when the place refused it rather than the path being wrong."""


def output_error(exc: OSError, source: str, flag: str, path: object) -> DseError:
    """An output that could not be written: the place refused (full, read-only, not permitted) is
    a :class:`StorageFault` (exit 1), as a study's storage that refuses is; else the path given is
    wrong (a folder where a file goes, a missing parent that cannot be made): bad input (exit 2)."""
    if exc.errno in REFUSALS:
        return StorageFault(str(path), REFUSALS[exc.errno], f"{source}: {flag}")
    return InputError(source, flag, f"cannot be written ({exc.strerror or exc})", str(path))


_LINE_BREAKS = re.compile(r"\s*[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]\s*")


def _printable(text: str) -> str:
    """``text`` with every character that is not printable (line breaks, control and format
    characters) shown as its escape, so a message stays one line and shows what the input holds."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _short_repr(value: object, limit: int = 80) -> str:
    try:
        # a boolean as the TOML and JSON the input was written in spell it (``tdp_w = true``)
        text = ("true" if value else "false") if isinstance(value, bool) else repr(value)
    except (ValueError, RecursionError):  # an int of more than 4300 digits, a deeply nested list
        text = f"<{type(value).__name__} too large to show>"
    text = _printable(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
