"""How long a study run waits on things that may not answer: plain numbers, cheap to import (the
CLI shows them as defaults)."""

TRIAL_WALL_S = 60.0
"""Default cap on one trial's wall time; a trial over it is recorded infeasible with the reason."""
STORAGE_RETRY_S = 120.0
"""How long a worker waits for an unreachable shared storage before giving up with one line."""
STALE_AFTER_S = 120.0
"""Shared storage: a running trial whose worker sent no heartbeat this long lost its worker."""
