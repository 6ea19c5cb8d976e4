"""Attention units across the NICs sized for the expert units they feed, as the placement's rows.

An attention instance across the NICs sends each of its sequences' hidden states, every step, to
every scale-up domain its tokens' experts are on (``dse.perf.afd.afd_bytes_per_token``): the wider
the expert instances it feeds, the more its own NICs send. So its batch is capped for a fan-out
(``dse.placement.afd_units``), and an attention shape comes as one unit per fan-out *level*, the
fan-outs of the expert shapes offered across the NICs, narrowest first: a unit's *reach* is the
level its batch is capped for, and it may feed expert units of that level or narrower
(:class:`~formulations.placement_data.PlacementData`'s ``afd_fan_level``).

The simulations deal every attention pool's tokens across the NICs over all the expert pools
across them (``dse.sim.from_placement.expert_routes``), so every attention unit across the NICs
must reach the widest expert unit across the NICs the design buys. Per level ``l`` above the
narrowest, a binary ``fan[l]`` says whether the design buys expert units across the NICs of level
``l`` or wider: they carry nothing unless it is set (``afd_fan_wide``), and attention units across
the NICs whose reach is below ``l`` carry nothing where it is (``afd_fan_narrow``). Until
2026-12-07 (session 58) each attention unit was capped for its own shape's fan-out, and 17 of the
30 attention-FFN designs of ``benchmarks/engine_agreement.py`` whose attention fed wider expert
instances stepped 1.4-8.9% over their TPOT target.

Here are the rows' members per level, in one place for the model, its checker and the root start.
"""

from __future__ import annotations

import numpy as np

from formulations.placement_data import PlacementData, Role
from formulations.slots import serve_cap

# the decode tokens/s either side of a level's rows may carry (the binary's bound), as a multiple
# of what the decode rows need at the most traffic they are sized for, where no budget or
# inventory bounds what a design buys (the checker tests the rule itself, without the bound)
FAN_ROOM = 100.0


def fan_members(data: PlacementData) -> list[tuple[list[int], list[int]]]:
    """Per fan-out level above the narrowest where both exist: the expert units across the NICs of
    that level or wider, and the attention units across the NICs whose reach is below it. Empty
    where ``data`` has one level."""
    if data.afd_fan_level is None:
        return []
    level = np.asarray(data.afd_fan_level, dtype=int)
    role = np.asarray(data.unit_role)
    ffn, attention = role == Role.FFN, (role == Role.ATTENTION) & (level >= 0)
    out = []
    for at in range(1, int(level.max(initial=0)) + 1):
        wide, narrow = np.flatnonzero(ffn & (level >= at)), np.flatnonzero(attention & (level < at))
        if wide.size and narrow.size:
            out.append((wide.tolist(), narrow.tolist()))
    return out


def fan_cap(data: PlacementData, slots: dict[str, np.ndarray]) -> float:
    """Decode tokens/s a level's units may carry on either side (0 where ``data`` has no level's
    rows: every placement's parameters are loaded, so the others pay nothing; ``slots``: the slot
    rows' coefficients, :func:`~formulations.slots.slot_rows`): the most every unit bought with
    the budget or held in the inventory could carry, where they bound it; else :data:`FAN_ROOM`
    times what the decode pool's slot row needs at the most traffic it is sized for, and one
    instance more. A goodput placement's reach (bounded by its budget or inventory) may be
    thousands of times the demand the slot rows are first sized for: with the demand's bound, a
    0.5 requests/s DeepSeek-V3 design on B200 under $3,000 an hour had reached 4,895 times the
    demand in its first round, where it reaches 5,037."""
    if not fan_members(data):
        return 0.0
    dec = np.asarray(data.decode_tok_s, dtype=float)
    per_gpu = np.zeros(data.n_hw)  # the most decode tokens/s a GPU of each hardware carries
    np.maximum.at(per_gpu, data.unit_hw, dec / np.maximum(data.unit_gpus, 1.0))
    price = np.asarray(data.usd_per_gpu_hour, dtype=float)
    affordable = np.where(price > 0, data.budget_usd_hour / np.where(price > 0, price, 1.0), np.inf)
    gpus = np.minimum(np.asarray(data.inventory_gpus, dtype=float), affordable)
    bought = float((per_gpu * gpus).sum()) if np.isfinite(gpus).all() else np.inf
    if np.isfinite(bought):
        return bought + float(np.max(dec, initial=0.0))
    need = (serve_cap(data) * data.output_tokens + float(slots["pool_k"])) / max(float(slots["pool_s"]), 1e-9)
    return FAN_ROOM * max(need, 1.0) + float(np.max(dec, initial=0.0))


def fan_carry(data: PlacementData, x: np.ndarray) -> list[tuple[float, float]]:
    """Per level of :func:`fan_members`, the decode tokens/s the wide expert units and the narrow
    attention units carry at the instance counts ``x``: a design keeps one of them at 0."""
    carry = np.asarray(data.decode_tok_s, dtype=float) * np.asarray(x, dtype=float)
    return [(float(carry[wide].sum()), float(carry[narrow].sum())) for wide, narrow in fan_members(data)]


def fan_set(data: PlacementData, x: np.ndarray) -> np.ndarray:
    """Each level's binary at the instance counts ``x``: 1 where one of its wide expert units runs
    an instance (half of one or more: a solver's leftover below that is none), for the root
    start's rounding and the LPs that fix a design's counts."""
    x = np.asarray(x, dtype=float)
    return np.array([float((x[wide] > 0.5).any()) for wide, _ in fan_members(data)])
