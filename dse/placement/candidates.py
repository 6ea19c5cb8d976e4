"""Candidate units for the placement MILP, priced by the stage performance model.

A *unit* is one serving instance of one role (prefill, decode, aggregated, decode attention, decode
experts) on one hardware, with its parallelism and operating point fixed. The MILP chooses how many
of each; everything nonlinear (a decode batch that meets TPOT, a prefill utilisation that meets
TTFT, the interference of chunked prefill with decode) is settled here, per unit:

* **prefill** units run at the highest load whose prompts meet TTFT at its percentile, priced as
  the engines batch them (:mod:`dse.placement.prefill_queue`: forwards of what queued during the
  one before, the chance a prompt finds every instance busy, SGLang's hand-shake and attention-DP
  lanes), each prompt's busy time at the batch it rides in. Every unit's TTFT starts with the
  fitted front end and, handed to a decode pool, the fitted hand-off, as in the engine-level
  simulation;
* **decode** units run the largest batch whose step keeps TPOT on target and whose KV fits;
* **aggregated** units come at several prefill time shares ``phi``: decode steps must fit in
  ``(1 - phi) * TPOT`` (prefill forwards take the rest of the time, and decode waits while they
  run). A prompt is prefilled at full speed, as the engines run it (SGLang a prefill batch as its
  own forward, vLLM and TensorRT-LLM a chunk of up to thousands of tokens beside the decode step),
  after the decode step in progress (the batch's time per output token) and the queue of prompts
  ahead of it at utilisation ``phi``. ``dse place`` also offers each at the batches of tighter
  paces (:func:`tpot_paces`) while a shorter step still lets more prompts meet TTFT, so a looser
  TPOT target offers the units a tighter one does that still buy TTFT (not those that would only
  free HBM for resting KV); a search trial searches the batch instead;
* **attention / FFN** units (attention-FFN disaggregation, :mod:`dse.placement.afd_units`) each
  get half the TPOT: with two micro-batches in ping-pong, each side runs one micro-batch while
  the other runs the other; FFN units come at several token batches. The two halves step in
  lockstep, so a design has one pace: ``dse place`` also solves the design at each unit's own
  pace below the target (:attr:`Candidates.tighter_afd_paces`), where an attention batch held by
  HBM, or an FFN unit's fixed batch, steps faster than a loose target and is credited all it
  carries. An FFN unit and the attention unit of its shape that make a unit in one scale-up
  domain (a GB200 NVL72 rack) also come as domain units (``.../nvlink``), beside those across the
  NICs: their hidden states cross NVLink, in no NIC budget, and the MILP keeps them in their
  domain (:mod:`formulations.domains`). Across the NICs an FFN unit comes only where its own NICs
  take its batch's hidden states within its half of the pace after the RDMA waits, as the
  simulations step it (the NIC budget pools the bytes over every instance's NICs), and an
  attention shape once per fan-out level of the expert shapes there
  (:mod:`formulations.fan_out`);
* **midfill** units (the four-stage topology) take returning turns only: their utilisation cap is
  set by a batch of midfills and the fastest allowed way back, not by fresh prompts, and they
  hand the KV to decode as prefill units do. Prefill units may still take returning turns, so the
  MILP opens a midfill pool only where one pays.

Midfill (a returning turn): the reload of its KV from the tier crosses that tier's link in
``reload_s`` (added to TTFT, not to GPU busy time: copy engines move it), then the suffix is
prefilled against the cached prefix. A dropped KV is recomputed in full instead. Resting KV lives
with the units that midfill it (their HBM, host DRAM, local NVMe) or in the network store.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, fields, replace

import numpy as np

from dse.catalog import Catalog, Hardware
from dse.errors import InputError
from dse.perf.afd import SIDE_SHARE as AFD_SIDE_SHARE
from dse.perf.afd import (
    afd_bytes_per_token,
)
from dse.perf.latency_tables import ENGINE_RULES, SGLANG_HOST_RESERVE_GB
from dse.perf.memo import Memo
from dse.perf.params import PerfParams
from dse.perf.pool import Array, Pool
from dse.perf.power import gpu_power_w
from dse.perf.serving import RHO_MAX, decode_capacity_at_tpot, decode_tpot
from dse.placement.afd_units import PACE_APART, FanLevels, add_afd
from dse.placement.prefill_queue import PrefillCurve, prefill_curve
from dse.placement.request import PlacementRequest, Topology
from dse.placement.rows import Row, UnitInfo
from dse.placement.shapes import Shapes, shapes_of, shared_shapes, tier_capacity
from dse.units import GB
from dse.workload import Slo, Workload, think_class_name
from formulations.placement_data import TIERS, Objective, PlacementData, Role
from formulations.slots import wait_beta


@dataclass(frozen=True)
class Exclusion:
    """A unit shape that cannot serve, and why (with the numbers). ``over`` is how far past its
    limit the shape falls, as a ratio of the reason's own figures (what the weights need over
    what HBM offers, the shortest TTFT it gives over the target, ...; inf where the reason has no
    such figure), so an infeasible answer quotes the shapes nearest to serving first."""

    hardware: str
    role: str
    parallel: str
    reason: str
    over: float = field(default=math.inf, compare=False)


@dataclass(frozen=True)
class Candidates:
    data: PlacementData
    units: tuple[UnitInfo, ...]
    exclusions: tuple[Exclusion, ...]
    topology: Topology
    # attention-FFN: the TPOT pace its attention and FFN units were sized at (None: the target),
    # and, built at the target, the tighter paces :func:`build_candidates` may also be asked for
    afd_pace: float | None = None
    tighter_afd_paces: tuple[float, ...] = ()


class _Builder:
    """Collects units and exclusions for one request and topology."""

    def __init__(self, req: PlacementRequest, s: Shapes) -> None:
        self.req, self.s, self.p = req, s, s.params
        self.slo: Slo = req.slo
        self.classes = classes_of(req.workload)
        self.rows: list[Row] = []
        self.excl: list[Exclusion] = []
        self.opts = req.options
        self.tiers = set(req.options.tiers)
        self.cap = req.options.decode_max_batch if req.options.decode_max_batch is not None else np.inf
        self.afd_paces: set[float] = set()  # tighter paces an attention-FFN design may run at
        self.afd_wait = 0.0  # seconds a step's attention-FFN transfers wait on RDMA (add_afd)
        self.fans: FanLevels | None = None  # the fan-out levels across the NICs (add_afd; None: none)
        for i in map(int, np.flatnonzero(~s.fits)):
            self.exclude(
                i,
                "all",
                f"weights need {s.weights_gb[i]:.1f} GB per GPU but {s.hw(i).id} offers "
                f"{s.usable_gb[i]:.1f} GB after the {self.p.hbm_reserve_fraction:.0%} runtime reserve",
                over=float(s.weights_gb[i] / s.usable_gb[i]) if s.usable_gb[i] > 0 else math.inf,
            )

    def exclude(self, i: int, role: str, reason: str, over: float = math.inf) -> None:
        e = Exclusion(self.s.hw(i).id, role, self.s.par[i].label(), reason, over)
        if e not in self.excl:  # a role builder may ask for its shapes more than once
            self.excl.append(e)

    def info(
        self,
        i: int,
        role: Role,
        *,
        suffix: str = "",
        batch: float = 0.0,
        phi: float = 0.0,
        hbm_gb: float,
        weights_gb: float | None = None,
        ttft: float = np.nan,
        tpot: float = np.nan,
    ) -> UnitInfo:
        s = self.s
        cost = s.midfill if role is Role.MIDFILL else s.fresh
        return UnitInfo(
            name=f"{s.hw(i).id}/{role.name.lower()}/{s.par[i].label()}{suffix}",
            hardware=s.hw(i).id,
            role=role,
            parallel=s.par[i],
            decode_batch=batch,
            prefill_share=phi,
            hbm_gb_per_gpu=hbm_gb,
            weights_gb_per_gpu=float(s.weights_gb[i]) if weights_gb is None else weights_gb,
            ttft_s=ttft,
            tpot_s=tpot,
            prefill_batch_requests=float(cost.batch_s[i] / cost.busy_s[i]) if role.prefills else 0.0,
            # each pipeline stage holds its layers' share of every sequence's KV
            kv_shard=float(s.pool.kv_shard[i] * s.pp[i]),
        )

    def prefill_side(
        self,
        row: Row,
        i: int,
        *,
        handoff: bool,
        fresh: bool = True,
        slowest_tier: str | None = None,
        alone: bool = False,
        rho_cap: float = RHO_MAX,
        lead_s: float = 0.0,
        scale: float = 1.0,
        forward_s: float | None = None,
        curve: PrefillCurve | None = None,
        fresh_only: bool = False,
    ) -> float:
        """Fill the prefill coefficients of ``row`` for shape ``i`` (its utilisation, the share of
        its time it prefills, is ``row.share``); returns the fresh TTFT (a midfill
        unit's, ``fresh`` False: a returning turn's by its fastest way back), or nan when no
        utilisation meets the target.

        Fresh prompts and returning turns wait in one queue, so the utilisation cap is set by the
        slower of a fresh prompt and the fastest allowed way back for a returning turn; a tier
        whose reload then still misses TTFT is not allowed on this unit. A midfill unit queues
        returning turns alone, behind a batch of midfills, and its cap is set by the slowest way
        back it takes, ``slowest_tier`` (so faster ones meet TTFT too); ``alone``, it prefills one
        returning turn per forward (a short wait, at the busy time of an unbatched forward).
        ``rho_cap`` caps the utilisation (an aggregated unit's prefill share); ``lead_s`` comes
        before any prefill starts (an aggregated unit's decode step in progress); ``scale``
        multiplies every prefill forward's time (an aggregated instance's fitted factor);
        ``forward_s``, where given, is the forward a queued prompt waits behind (an aggregated
        unit's at its load, :meth:`_loaded_prefill`) in place of a full batch's; ``curve``, where
        given, prices a prefill server's wait and busy time at the load it can take
        (:mod:`dse.placement.prefill_queue`) in place of the queueing surrogate; ``fresh_only``,
        the unit takes no returning turn (its fresh prompts then wait for no way back). The fitted front
        end, and for a handed-off prompt the fitted hand-off, come first, as in the engine-level
        simulation."""
        s, p, slo = self.s, self.p, self.slo
        lead_s += self._offsets(handoff)
        k_q = slo.wait_quantile_factor * p.prefill_queue_factor
        hand_mid = s.returning_handoff_s[i] if handoff else 0.0
        fresh_one, mid_one, rec_one = (scale * c.one_s[i] for c in (s.fresh, s.midfill, s.recompute))
        paths = {}  # tier -> (busy seconds, what it adds to TTFT over a prefix in HBM)
        for tier in TIERS:
            if tier not in self.tiers or fresh_only:
                continue
            if tier == "drop":
                busy = rec_one if alone else scale * s.recompute.busy_s[i]
            else:
                busy = mid_one if alone else scale * s.midfill.busy_s[i]
            paths[tier] = (busy, self._back_adds(i, tier, mid_one, rec_one))
        fixed = lead_s + fresh_one + (s.fresh_handoff_s[i] if handoff else 0.0)
        slowest = fixed if fresh else np.inf
        if self.classes and paths:
            back = lead_s + min(r for _, r in paths.values()) + mid_one + hand_mid
            if slowest_tier is not None and slowest_tier in paths:
                back = lead_s + paths[slowest_tier][1] + mid_one + hand_mid
            slowest = max(fixed, back) if fresh else back
        batch_s = mid_one if alone else scale * (s.fresh if fresh else s.midfill).batch_s[i]
        if forward_s is not None:
            batch_s = forward_s
        waited = _wait(slo.ttft_s - slowest, k_q * batch_s, rho_cap, curve)
        if waited is None:
            return np.nan
        rho, wait, more, row.forward_prompts = waited
        paths = {t: (busy * more[2 if t == "drop" else 1], r) for t, (busy, r) in paths.items()}
        row.share = rho
        row.fresh_s = float(scale * s.fresh.busy_s[i] * more[0]) if fresh else np.inf
        for t, tier in enumerate(TIERS):
            ttft_back = lead_s + paths[tier][1] + mid_one + hand_mid + wait if tier in paths else np.inf
            if ttft_back <= slo.ttft_s * (1 + 1e-9):
                row.mid[:, t], row.reload[:, t] = paths[tier]
        return float((fixed if fresh else slowest) + wait)

    def _fastest_back(self, i: int, scale: float) -> tuple[float, str] | None:
        """A returning turn's fastest way back on shape ``i``, as :meth:`prefill_side` times it
        (its KV's reload and its midfill, or its recompute), with how: (seconds, words), or None
        where no request returns."""
        s = self.s
        mid_one, rec_one = scale * s.midfill.one_s[i], scale * s.recompute.one_s[i]
        ways = {
            ("its recompute" if t == "drop" else f"its KV from {t} and its midfill"): (
                self._back_adds(i, t, mid_one, rec_one) + mid_one
            )
            for t in TIERS
            if t in self.tiers
        }
        if not self.classes or not ways:
            return None
        how = min(ways, key=lambda k: ways[k])
        return float(ways[how]), how

    def _back_adds(self, i: int, tier: str, mid_one: float, rec_one: float) -> float:
        """What a returning turn's way back through ``tier`` adds to its TTFT over a prefix in HBM,
        beside its midfill forward (``mid_one``): its KV's reload, or, dropped, what its recompute
        (``rec_one``) takes beyond that forward."""
        return max(rec_one - mid_one, 0.0) if tier == "drop" else float(self.s.reload_s(i, tier))

    def _kv_past_hbm(self, i: int, *, session: bool) -> tuple[str, float] | None:
        """Why an instance of shape ``i`` cannot hold what its prompts put in HBM beside its
        weights, and by how much (the GB per GPU needed over those offered); None where it can.
        A prompt's KV is one attention-DP rank's (split by the ranks' head shards and the stages),
        a forward's batch spread over the ranks; with ``session``, a returning turn's prefix back
        and its suffix as well. A 190,000-token prompt had been placed on 2 B200 at 200.6 GB per GPU,
        its room after the weights taken as 0."""
        s = self.s
        one = float(s.pool.seq_shard[i] * s.pp[i])  # the GPUs one request's KV is split over
        held = [
            ("a prompt's", float(s.prompt_gb), one),
            ("a forward's", float(s.prefill_ws_gb[i]), one * float(s.pool.attn_dp[i])),
        ]
        if session:
            held.append(("a returning session's", float(s.session_gb), one))
        what, kv_gb, gpus = max(held, key=lambda h: h[1] / h[2])
        need, usable = float(s.weights_gb[i]) + kv_gb / gpus, float(s.usable_gb[i])
        if need <= usable:
            return None
        reserve = self.p.hbm_reserve_fraction
        return (
            f"weights and {what} KV ({kv_gb:,.1f} GB) need {need:.1f} GB per GPU but {s.hw(i).id} offers "
            f"{usable:.1f} GB after the {reserve:.0%} runtime reserve"
        ), need / usable

    def _no_way_back(self, i: int, scale: float) -> tuple[str, float]:
        """Why a prefill shape takes no returning turn: what the fastest way back takes alone,
        before any wait for a busy server, against the TTFT target (and that time over the target)."""
        back = self._fastest_back(i, scale)
        if back is None:
            return "no way back for a returning turn's KV", math.inf
        lead, handoff = self._offsets(True), float(self.s.returning_handoff_s[i])
        total = lead + back[0] + handoff
        pct = f"p{self.slo.percentile:g}"
        waits = "" if total > self.slo.ttft_s else f", then its wait at {pct} for a busy server"
        return (
            f"TTFT {self.slo.ttft_s:g} s cannot be met for a returning turn: alone it takes {total:.3f} s, "
            f"the engines' fitted front end and hand-off ({lead:.3f} s), {back[0]:.3f} s ({back[1]}) "
            f"and {handoff:.3f} s of KV handoff{waits}"
        ), total / self.slo.ttft_s

    def _offsets(self, handoff: bool) -> float:
        """Seconds every prompt's TTFT takes outside the engine's forwards: the fitted front end,
        and the fitted hand-off where the prompt is handed to a decode pool."""
        lat = self.p.latency
        return lat.frontend_s + (lat.handoff_s if handoff else 0.0)

    def shapes(self, role: str, unit: str | None = None) -> list[int]:
        """Shapes that fit and that the options allow for ``role`` ("prefill", "midfill" or
        another); pipeline stages for prefill and midfill only (``unit``: the units the shapes
        are for, where not ``role``, as the exclusions name them)."""
        o = self.opts
        if role == "prefill":  # (the options each role reads, no more: the prefill units' memo keys on them)
            shapes, hws = o.prefill_shapes, o.prefill_hardware
        elif role == "midfill":
            shapes, hws = o.midfill_shapes or o.prefill_shapes, o.midfill_hardware
        else:
            shapes, hws = o.decode_shapes, o.decode_hardware
        s = self.s
        out = [
            int(i)
            for i in np.flatnonzero(s.fits)
            if (s.default[int(i)] if shapes is None else s.par[int(i)].label() in shapes)
            and (hws is None or s.hw(int(i)).id in hws)
        ]
        if role in ("prefill", "midfill"):
            return out
        for i in out:
            if s.par[i].pp > 1 and shapes is not None:  # asked for by name: say why not
                self.exclude(i, unit or role, "pipeline stages run prefill only")
        return [i for i in out if s.par[i].pp == 1]

    def add_prefill(self) -> None:
        """A unit per shape at the utilisation that lets returning turns take the fastest way
        back; where a slower tier (host DRAM, storage) then misses TTFT, another at the lower
        utilisation that admits it, so resting KV can leave HBM at a price in prefill GPUs; and
        one that takes fresh prompts only, where their queue then runs fuller (or where no way
        back meets TTFT on this shape: a midfill pool then takes the returning turns).

        On shared :class:`Shapes` (:func:`~dse.placement.shapes.shapes_of`) the units and
        exclusions are made once per process for the same inputs (:data:`_PREFILL`): a study's
        trials differ mostly in what prefill units do not read (the decode cap and shape)."""
        if not shared_shapes(self.s):
            self._add_prefill()
            return
        o = self.opts
        req, s = self.req, self.s
        key = (id(s), req.workload, req.engine, self.slo, o.tiers, o.prefill_shapes, o.prefill_hardware)
        rows, excl = _PREFILL.get(key, s, self._prefill_units)
        self.rows += rows
        self.excl += [e for e in excl if e not in self.excl]

    def _prefill_units(self) -> tuple[tuple[Row, ...], tuple[Exclusion, ...]]:
        """:meth:`_add_prefill`'s units and exclusions alone (read-only: :meth:`add_prefill` shares
        them), this builder's own left as they were."""
        rows, excl = self.rows, self.excl
        self.rows, self.excl = [], []
        try:
            self._add_prefill()
            made = tuple(self.rows), tuple(self.excl)
        finally:
            self.rows, self.excl = rows, excl
        for r in made[0]:
            r.mid.flags.writeable = r.reload.flags.writeable = False
        return made

    def _add_prefill(self) -> None:
        s, w = self.s, self.req.workload
        case = 1 if self.classes and w.returning_share > 0.5 else 0  # most prompts: fresh or midfills
        for i in self.shapes("prefill"):
            if (over := self._kv_past_hbm(i, session=False)) is not None:
                self.exclude(i, "prefill", *over)
                continue
            seen: set[tuple[bool, ...]] = set()
            curve = prefill_curve(s, i, self.req.engine, self.p, self.slo.percentile, w.requests_per_s, case)
            scale = curve.scale
            ways = [None, *(t for t in TIERS if t in self.tiers and self.classes)]
            session = self._kv_past_hbm(i, session=True) if self.classes else None
            if session is not None:  # its KV cannot come back here: fresh prompts alone
                self.exclude(i, "returning", *session)
                ways = []
            for tier in ways + ([FRESH_ONLY] if self.classes else []):
                row = Row(
                    self.info(i, Role.PREFILL, hbm_gb=0.0), i, len(self.classes), nic=float(s.nic_gb_s[i])
                )
                ttft = self.prefill_side(
                    row, i, handoff=True, slowest_tier=tier, scale=scale, curve=curve,
                    fresh_only=tier == FRESH_ONLY,
                )  # fmt: skip
                admitted = tuple(np.isfinite(row.mid[0]).tolist()) if self.classes else ()
                if not np.isfinite(ttft) or admitted in seen:
                    continue
                seen.add(admitted)
                row.hbm_idle = max(float(s.free_unique_gb[i] - s.prefill_ws_gb[i]), 0.0)
                used = s.weights_gb[i] + s.prefill_ws_gb[i] / (
                    s.pool.kv_shard[i] * s.pp[i]
                )  # resting KV: read_back adds it
                suffix = "" if tier is None else ("/fresh" if tier == FRESH_ONLY else f"/to-{tier}")
                row.info = self.info(i, Role.PREFILL, suffix=suffix, hbm_gb=float(used), ttft=ttft)
                row.info = replace(row.info, prefill_forward_requests=row.forward_prompts)
                self.rows.append(row)
            if seen and self.classes and session is None and not any(any(a) for a in seen):
                self.exclude(i, "returning", *self._no_way_back(i, scale))
            if not seen:
                alone = self._offsets(True) + scale * s.fresh.one_s[i] + s.fresh_handoff_s[i]
                least = self._least(i, curve) if case == 0 else None
                self.exclude(
                    i,
                    "prefill",
                    f"TTFT {self.slo.ttft_s:g} s cannot be met: a prompt alone takes "
                    f"{scale * s.fresh.one_s[i]:.3f} s plus {s.fresh_handoff_s[i]:.3f} s of KV handoff, "
                    f"after the engines' fitted front end and hand-off ({self._offsets(True):.3f} s)"
                    + (
                        f", a returning turn's midfill {s.midfill.one_s[i]:.3f} s and its recompute "
                        f"{s.recompute.one_s[i]:.3f} s"
                        if self.classes
                        else ""
                    )
                    + ("" if least is None else self._lightest(least)),
                    float(alone if least is None else least) / self.slo.ttft_s,
                )

    def _least(self, i: int, curve: PrefillCurve) -> float | None:
        """The TTFT the least load a prefill server can carry gives a fresh prompt at the
        target's percentile (its wait for a busy server and its own forwards), where the curve
        has one; ``curve`` is fresh prompts'."""
        if len(curve.extra_s) < 2:
            return None
        s = self.s
        alone = self._offsets(True) + curve.scale * s.fresh.one_s[i] + s.fresh_handoff_s[i]
        return float(alone + max(float(curve.extra_s[1]), 0.0))

    def _lightest(self, least: float) -> str:
        """:meth:`_least`'s TTFT in words, against the target."""
        over = (least - self.slo.ttft_s) * 1e3
        pct = f"p{self.slo.percentile:g}"
        return f"; at the least load it carries, TTFT {pct} is {least:.3f} s ({over:+.2f} ms)"

    def add_midfill(self) -> None:
        """Units that take returning turns only, on every prefill shape (four-stage)."""
        s = self.s
        if not self.classes:
            self.excl.append(Exclusion("all", "midfill", "any shape", "the workload has no returning turns"))
            return
        for i in self.shapes("midfill"):
            if (over := self._kv_past_hbm(i, session=True)) is not None:  # its every turn is one
                self.exclude(i, "midfill", *over)
                continue
            seen: set[tuple[bool, tuple[bool, ...]]] = set()
            # operating points: batched or one turn per forward, and the slowest way back admitted
            for alone, tier in itertools.product((False, True), [t for t in TIERS if t in self.tiers]):
                row = Row(
                    self.info(i, Role.MIDFILL, hbm_gb=0.0), i, len(self.classes), nic=float(s.nic_gb_s[i])
                )
                curve = None if alone else self._midfill_curve(i)
                ttft = self.prefill_side(
                    row, i, handoff=True, fresh=False, slowest_tier=tier, alone=alone,
                    scale=1.0 if curve is None else curve.scale, curve=curve,
                )  # fmt: skip
                admitted = (alone, tuple(np.isfinite(row.mid[0]).tolist()))
                if not np.isfinite(ttft) or admitted in seen:
                    continue
                seen.add(admitted)
                row.hbm_idle = max(float(s.free_unique_gb[i] - s.prefill_ws_gb[i]), 0.0)
                used = s.weights_gb[i] + s.prefill_ws_gb[i] / (s.pool.kv_shard[i] * s.pp[i])
                suffix = f"/to-{tier}" + ("/alone" if alone else "")
                row.info = self.info(i, Role.MIDFILL, suffix=suffix, hbm_gb=float(used), ttft=ttft)
                row.info = replace(row.info, prefill_forward_requests=row.forward_prompts)
                if alone:
                    row.info = replace(row.info, prefill_batch_requests=1.0)
                self.rows.append(row)
            if not seen:
                self.exclude(
                    i,
                    "midfill",
                    f"TTFT {self.slo.ttft_s:g} s cannot be met by a returning turn: its midfill takes "
                    f"{s.midfill.one_s[i]:.3f} s and its recompute {s.recompute.one_s[i]:.3f} s, "
                    f"plus {s.returning_handoff_s[i]:.3f} s of KV handoff and the reload",
                )

    def _midfill_curve(self, i: int) -> PrefillCurve:
        """A midfill unit's curve: returning turns' suffixes, at most all of them a second."""
        w = self.req.workload
        rate = w.requests_per_s * w.returning_share
        return prefill_curve(self.s, i, self.req.engine, self.p, self.slo.percentile, rate, case=1)

    def decode_points(self, pool: Pool, tpot_s: float | Array) -> tuple[Array, Array]:
        """(output tokens/s, batch) of every shape of ``pool`` at the largest batch, up to the
        options' cap, whose time per output token stays within ``tpot_s``; a column of targets
        ``(k, 1)`` gives ``(k, shapes)`` in one search."""
        s = self.s
        return decode_capacity_at_tpot(
            pool,
            self.p,
            context=s.decode_ctx,
            kv_context=s.kv_ctx,
            tpot_s=np.asarray(tpot_s) if np.ndim(tpot_s) else np.full(len(s), tpot_s),
            speed=s.speed,
            draft_tokens=s.draft,
            accept_tokens=s.accept,
            max_batch=self.cap,
        )

    def alone_s(self, pool: Pool) -> Array:
        """Seconds per output token of one sequence decoding alone on every shape of ``pool``: the
        least TPOT a unit of it reaches, which an infeasible answer quotes."""
        s = self.s
        ones = np.ones(len(s))
        return decode_tpot(
            pool, self.p, batch=ones, context=s.decode_ctx, speed=s.speed, draft_tokens=s.draft,
            accept_tokens=s.accept,
        )  # fmt: skip

    def add_decode(self) -> None:
        s, slo = self.s, self.slo
        rate, batch = self.decode_points(s.pool, slo.tpot_s)
        alone: Array | None = None  # priced only for a shape that misses the target
        for i in self.shapes("decode"):
            if rate[i] <= 0:
                alone = self.alone_s(s.pool) if alone is None else alone
                self.exclude(i, "decode", *_tpot_reason(slo, s.cap_seq[i], float(alone[i])))
                continue
            used = s.weights_gb[i] + batch[i] * s.per_seq_gb[i] / s.pool.kv_shard[i]
            info = self.info(
                i, Role.DECODE, batch=float(batch[i]), hbm_gb=float(used), tpot=float(batch[i] / rate[i])
            )
            self.rows.append(Row(info, i, len(self.classes), dec=float(rate[i]), nic=float(s.nic_gb_s[i])))

    def add_mixed(self) -> None:
        """Aggregated units at every prefill share, at the TPOT target's largest batch and (in
        ``dse place``) at the batches of tighter paces on the grid, whose shorter steps keep
        prompts waiting less, for as long as that still buys TTFT."""
        s, slo = self.s, self.slo
        paces = tpot_paces(slo.tpot_s, self.opts.tighter_paces)
        shares = self.opts.agg_prefill_shares
        if len(paces) > 1:  # every (share, pace) in one search: (share x pace, shapes)
            steps = np.array([[pace * (1.0 - phi)] for phi in shares for pace in paces])
            rates, batches = self.decode_points(s.pool, steps)
        else:  # one search per share, as a search trial's and the warm start's units always were
            found = [self.decode_points(s.pool, paces[0] * (1.0 - phi)) for phi in shares]
            rates, batches = np.array([r for r, _ in found]), np.array([b for _, b in found])
        alone: Array | None = None  # priced only for a shape that misses the target
        # shapes that meet the target at some share: a larger share's miss of TPOT is not what
        # keeps them out, and is not counted as how near they come (their TTFT's miss is)
        decodes = set(map(int, np.flatnonzero((rates[:: len(paces)] > 0).any(axis=0))))
        # shapes whose prompts' KV does not fit beside the weights: at any share and pace
        held = {
            i: self._kv_past_hbm(i, session=bool(self.classes)) for i in self.shapes("decode", unit="mixed")
        }
        full = {i: over for i, over in held.items() if over is not None}
        for n, phi in enumerate(shares):
            offered: set[tuple[int, float]] = set()  # (shape, batch): a pace at the same batch adds nothing
            placed: set[int] = set()
            settled: set[int] = set()  # shapes a tighter pace can buy nothing more for
            # why a shape has no unit, and how far it falls short: its first failure, the target's pace first
            missed: dict[int, tuple[str, float]] = {}
            for k, pace in enumerate(paces):
                rate, batch = rates[n * len(paces) + k], batches[n * len(paces) + k]
                for i in self.shapes("decode", unit="mixed"):
                    key = (i, round(float(batch[i]), 6))
                    if i in full:
                        missed.setdefault(i, full[i])
                    elif rate[i] <= 0:
                        alone = self.alone_s(s.pool) if alone is None else alone
                        why, over = _tpot_reason(slo, s.cap_seq[i], float(alone[i]), 1.0 - phi)
                        missed.setdefault(i, (why, math.inf if i in decodes else over))
                    elif key not in offered and i not in settled:
                        offered.add(key)
                        row = self._add_mixed_row(i, phi, pace, float(rate[i]), float(batch[i]))
                        if isinstance(row, tuple):
                            missed.setdefault(i, row)
                            continue
                        placed.add(i)
                        if len(paces) > 1:  # at this pace's load: a tighter pace's unit carries less
                            limit = self._shortest_step_row(i, phi, float(rate[i]), float(batch[i]))
                            if self._nothing_left(row, limit):
                                settled.add(i)
            for i, (why, over) in missed.items():
                if i not in placed:
                    self.exclude(i, "mixed", f"at prefill share {phi:g}: {why}", over)

    def _shortest_step_row(self, i: int, phi: float, rate: float, batch: float) -> Row:
        """What a unit of shape ``i`` at share ``phi`` would get with no decode step ahead of its
        prompts, its forwards batching what they do at the unit's load (``rate`` tokens/s over
        steps of ``batch / rate``): the most a tighter pace can buy."""
        probe = Row(self.info(i, Role.MIXED, hbm_gb=0.0), i, len(self.classes))
        scale = self.p.latency.agg_prefill_factor
        self.prefill_side(probe, i, handoff=False, rho_cap=phi, lead_s=0.0, scale=scale)
        self._loaded_prefill(probe, i, rate * (1.0 - phi), batch / rate, scale, phi, lead_s=0.0)
        return probe

    @staticmethod
    def _nothing_left(row: Row, limit: Row) -> bool:
        """Whether ``row``'s prompts already take (within 1%) the prefill share and every way
        back that no step ahead would give them: a tighter pace would then only lose decode, and
        free HBM for resting KV, a trade not offered (it would multiply the units of every
        workload with returning turns; docs/cli.md says where it costs)."""
        same_ways = bool((np.isfinite(row.mid) == np.isfinite(limit.mid)).all())
        return row.share >= 0.99 * limit.share and same_ways

    def _add_mixed_row(
        self, i: int, phi: float, pace: float, rate: float, batch: float
    ) -> Row | tuple[str, float]:
        """An aggregated unit of shape ``i`` at prefill share ``phi`` running ``batch`` sequences,
        sized for a TPOT of ``pace``: its row, or why its prompts cannot meet TTFT (and the
        slower of a prompt and a returning turn alone, over the target)."""
        s, slo = self.s, self.slo
        row = Row(
            self.info(i, Role.MIXED, hbm_gb=0.0),
            i,
            len(self.classes),
            dec=rate * (1.0 - phi),
            nic=float(s.nic_gb_s[i]),
        )
        step = batch / rate  # the decode step (per output token) a prompt arrives during, at most
        scale = self.p.latency.agg_prefill_factor
        ttft = self.prefill_side(row, i, handoff=False, rho_cap=phi, lead_s=step, scale=scale)
        if not np.isfinite(ttft):
            back = self._fastest_back(i, scale)  # a returning turn may be what misses, not a prompt
            prompt = scale * s.fresh.one_s[i]
            alone = self._offsets(False) + step + max(prompt, 0.0 if back is None else back[0])
            return (
                f"TTFT {slo.ttft_s:g} s cannot be met: a prompt takes {prompt:.3f} s"
                + ("" if back is None else f" and a returning turn {back[0]:.3f} s ({back[1]})")
                + f" after a decode step of up to {step:.3f} s and the engines' fitted front end "
                f"({self._offsets(False):.3f} s)"
            ), float(alone) / slo.ttft_s
        self._loaded_prefill(row, i, rate * (1.0 - phi), step, scale, phi, lead_s=step)
        ttft = row.info.ttft_s
        kv_used = batch * s.per_seq_gb[i]
        row.hbm_idle = max(float(s.free_unique_gb[i] - kv_used), 0.0)
        row.info = self.info(
            i,
            Role.MIXED,
            suffix=f"/phi{phi:g}" + ("" if pace == slo.tpot_s else f"/tpot{pace * 1e3:g}ms"),
            batch=batch,
            phi=phi,
            hbm_gb=float(s.weights_gb[i] + kv_used / s.pool.kv_shard[i]),
            ttft=ttft,
            tpot=pace,
        )
        self.rows.append(row)
        return row

    def _loaded_prefill(
        self, row: Row, i: int, out_tokens_s: float, step: float, scale: float, phi: float, lead_s: float
    ) -> None:
        """Price an aggregated unit's prompts at the batch its engine forms at the unit's load
        (:func:`forward_batch`), not a full one: a unit whose prompts arrive a few a step pays
        nearly a whole forward's weights read for each (its busy time per prompt), and a queued
        prompt waits behind that forward, not a full batch's (its TTFT). The unit takes requests
        at its decode rate, or fewer where its prefill share runs out first, and the fewer, the
        smaller the batches: a fixed point, met in a few rounds. ``lead_s`` comes before any
        prefill starts (:meth:`prefill_side`). Leaves the TTFT in ``row.info.ttft_s``."""
        s = self.s
        top = out_tokens_s / max(s.workload.output_tokens, 1.0)  # requests/s its decode takes
        full = np.array([s.fresh.busy_s[i], s.midfill.busy_s[i], s.recompute.busy_s[i]])
        mixed = ENGINE_RULES[self.req.engine].mixed
        lam, busy, ttft, forward = top, full, np.nan, 0.0
        for _ in range(4):
            prompts = forward_batch(lam, step, forward, mixed)
            busy = s.busy_at(i, prompts)
            forward = scale * busy[0] * min(prompts, float(s.fresh.batch_s[i] / s.fresh.busy_s[i]))
            probe = Row(row.info, i, len(self.classes))
            ttft = self.prefill_side(
                probe, i, handoff=False, rho_cap=phi, lead_s=lead_s, scale=scale, forward_s=forward
            )
            row.share, row.mid, row.reload = probe.share, probe.mid, probe.reload
            lam = min(top, row.share / max(scale * busy[0], 1e-12))
        more = busy / full  # at least 1: the busy time per prompt of a smaller batch
        row.fresh_s = float(scale * busy[0])
        for t, tier in enumerate(TIERS):  # a returning turn's way back, where it has one
            row.mid[:, t] *= float(more[2] if tier == "drop" else more[1])
        row.info = replace(row.info, ttft_s=float(ttft))


def _wait(
    room: float, batch_wait_s: float, rho_cap: float, curve: PrefillCurve | None
) -> tuple[float, float, Array, float] | None:
    """(utilisation, TTFT wait, busy time per prompt over a full batch's for a fresh prompt, a
    midfill and a recompute, the prompts a forward batches: 0 for a full batch) of the highest
    load whose wait fits in ``room`` seconds, or None:
    along ``curve`` where given, else the queueing surrogate, an M/D/1-style wait of
    ``batch_wait_s`` (the percentile's factor times a forward) times ``rho / (1 - rho)``."""
    if room <= 0:
        return None
    if curve is None:
        a = room / max(batch_wait_s, 1e-12)
        rho = min(a / (1.0 + a), RHO_MAX, rho_cap)
        return rho, batch_wait_s * rho / (1.0 - rho), np.ones(3), 0.0
    over = curve.extra_s > room
    k = int(np.argmax(over)) if over.any() else len(over)  # the loads below k meet TTFT
    if k <= 1:  # none but no load at all
        return None
    k -= 1
    return float(curve.share[k]), max(float(curve.extra_s[k]), 0.0), curve.more[:, k], float(curve.batch[k])


FRESH_ONLY = "fresh"  # a prefill unit's operating point that takes no returning turn
# prefill units and exclusions per shared Shapes and what else they read (:meth:`_Builder.add_prefill`)
_PREFILL = Memo(256)


def _apart(paces: set[float]) -> tuple[float, ...]:
    """``paces``, slowest first, each at least :data:`PACE_APART` below the one kept before it."""
    kept: list[float] = []
    for pace in sorted(paces, reverse=True):
        if not kept or pace < kept[-1] * (1.0 - PACE_APART):
            kept.append(pace)
    return tuple(kept)


# TPOT paces an aggregated unit is also offered at (seconds): a preferred-number grid per decade,
# down to 1 ms; round targets (30, 50, 100, 150, 200 ms) lie on it, so a looser target offers
# the units a tighter one on the grid does that still buy TTFT
PACE_GRID = (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)
PACE_FLOOR_S = 1e-3


SLOT_ROLES = (Role.MIXED, Role.DECODE, Role.ATTENTION)  # units whose batch is their slots


def tpot_paces(tpot_s: float, tighter: bool) -> list[float]:
    """The target, then (if ``tighter``) every grid pace below it, slowest first."""
    if not tighter:
        return [tpot_s]
    top = tpot_s * (1.0 - 1e-9)
    decades = range(int(np.floor(np.log10(PACE_FLOOR_S))), int(np.ceil(np.log10(tpot_s))) + 1)
    grid = {round(m * 10.0**d, 12) for d in decades for m in PACE_GRID}
    return [tpot_s, *sorted((g for g in grid if PACE_FLOOR_S <= g < top), reverse=True)]


def _tpot_reason(slo: Slo, cap_seq: float, alone_s: float, decoding: float = 1.0) -> tuple[str, float]:
    """Why a unit has no batch that meets TPOT, with its figures, and how far it misses (the TPOT
    of one sequence alone over the target): ``alone_s``, one sequence's decode step per output
    token; ``decoding``, the share of the time an aggregated unit decodes (its steps must fit that
    share of TPOT). The reason had read "TPOT 5 ms cannot be met even at batch 1", with no figure,
    and quoted the first shape listed rather than the fastest."""
    if cap_seq < 1.0:  # (how far: the room one sequence needs over the room there is)
        reason = f"not even one sequence's KV fits next to the weights ({cap_seq:.2f} sequences)"
        return reason, 1.0 / cap_seq if cap_seq > 0 else math.inf
    token = alone_s / decoding
    text = f"TPOT {slo.tpot_s * 1e3:g} ms cannot be met: at batch 1 a token takes {token * 1e3:.3g} ms"
    if decoding < 1.0:
        text += f" (a {alone_s * 1e3:.3g} ms step in the {decoding:.0%} of the time it decodes)"
    return text, token / slo.tpot_s


def forward_batch(lam: float, step: float, forward: float, mixed: bool) -> float:
    """Prompts an aggregated instance's prefill forward takes, on average, with Poisson arrivals
    at ``lam`` a second. Its scheduler forms one at each iteration's end from the prompts that
    arrived during it (SGLang's ``get_new_batch_prefill``; vLLM and TensorRT-LLM mix them into
    the next decode step): an iteration is a decode step (``step`` seconds) or a prefill forward
    (``forward``; mixed, with the decode step in it). An iteration of ``t`` seconds is followed
    by a forward with probability ``1 - e^(-lam t)``, so a share ``p = P0 / (1 - P1 + P0)`` of
    iterations are forwards, and each takes what arrived over ``1 / p`` iterations, at least one
    prompt."""
    long = forward + (step if mixed else 0.0)  # a forward's iteration
    p0, p1 = -np.expm1(-lam * step), -np.expm1(-lam * long)
    if p0 <= 1e-12:
        return 1.0
    p = p0 / (1.0 - p1 + p0)
    mean = p * long + (1.0 - p) * step  # seconds an iteration lasts, on average
    return max(1.0, lam * mean / p)


def classes_of(w: Workload) -> list[tuple[str, float, float]]:
    """(name, returning requests/s, dwell seconds) per think-time bin."""
    if w.returning_share <= 0:
        return []
    return [(think_class_name(b.dwell_s), w.returning_per_s * b.share, b.dwell_s) for b in w.think]


def build_candidates(
    req: PlacementRequest,
    topology: Topology,
    catalog: Catalog,
    params: PerfParams,
    hardware: list[Hardware] | None = None,
    afd_pace: float | None = None,
) -> Candidates:
    """Units, their coefficients and the shapes left out, for one concrete topology.
    ``hardware`` overrides the catalog entries (the shadow prices perturb them); ``afd_pace``
    sizes an attention-FFN design's decode units for a pace tighter than the TPOT target (one of
    the target's build's :attr:`Candidates.tighter_afd_paces`)."""
    hws = hardware if hardware is not None else [catalog.hardware(h) for h in req.hardware]
    model = catalog.model(req.model)
    s = shapes_of(req, model, hws, params, handed=topology is not Topology.AGGREGATED)
    b = _Builder(req, s)
    broken = req.workload.context_problem(model.max_context, model.id)
    if broken is not None:  # no shape can serve it: an answer (a grid point beyond the window), not a crash
        b.excl.append(
            Exclusion(model.id, "all", "any shape", f"workload.{broken[0]} = {broken[2]:g}: {broken[1]}")
        )
    elif topology.splits_experts and model.moe is None:  # an answer (a grid point's model), as above
        reason = f"{model.id} has no routed experts to split from attention"
        b.excl.append(Exclusion(model.id, "ffn", "any shape", reason))
    elif req.mtp and (why := model.no_mtp()) is not None:  # drafts no engine can launch: an answer
        b.excl.append(Exclusion(model.id, "all", "any shape", f"mtp: {why}"))
    elif topology is Topology.AGGREGATED:
        b.add_mixed()
    else:
        b.add_prefill()
        if topology is Topology.FOUR_STAGE:
            b.add_midfill()
        if topology is Topology.DISAGGREGATED:
            b.add_decode()
        else:
            add_afd(b, afd_pace)
    split = topology.splits_experts
    # the hidden states' bytes a token moves fan out to the scale-up domains its experts are in,
    # so they depend on the FFN unit's shape: each FFN unit's own. A step's transfers must fit
    # the side's share of the pace after their RDMA waits (as dse.perf.serving steps them), so a
    # NIC carries them only that part of the time: the bytes count over it
    afd_gb: float | np.ndarray = 0.0  # (no attention-FFN units: no hidden states cross)
    if split:
        usable = AFD_SIDE_SHARE - b.afd_wait / (afd_pace if afd_pace is not None else req.slo.tpot_s)
        per_token = afd_bytes_per_token(s.pool) / GB / max(usable, 1e-9)
        # (an FFN unit in one scale-up domain with its attention: over NVLink, in no NIC budget)
        crosses = [r.info.role is Role.FFN and not r.beside for r in b.rows]
        afd_gb = np.array([per_token[r.shape] if x else 0.0 for r, x in zip(b.rows, crosses, strict=True)])
    data = _assemble(req, s, b.rows, b.classes, afd_gb)
    return Candidates(
        data,
        tuple(r.info for r in b.rows),
        tuple(b.excl),
        topology,
        afd_pace=afd_pace if split else None,
        tighter_afd_paces=_apart(b.afd_paces),
    )


def _host_mirror(req: PlacementRequest, s: Shapes, rows: list[Row]) -> Array | None:
    """(U,) GB of each unit's GPUs' host DRAM their engine keeps as a copy of the GPU's KV pool, at
    most what the GPU's HBM holds past its weights (:attr:`EngineRules.host_mirror`), and the host
    memory it leaves free (:data:`~dse.perf.latency_tables.SGLANG_HOST_RESERVE_GB`); None for an
    engine that keeps no such copy."""
    if not ENGINE_RULES[req.engine].host_mirror:
        return None
    reserve = SGLANG_HOST_RESERVE_GB
    return np.array([max(float(s.usable_gb[r.shape] - s.weights_gb[r.shape]), 0.0) + reserve for r in rows])


def _domain_pairs(rows: list[Row]) -> tuple[Array, Array, Array, Array] | None:
    """The placement's attention-FFN pairs (:class:`~formulations.placement_data.PlacementData`'s
    ``afd_partner``, ``afd_attention_per_ffn``, ``afd_ffn_per_attention`` and
    ``afd_units_per_domain``), where some FFN unit makes a unit in one scale-up domain with its
    attention unit, at this pace or at the target's (then carrying nothing: the same structure);
    None where none does, so that a design without one is the same MILP as before."""
    if not any(r.partner >= 0 for r in rows):
        return None
    return (
        np.array([r.partner for r in rows], dtype=int),
        np.array([r.beside for r in rows]),
        np.array([r.spread for r in rows]),
        np.array([r.per_domain for r in rows]),
    )


def energy_usd_per_gpu_hour(hw: Hardware, req: PlacementRequest, p: PerfParams) -> float:
    """The energy a GPU of ``hw`` costs per hour at full draw (its kernels running all the
    time), with the site's PUE and price: the MILP's linear stand-in, an upper bound on what a
    design at its real utilisation draws (:func:`dse.design_power.power_metrics` prices that)."""
    kw = float(gpu_power_w(hw.tdp_w, 1.0, p.power)) / 1e3
    return kw * req.energy.pue * req.energy.usd_per_kwh


def _price(hw: Hardware, tier: str, needed: bool) -> float:
    """The price per GPU-hour; nan when the catalog has none and the objective does not need it
    (a GPU-count placement of hardware without a public price)."""
    v = getattr(hw.prices, f"usd_per_gpu_hour_{tier}")
    if v is None and not needed:
        return float("nan")
    if v is None:
        priced = [f.name.removeprefix("usd_per_gpu_hour_") for f in fields(hw.prices)]
        priced = [t for t in priced if getattr(hw.prices, f"usd_per_gpu_hour_{t}") is not None]
        other = (
            f"choose a price tier it has ({', '.join(priced)})"
            if priced
            else "no price tier has one (--objective gpus places it without a price)"
        )
        rule = f"has no value; {other}, or add the price to the catalog"
        raise InputError(hw.id, f"prices.usd_per_gpu_hour_{tier}", rule)
    return float(v)


def _assemble(
    req: PlacementRequest,
    s: Shapes,
    rows: list[Row],
    classes: list[tuple[str, float, float]],
    afd_gb: float | Array,
) -> PlacementData:
    w, lim, hws = req.workload, req.limits, s.hws
    ids = [hw.id for hw in hws]
    for key in lim.inventory_gpus:
        if key not in ids:
            raise InputError(
                "placement request",
                f"limits.inventory_gpus.{key}",
                f"names hardware that is not a candidate; candidates: {', '.join(ids)}",
            )
    nc = len(classes)
    pairs = _domain_pairs(rows)

    def finite_or_inf(v: float | None, scale: float = 1.0) -> float:
        return v * scale if v is not None else np.inf

    return PlacementData(
        hw_names=tuple(ids),
        sale_gpus=np.array([float(hw.sale_unit_gpus) for hw in hws]),
        usd_per_gpu_hour=np.array(
            [
                _price(
                    hw,
                    req.price_tier,
                    req.objective is not Objective.GPUS or req.limits.budget_usd_hour is not None,
                )
                for hw in hws
            ]
        ),
        watts_per_gpu=np.array([float(hw.tdp_w) for hw in hws]),
        inventory_gpus=np.array([float(lim.inventory_gpus.get(h, np.inf)) for h in ids]),
        tier_gb_per_gpu=tier_capacity(hws),
        tier_gb_s_per_gpu=s.tier_gb_s,
        unit_names=tuple(r.info.name for r in rows),
        unit_hw=np.array([s.hw_of[r.shape] for r in rows], dtype=int),
        unit_role=np.array([int(r.info.role) for r in rows], dtype=int),
        unit_gpus=np.array([float(s.par[r.shape].gpus) for r in rows]),
        unit_kv_gpus=np.array([float(r.info.kv_shard) for r in rows]),
        unit_host_mirror_gb=_host_mirror(req, s, rows),
        prefill_share=np.array([r.share for r in rows]),
        fresh_s=np.array([r.fresh_s for r in rows]),
        decode_tok_s=np.array([r.dec for r in rows]),
        hbm_idle_gb=np.array([r.hbm_idle for r in rows]),
        nic_gb_s=np.array([r.nic for r in rows]),
        mid_s=np.array([r.mid for r in rows]).reshape(len(rows), nc, len(TIERS)),
        reload_s=np.array([r.reload for r in rows]).reshape(len(rows), nc, len(TIERS)),
        class_names=tuple(c[0] for c in classes),
        class_per_s=np.array([c[1] for c in classes]),
        class_dwell_s=np.array([c[2] for c in classes]),
        class_gb=np.full(nc, s.resting_gb),
        class_handoff_gb=np.full(nc, s.returning_handoff_gb),
        fresh_per_s=w.fresh_per_s,
        output_tokens=w.output_tokens,
        fresh_handoff_gb=float(s.fresh_handoff_gb),
        afd_gb_per_token=afd_gb,
        afd_partner=None if pairs is None else pairs[0],
        afd_attention_per_ffn=None if pairs is None else pairs[1],
        afd_ffn_per_attention=None if pairs is None else pairs[2],
        afd_units_per_domain=None if pairs is None else pairs[3],
        afd_fan_level=np.array([r.fan for r in rows], dtype=int) if any(r.fan >= 0 for r in rows) else None,
        budget_usd_hour=finite_or_inf(lim.budget_usd_hour),
        power_w=finite_or_inf(lim.power_kw, 1e3),
        network_capacity_gb=finite_or_inf(lim.network_kv_capacity_tb, 1e3),
        network_usd_per_gb_hour=req.network_kv_usd_per_tb_hour / 1e3 + req.storage.usd_per_gb_hour("network"),
        dram_usd_per_gb_hour=req.storage.usd_per_gb_hour("dram"),
        nvme_usd_per_gb_hour=req.storage.usd_per_gb_hour("nvme"),
        energy_usd_per_gpu_hour=np.array([energy_usd_per_gpu_hour(hw, req, s.params) for hw in hws]),
        latency_usd_per_s=req.latency_usd_per_s,
        objective=req.objective,
        # the sequences each decoding instance runs: its pool keeps slots free for the traffic
        decode_slots=np.array([r.info.decode_batch if r.info.role in SLOT_ROLES else 0.0 for r in rows]),
        slot_beta=wait_beta(req.slo.percentile),
    )
