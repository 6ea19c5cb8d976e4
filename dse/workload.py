"""Traffic and latency targets: what a deployment must serve.

A workload is an open-loop request stream. Some requests start a session (fresh prompts, prefilled
from scratch); the rest are later turns of a session or agent loop that return after a think time
with a long cached prefix and a short new suffix (the midfill case). Between turns each session's
KV cache rests somewhere; how long it rests is binned by think time, and each bin is one KV class
that the tiering model places. Lengths are means here; distributions belong to the simulator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dse.typed_data import at_least_one, fraction, non_negative, open_percent, positive, rule


def think_class_name(dwell_s: float) -> str:
    """The KV class of the returning turns that come back after ``dwell_s`` seconds (``think30s``)."""
    return f"think{dwell_s:g}s"


def share_of_returns(value: float) -> str | None:
    """A think bin's share: a bin of none is no bin (it had been a KV class of no returns)."""
    return None if 0 < value <= 1 else "must be above 0 and at most 1"


@dataclass(frozen=True)
class ThinkBin:
    """A share of returning turns that come back after about ``dwell_s`` seconds."""

    share: float = field(metadata=rule(share_of_returns))
    dwell_s: float = field(metadata=rule(positive))


MIN_REQUESTS_PER_S = 1e-3
"""Below this rate the demand is within the MILP solver's feasibility tolerance (1e-6 requests/s
was once "served" by zero GPUs); one instance serves any rate below it anyway."""


MAX_REQUESTS_PER_S = 1e6
"""Above this rate no question is a deployment's: a million requests a second of 4,000 prompt and
1,000 output tokens takes half a million B200s (dse places it in a second); 1e12 had died in the
MILP's start (an int64 cast) or allocated 55 GiB in the engine-level check, with a traceback."""


def at_least_min_rate(value: float) -> str | None:
    if value < MIN_REQUESTS_PER_S:
        return f"must be at least {MIN_REQUESTS_PER_S:g} requests/s"
    return None if value <= MAX_REQUESTS_PER_S else f"must be at most {MAX_REQUESTS_PER_S:g} requests/s"


@dataclass(frozen=True)
class Workload:
    """Mean request stream. ``returning_share`` of requests are later turns that reuse
    ``cached_prefix_tokens`` of KV and add ``suffix_tokens`` new ones."""

    requests_per_s: float = field(metadata=rule(at_least_min_rate))
    input_tokens: float = field(metadata=rule(at_least_one))  # a fresh request's prompt, one token at least
    output_tokens: float = field(metadata=rule(at_least_one))  # every request streams one at least
    returning_share: float = field(default=0.0, metadata=rule(fraction))
    cached_prefix_tokens: float = field(default=0.0, metadata=rule(non_negative))
    suffix_tokens: float = field(default=0.0, metadata=rule(non_negative))
    think: tuple[ThinkBin, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.think, list):  # (built in Python: the tuple a study file's list makes)
            object.__setattr__(self, "think", tuple(self.think))

    def problem(self) -> tuple[str, str, Any] | None:
        if self.returning_share > 0:
            if self.cached_prefix_tokens <= 0:
                return (
                    "cached_prefix_tokens",
                    "must be positive when returning_share > 0",
                    self.cached_prefix_tokens,
                )
            if (
                self.suffix_tokens < 1
            ):  # a turn comes back with a message: an engine prefills one token at least
                return ("suffix_tokens", "must be at least 1 when returning_share > 0", self.suffix_tokens)
            if not self.think:
                return ("think", "needs at least one think-time bin when returning_share > 0", ...)
            total = sum(b.share for b in self.think)
            if not math.isclose(total, 1.0, abs_tol=1e-6):
                return ("think", "shares must sum to 1", round(total, 6))
            # each bin is a KV class named by its think time (``think30s``): two of one name had
            # been two rows, in the tables and the exports, that no reader could tell apart
            names = [think_class_name(b.dwell_s) for b in self.think]
            twice = next((n for n in names if names.count(n) > 1), None)
            if twice is not None:
                dwell = twice.removeprefix("think").removesuffix("s")
                rule = f"must give each think time once ({dwell} s twice: one bin with their shares summed)"
                return ("think", rule, ",".join(f"{b.share:g}:{b.dwell_s:g}" for b in self.think))
        return None

    @property
    def fresh_per_s(self) -> float:
        return self.requests_per_s * (1.0 - self.returning_share)

    @property
    def returning_per_s(self) -> float:
        return self.requests_per_s * self.returning_share

    @property
    def returning_context_tokens(self) -> float:
        """Tokens of a returning turn once its suffix is prefilled."""
        return self.cached_prefix_tokens + self.suffix_tokens

    def longest_context_tokens(self) -> float:
        """The context a request reaches at its last output token: a fresh prompt and its answer,
        or a returning turn's cached prefix, suffix and answer."""
        fresh = self.input_tokens + self.output_tokens
        if self.returning_share <= 0:
            return fresh
        return max(
            fresh if self.returning_share < 1 else 0.0, self.returning_context_tokens + self.output_tokens
        )

    def context_problem(self, max_context: float, model: str) -> tuple[str, str, float] | None:
        """(field, rule, value) when a request would outgrow ``model``'s context window."""
        if self.longest_context_tokens() <= max_context:
            return None
        back = self.returning_share > 0 and self.returning_context_tokens >= self.input_tokens
        prompt = self.returning_context_tokens if back else self.input_tokens
        # the larger part names the field: the prompt's (a returning turn's prefix, or the
        # input), or the output
        key = "cached_prefix_tokens" if back else "input_tokens"
        if back and self.suffix_tokens > self.cached_prefix_tokens:  # (--suffix 1e9 had named --prefix)
            key = "suffix_tokens"
        key = "output_tokens" if self.output_tokens > prompt else key
        rule = (
            f"with the other lengths and the output ({self.longest_context_tokens():,.0f} tokens) "
            f"must fit {model}'s context of {max_context:,.0f} tokens"
        )
        return key, rule, getattr(self, key)

    def mean_prompt_tokens(self) -> float:
        s = self.returning_share
        return (1.0 - s) * self.input_tokens + s * self.returning_context_tokens


