"""The `dse` command line. Only this package parses flags; it calls the engine's API.

Start-up stays cheap: the command modules import only light vocabulary (enums, catalogs) at the top
and import the engine (pyomo, optuna, polars, numba, scipy, matplotlib) inside the command that runs,
so `dse --help` and `dse catalog list` pay for none of it (``tests/test_startup.py``)."""

from __future__ import annotations

import argparse
import atexit
import io
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from dse import __version__, interrupt
from dse.errors import DseError, InputError, Interrupted

if TYPE_CHECKING:
    from dse.catalog import Catalog


class HelpFormatter(argparse.HelpFormatter):
    """Shows each option's default after its help, when it has one worth showing (not an empty
    string or list: `--think` and `--inventory` had read "(default: )"; a 0 is worth showing)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default is None
            or default is False  # (a flag's; "default in (False, ...)" had hidden every default of 0)
            or default in (argparse.SUPPRESS, "")
            or not action.option_strings
            or (isinstance(default, list) and not default)
        ):
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """The parser of `dse` and of each of its commands: defaults shown in ``--help``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """One line and exit code 2, as every other refusal (argparse prints its usage first):
        the command, what argparse found, and where the flags are listed."""
        if message.startswith("unrecognized arguments: ") and any(
            word == "--catalog-dir" or word.startswith("--catalog-dir=") for word in message.split()
        ):  # a flag of `dse` itself, typed after the command: say where it goes
            message += ": --catalog-dir goes before the command, as in dse --catalog-dir DIR COMMAND ..."
        command = f"{self.prog}: " if self.prog != "dse" else ""
        self.exit(2, f"dse: error: {command}{message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from dse.cli import calibrate_cmd, catalog_cmd, place_cmd, predict_cmd, simulate_cmd, study_cmd

    parser = Parser(
        prog="dse",
        description="Design-space exploration for serving mixture-of-experts models.",
    )
    parser.add_argument("--version", action="version", version=f"dse {__version__}")
    parser.add_argument(
        "--catalog-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="extra catalog folder with hardware/*.toml and models/*.toml; overrides by id "
        "(repeatable; also DSE_CATALOG_DIR)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    catalog_cmd.add_parser(sub)
    predict_cmd.add_parser(sub)
    calibrate_cmd.add_parser(sub)
    place_cmd.add_parser(sub)
    simulate_cmd.add_parser(sub)
    study_cmd.add_parsers(sub)
    runs = {"catalog": catalog_cmd.run, "predict": predict_cmd.run, "calibrate": calibrate_cmd.run,
            "place": place_cmd.run, "simulate": simulate_cmd.run}  # fmt: skip
    runs |= {name: study_cmd.run for name in ("study", *study_cmd.ALIASES)}
    for name, run in runs.items():  # each command's ``run(args, catalog)``, found by parse_args
        sub.choices[name].set_defaults(run=run)
    return parser


def _refuse_dashes_as_value(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """`--flag=--` gives the flag an empty list instead of an error in Python 3.11's argparse
    (the `--` is dropped as the end-of-options marker): refuse it the way argparse refuses
    `--flag --`, with its usage line and exit code 2."""
    for arg in argv:
        if arg == "--":
            return
        flag, eq, value = arg.partition("=")
        if flag.startswith("--") and eq and value == "--":
            parser.error(f"argument {flag}: expected one argument, not '--'")


def _in_its_file(exc: DseError | Interrupted, catalog: Catalog | None) -> DseError | Interrupted:
    """The engine names a catalog entry by its id (``b200: compute.bf16_dense_tflops: ...``); the
    user needs the file that holds it."""
    if isinstance(exc, InputError) and catalog is not None and exc.source in catalog.files:
        return InputError(str(catalog.file_of(exc.source)), exc.field, exc.rule, exc.value)
    return exc


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: exit 0 on success, 2 on bad input, 3 when no design is feasible, 130 when
    interrupted (Ctrl-C, from the first instruction on: the engine is imported in here), 143 when
    stopped by SIGTERM (handled as Ctrl-C is). As the process's own entry (no ``argv``), the
    process ends without tearing its objects down (:func:`_end_at_exit`)."""
    if argv is not None:
        return _command(argv)
    atexit.register(_end_at_exit)  # the first exit handler registered: it runs after all others
    _EXIT_CODE.append(code := _command(None))
    return code


_EXIT_CODE: list[int] = []
"""The code :func:`main` returned as the process's own entry, for :func:`_end_at_exit`."""


def _end_at_exit() -> None:
    """The process's last exit handler: once every other has run (the libraries' own: logging's,
    multiprocessing's, the finalizers'), flush the output and end the process with the command's
    code, without the interpreter's teardown of every object, which took 0.2 s after a 1,000-trial
    study (its engine, models and trials are hundreds of MB). Only after :func:`main` returned a
    code: an escaped exception ends the process as the interpreter does."""
    if not _EXIT_CODE:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # a fault the interpreter's own last flush reports: left to it
            return
    os._exit(_EXIT_CODE[-1])


def _command(argv: Sequence[str] | None) -> int:
    if argv is None and sys.stdout is not None:  # the process's own output: its faults are one line
        sys.stdout = _Stdout(sys.stdout)
    try:
        with interrupt.remembered():
            code = _main(list(sys.argv[1:] if argv is None else argv))
            if code == 0 and interrupt.pressed():  # a Ctrl-C that landed where Python ignores it
                raise KeyboardInterrupt
            if argv is None:  # what is buffered fails here, not in the interpreter's last flush
                sys.stdout.flush()
            return code
    except StdoutFailed as exc:
        print(f"dse: error: standard output: cannot be written ({exc.reason})", file=sys.stderr)
        _silence_stdout()
        return 1
    except KeyboardInterrupt:
        print("dse: interrupted", file=sys.stderr)
        if argv is None:
            _forget_unhandled_interrupt()
        return interrupt.exit_code()
    except BrokenPipeError:  # a reader that stopped early (`| head`): what was written stands
        _silence_stdout()
        return 0
    except Exception:
        if not interrupt.pressed():
            raise
        # the signal came where a library swallowed it (pyomo, mid-update, then failed on its own
        # half-made state): the error is the interruption's, and says nothing of a bug
        print("dse: interrupted", file=sys.stderr)
        return interrupt.exit_code()
    finally:
        if argv is None:  # the process's own entry (not a caller's): its exit code stands
            interrupt.settled()


class StdoutFailed(Exception):
    """Standard output refused a write (a full disk, an I/O error), as the command printed."""

    def __init__(self, exc: OSError) -> None:
        super().__init__(exc)
        self.reason = exc.strerror or str(exc)


class _Stdout:
    """The process's stdout, whose write errors (but a reader that stopped early, which has its own
    handling) become :class:`StdoutFailed`: `dse ... > file` on a full disk is one line, not the
    traceback of whichever print met it."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutFailed(exc) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutFailed(exc) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _main(argv: list[str]) -> int:
    from dse.catalog import load_catalog

    parser = build_parser()
    _refuse_dashes_as_value(parser, argv)
    args = parser.parse_args(argv)
    catalog: Catalog | None = None
    try:
        catalog = load_catalog(args.catalog_dir)
        _warn_of_units(catalog)
        return int(args.run(args, catalog))
    except (DseError, Interrupted) as exc:  # (Interrupted: a Ctrl-C that says what it kept)
        if isinstance(exc, Interrupted):  # a KeyboardInterrupt: the process must not die of SIGINT
            _forget_unhandled_interrupt()
        print(f"dse: error: {_in_its_file(exc, catalog)}", file=sys.stderr)
        return interrupt.exit_code() if exc.exit_code == 130 else exc.exit_code  # (SIGTERM: 143)


def _warn_of_units(catalog: Catalog) -> None:
    """A line on stderr for each hardware figure that looks typed in another unit (8000 in a TB/s
    key): the command still runs with it."""
    from dse.catalog.hardware import unit_doubts

    for h in catalog.hardware_by_id.values():
        for doubt in unit_doubts(h):
            print(f"dse: warning: {catalog.file_of(h.id)}: {doubt}", file=sys.stderr)


def _forget_unhandled_interrupt() -> None:
    """CPython marks a KeyboardInterrupt that escapes code run through ``PyRun_*`` (which some
    extension modules call) as unhandled even once caught, and a process started with ``python -m``
    that carries the mark kills itself with SIGINT as it exits, whatever its code: Ctrl-C during
    such a call made `python -m dse.cli.main` print its line and die of the signal. Any later
    ``PyRun_*`` evaluation clears the mark (CPython's ``run_eval_code_obj`` resets it before it
    runs), and this one runs nothing."""
    import ctypes

    ctypes.pythonapi.PyRun_SimpleString(b"pass")


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush at exit does not report the
    broken pipe again (the recipe of Python's signal documentation)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):  # a stdout with no descriptor (a test's capture)
        pass


if __name__ == "__main__":
    sys.exit(main())
