"""Flags more than one command takes, spelled and explained once."""

from __future__ import annotations

import argparse
from pathlib import Path


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
