"""Attention-FFN units that keep to one scale-up domain, as coefficients of the placement's rows.

An attention-FFN unit, an expert instance and the attention instances that feed it, whose GPUs all
fit in one scale-up domain of its hardware (``dse.perf.afd.afd_in_domain``: a GB200 NVL72 rack
holds 72) moves its hidden states over NVLink, not the NICs. The placement then keeps it there
(``formulations.placement._add_domain_rows``, re-evaluated by
``formulations.placement_check``): these are the rows' coefficients per unit, read from
:class:`~formulations.placement_data.PlacementData`'s pairs, in one place for the model, its
checker and the root start's rounding.
"""

from __future__ import annotations

import numpy as np

from formulations.placement_data import PlacementData, Role


def afd_domain_rows(data: PlacementData) -> dict[str, np.ndarray]:
    """The coefficients of the attention-FFN domain rows, per unit, from ``data``'s pairs: an FFN
    unit's attention instances at most beside one instance (``afd_beside``), the share of an
    attention instance one instance may take (``afd_share``) and the domains one instance takes
    (``afd_domain_share``), 0 where its unit does not fit a domain; an attention unit's row bound
    (``afd_open``: 0 where an FFN unit beside it fits a domain, else no bound); and whether a
    unit's decode counts in ``afd_fed`` (an FFN unit whose tokens cross the NICs, an attention
    unit with an FFN unit beside it). All 0, every attention unit open, where it has no pairs."""
    n = data.n_units
    zero = np.zeros(n)
    if data.afd_partner is None or data.afd_attention_per_ffn is None:
        return {"afd_beside": zero, "afd_share": zero, "afd_domain_share": zero,
                "afd_open": np.full(n, np.inf), "afd_feeds": zero}  # fmt: skip
    assert data.afd_ffn_per_attention is not None and data.afd_units_per_domain is not None
    beside = np.asarray(data.afd_attention_per_ffn, dtype=float)
    near = beside > 0
    per = np.where(near, data.afd_ffn_per_attention, 1.0)
    share = np.where(near, 1.0 / per, 0.0)
    domains = np.where(near, 1.0 / (per * np.where(near, data.afd_units_per_domain, 1.0)), 0.0)
    partner = np.asarray(data.afd_partner, dtype=int)
    racked = np.zeros(n, dtype=bool)
    racked[partner[near & (partner >= 0)]] = True  # an attention unit with an FFN unit beside it
    role = data.unit_role
    feeds = np.where(role == Role.FFN, ~near, np.where(role == Role.ATTENTION, racked, False))
    return {
        "afd_beside": beside,
        "afd_share": share,
        "afd_domain_share": domains,
        "afd_open": np.where(racked, 0.0, np.inf),
        "afd_feeds": feeds.astype(float),
    }
