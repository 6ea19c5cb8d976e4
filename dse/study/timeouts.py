"""How long a study run waits on things that may not answer: plain numbers, cheap to import (the
CLI shows them as defaults). The two waits on a database server can be set from the environment
(:func:`db_answer_s`, :func:`storage_retry_s`): an operator whose server fails over slowly waits
longer, a test shorter."""

from __future__ import annotations

import math
import os

from dse.errors import InputError

TRIAL_WALL_S = 60.0
"""Default cap on one trial's wall time; a trial over it is recorded infeasible with the reason."""
STORAGE_RETRY_S = 120.0
"""How long a worker waits for an unreachable shared storage before giving up with one line."""
STORAGE_RETRY_ENV = "DSE_STORAGE_RETRY_S"
DB_ANSWER_S = 30.0
"""How long a database server may leave a connection or a statement without a byte of answer
before it counts as away (a server stopped, frozen or cut off by the network, whose TCP
connection stays open: without a bound a worker waited for it forever)."""
DB_ANSWER_ENV = "DSE_DB_ANSWER_S"
STALE_AFTER_S = 120.0
"""Shared storage: a running trial whose worker sent no heartbeat this long lost its worker."""


def storage_retry_s() -> float:
    """:data:`STORAGE_RETRY_S`, or the seconds ``DSE_STORAGE_RETRY_S`` holds."""
    return _seconds(STORAGE_RETRY_ENV, STORAGE_RETRY_S)


def db_answer_s() -> float:
    """:data:`DB_ANSWER_S`, or the seconds ``DSE_DB_ANSWER_S`` holds."""
    return _seconds(DB_ANSWER_ENV, DB_ANSWER_S)


def _seconds(name: str, default: float) -> float:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0.1 <= value <= 1e6):
        raise InputError(name, "", "must be a number of seconds from 0.1 to 1e6 (environment variable)", text)
    return value