def target_percent(value: float) -> str | None:
    """A TTFT target's percentile: in (0, 100), and not below 1, where a fraction typed for a
    percentile lands (``0.99`` for p99 had held the target at p0.99, the quickest requests')."""
    if open_percent(value) is None and value < 1:
        return "must be at least 1 (a percentile: p99 is 99, not 0.99)"
    return open_percent(value)


TPOT_MAX_S = 2.0
"""The slowest TPOT target taken, seconds per output token (half a token a second per user): a
target in milliseconds typed as seconds (50 for 50 ms) had been taken as 50 s a token and met
by any design."""


def _seconds_target(value: float, most: float, unit: str) -> str | None:
    """A latency target in seconds: > 0 and at most ``most`` (``unit`` names what a second is of
    and how a millisecond figure is written)."""
    if positive(value) is not None:
        return positive(value)
    return f"must be at most {most:g} s{unit}" if value > most else None


def tpot_target(value: float) -> str | None:
    """A TPOT target: seconds per output token, > 0 and at most :data:`TPOT_MAX_S`."""
    return _seconds_target(value, TPOT_MAX_S, " per output token (seconds: 50 ms is 0.05)")


TTFT_MAX_S = 600.0
"""The longest TTFT target taken, seconds (ten minutes before the first token): a target in
milliseconds typed as seconds (2000 for 2 s) had been taken as 33 minutes and met by a design
sized for no latency at all."""


def ttft_target(value: float) -> str | None:
    """A TTFT target: seconds, > 0 and at most :data:`TTFT_MAX_S`."""
    return _seconds_target(value, TTFT_MAX_S, " (seconds: 500 ms is 0.5)")


@dataclass(frozen=True)
class Slo:
    """Latency targets. ``percentile`` applies to TTFT (queueing has a tail); a decode step at a
    given batch is deterministic in this model, so TPOT is held at its value at the mean context."""

    ttft_s: float = field(metadata=rule(ttft_target))
    tpot_s: float = field(metadata=rule(tpot_target))
    percentile: float = field(default=50.0, metadata=rule(target_percent))

    @property
    def wait_quantile_factor(self) -> float:
        """Multiplier from the mean queueing wait to its percentile, taking the wait as
        exponential (heavy-traffic M/G/1): ``-ln(1 - p)``, at least the mean itself."""
        return max(1.0, -math.log(1.0 - self.percentile / 100.0))
