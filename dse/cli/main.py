"""The `dse` command line. Only this package parses flags; it calls the engine's API."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dse import __version__
from dse.catalog import load_catalog
from dse.cli import calibrate_cmd, catalog_cmd, place_cmd, predict_cmd, simulate_cmd, study_cmd
from dse.errors import DseError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    sub = parser.add_subparsers(dest="command", required=True)
    catalog_cmd.add_parser(sub)
    predict_cmd.add_parser(sub)
    calibrate_cmd.add_parser(sub)
    place_cmd.add_parser(sub)
    simulate_cmd.add_parser(sub)
    study_cmd.add_parsers(sub)
    return parser


COMMANDS = {"catalog": catalog_cmd.run, "predict": predict_cmd.run, "calibrate": calibrate_cmd.run,
            "place": place_cmd.run, "simulate": simulate_cmd.run,
            "study": study_cmd.run, "worker": study_cmd.run, "export": study_cmd.run, "report": study_cmd.run}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: exit 0 on success, 2 on bad input, 3 when no design is feasible."""
    args = build_parser().parse_args(argv)
    try:
        catalog = load_catalog(args.catalog_dir)
        return COMMANDS[args.command](args, catalog)
    except DseError as exc:
        print(f"dse: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
