"""Flags more than one command takes, spelled and explained once."""

from __future__ import annotations

import argparse


def add_precision(p: argparse.ArgumentParser) -> None:
    """``--precision``: the routed experts' weights; none given, the model's serving precision
    (:attr:`dse.catalog.model.Model.serving_precision`)."""
    p.add_argument(
        "--precision",
        choices=["fp4", "fp8", "bf16"],
        help="routed-expert weight precision (default: the model's serving precision, fp4 for "
        "checkpoints that ship fp4 experts, else fp8; `dse catalog show MODEL`)",
    )
