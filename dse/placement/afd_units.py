"""The attention and FFN units of an attention-FFN design, for the placement MILP.

Decode attention and decode experts run on pools of their own (attention-FFN disaggregation), each
given half of the TPOT pace: with two micro-batches in ping-pong, each side runs one while the
other runs the other, and the hidden states cross between them in the same half. Attention units
hold the KV and the attention weights; FFN units hold the experts and come at several token
batches. Across the NICs the transfers wait on RDMA and each instance's own NICs carry its
sequences' hidden states, to every scale-up domain its tokens' experts are on: an FFN unit comes
only at the batches its NICs take in time, and an attention shape once per fan-out level of the
expert shapes across the NICs, at the batch its NICs send in time to expert instances of that
level (:mod:`formulations.fan_out` keeps every attention unit within reach of the expert units a
design buys). Where an FFN unit and the attention unit of its shape fit in one scale-up domain
both also come as domain units (``.../nvlink``), whose hidden states cross NVLink
(:mod:`formulations.domains`). ``dse place`` also solves a design at the tighter paces its units'
own steps offer.

These functions fill a :class:`~dse.placement.candidates._Builder` (its rows, exclusions and the
design's RDMA wait), as its methods for the other roles do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dse.perf.afd import SIDE_SHARE as AFD_SIDE_SHARE
from dse.perf.afd import (
    afd_bytes_per_token,
    afd_fan_out,
    afd_in_domain,
    afd_transfer_latency_s,
    afd_transfer_s,
    afd_unit_gpus,
    attention_side,
    ffn_side,
)
from dse.perf.pool import Array, Pool
from dse.perf.stages import forward_cost, weight_bytes_per_gpu
from dse.placement.rows import Row
from dse.units import GB
from formulations.placement_data import Role

if TYPE_CHECKING:
    from dse.placement.candidates import _Builder


@dataclass(frozen=True)
class _Near:
    """Per shape, for one FFN token batch: whether its FFN unit and its shape's attention units
    make an attention-FFN unit in one scale-up domain whose NVLink transfers and expert step fit
    (``ok``), that unit's counts (:class:`~dse.placement.rows.Row`'s ``beside``, ``spread`` and
    ``per_domain``), its transfer's seconds a step and the FFN unit's step."""

    ok: Array
    attention_per_ffn: Array
    ffn_per_attention: Array
    per_domain: Array
    transfer_s: Array
    step_s: Array  # the FFN unit's time per output token (its half of the step)


@dataclass(frozen=True)
class _AttentionRow:
    """An attention unit of shape ``shape`` at a pace (:func:`add_afd`): its ``batch``,
    whether the pace runs it (``alive``) and the TPOT target does (``had``), its name's suffix,
    its attention weights per GPU and, across the NICs, its reach (``fan``, else -1)."""

    shape: int
    batch: float
    alive: bool
    had: bool
    suffix: str
    weights_gb: float
    fan: int


@dataclass(frozen=True)
class FanLevels:
    """The fan-out levels of the expert shapes that serve across the NICs at the TPOT target,
    narrowest first (:mod:`formulations.fan_out`): the bytes a token's hidden states move a step
    to and from one of their instances (:func:`~dse.perf.afd.afd_bytes_per_token`), and the
    scale-up domains one of their instances spans (the attention units' names, ``.../fanoutN``)."""

    per_token: Array
    domains: Array

    def level(self, per_token: float) -> int:
        """The level of an expert shape that moves ``per_token`` bytes a token."""
        found = np.flatnonzero(self.per_token == per_token)
        assert found.size == 1, f"an expert shape across the NICs of no level: {per_token} bytes a token"
        return int(found[0])


def _misses_half(b: _Builder, i: int, att: Pool, half: float, of: str) -> None:
    """Leaves out attention shape ``i``, which runs no batch within ``half`` of the pace: quoting
    its step at batch 1 where that alone is over the half."""
    alone = float(b.alone_s(att)[i])
    if alone > half:
        why = f"attention step at batch 1 takes {alone * 1e3:.3g} ms a token, over half of {of}"
        b.exclude(i, "attention", why, alone / half)
    else:
        b.exclude(i, "attention", f"attention step cannot fit half of {of}", math.inf)


def add_afd(b: _Builder, pace: float | None = None) -> None:
    """Attention units (KV and attention weights) and FFN units (experts), half the pace each:
    the TPOT target's, or a tighter ``pace`` every unit of the design then keeps (the two
    halves step in lockstep). Their hidden states cross the NICs and wait on RDMA; a shape
    whose waits alone pass half the pace serves across the NICs no more.

    Where an FFN unit and the attention unit of its shape make an attention-FFN unit that fits
    in one scale-up domain (:func:`_near`), both also come as *domain* units (named
    ``.../nvlink``) whose hidden states cross NVLink: such an FFN unit's tokens count in no
    NIC budget, and the placement keeps the pair in its domain (:mod:`formulations.domains`).
    The units that cross the NICs stay as they were, so a design is never dearer for them.
    Across the NICs an attention shape comes once per fan-out level of the expert shapes there
    (:func:`_fan_levels`), at the batch its own NICs send in time to expert instances of that
    level, and the MILP keeps each within reach of the expert units bought
    (:mod:`formulations.fan_out`).

    Built at the target (in ``dse place``), it also finds the tighter paces worth a design
    of their own (``afd_paces``): each unit's own, its step over the side's share. An
    attention shape whose batch HBM holds steps faster than a loose target, and an FFN unit
    (a fixed batch) too, so the target's pace credits them only a part of what they carry.
    At a tighter pace a unit the target has but the pace cannot run stays in the list,
    carrying nothing (:func:`_dead`): every pace's MILP then has the target's structure and
    re-solves in place."""
    s, slo = b.s, b.slo
    target = pace is None or pace == slo.tpot_s
    pace = slo.tpot_s if pace is None else pace
    tag = "" if target else f"/tpot{pace * 1e3:g}ms"
    of = f"TPOT {slo.tpot_s * 1e3:g} ms" if target else f"the {pace * 1e3:g} ms pace"
    att, ffn = attention_side(s.pool), ffn_side(s.pool)
    # the transfers' fixed RDMA waits, a dispatch and a combine every FFN layer, run beside
    # both sides and must fit the same share of the step (their bytes: the NIC budgets)
    wait = b.afd_wait = float(afd_transfer_latency_s(s.pool, b.p)[0])
    far, far_t = wait > pace * AFD_SIDE_SHARE, wait > slo.tpot_s * AFD_SIDE_SHARE
    rate, batch = b.decode_points(att, pace * AFD_SIDE_SHARE)
    at_target = batch if target else b.decode_points(att, slo.tpot_s * AFD_SIDE_SHARE)[1]
    steps = _ffn_steps(b, ffn)
    b.fans = _fan_levels(b, ffn, steps)
    per_seq = _attention_seconds(b, att)
    nic = [_nic_batch(b, batch, pace, sec) for sec in per_seq]  # per level, as it reaches
    nic_t = [_nic_batch(b, at_target, slo.tpot_s, sec) for sec in per_seq]
    near = _near(b, att, ffn, batch, pace, steps)
    near_t = near if target else _near(b, att, ffn, at_target, slo.tpot_s, steps)
    any_near = np.any([n.ok for n in near], axis=0)
    any_near_t = np.any([n.ok for n in near_t], axis=0)
    att_w = weight_bytes_per_gpu(att) / GB
    why = f"the hidden states' transfers wait {wait * 1e3:.2f} ms a step on RDMA, over half of {of}"
    beside: dict[int, int] = {}  # each shape's attention row in one domain with its FFN units
    for i in b.shapes("decode", unit="attention"):
        if far:
            b.exclude(i, "attention", why, wait / (pace * AFD_SIDE_SHARE))
        elif batch[i] <= 0:
            _misses_half(b, i, att, pace * AFD_SIDE_SHARE, of)
        if batch[i] > 0 and not far and nic[0][i] <= 0:
            _misses_nics(b, i, pace, of, per_seq[0])
        # across the NICs, what its NICs send in time: a unit per fan-out level it reaches at the
        # target (its batch at each level the target's, or smaller at a tighter pace, whose NICs
        # have less time: where two levels' batches are one at the target, they may not be here)
        for reach in (k for k, caps in enumerate(nic_t) if caps[i] > 0):
            fan = f"/fanout{b.fans.domains[reach]:g}" if b.fans is not None and reach else ""
            alive, had = nic[reach][i] > 0 and not far, nic_t[reach][i] > 0 and not far_t
            level = reach if b.fans is not None else -1
            row = _AttentionRow(i, nic[reach][i], alive, had, fan + tag, float(att_w[i]), level)
            _add_attention(b, row, pace, target, float(batch[i] / rate[i]), wait)
        alive, had = batch[i] > 0 and bool(any_near[i]), at_target[i] > 0 and bool(any_near_t[i])
        if alive or had:
            beside[i] = len(b.rows)
            own = min((float(n.transfer_s[i]) for n in near if n.ok[i]), default=wait)
            row = _AttentionRow(i, batch[i], alive, had, NVLINK + tag, float(att_w[i]), -1)
            _add_attention(b, row, pace, target, float(batch[i] / rate[i]), own)
    _add_ffn(b, ffn, pace, tag, of, near, near_t, beside)


def _add_attention(
    b: _Builder, row: _AttentionRow, pace: float, target: bool, side_step: float, transfer_s: float
) -> None:
    """An attention unit (:class:`_AttentionRow`) at ``pace``: alive, carrying nothing (the
    target's, which this pace cannot run), or none; at the target, the tighter pace its step
    (``side_step``) and its transfers (``transfer_s``) offer (:func:`_tighter`)."""
    s, i = b.s, row.shape
    if not (row.alive or row.had):
        return
    if not row.alive:
        _dead(b, i, Role.ATTENTION, row.suffix, fan=row.fan)
        return
    n, w = float(row.batch), row.weights_gb
    info = b.info(
        i, Role.ATTENTION, suffix=row.suffix, batch=n, weights_gb=w,
        hbm_gb=w + n * float(s.per_seq_gb[i] / s.pool.kv_shard[i]), tpot=pace,
    )  # fmt: skip
    # the step is paced by the design's pace, not by the attention side alone
    b.rows.append(Row(info, i, len(b.classes), dec=n / pace, nic=float(s.nic_gb_s[i]), fan=row.fan))
    if target:  # nor faster than its transfers: the RDMA waits, or the whole NVLink one
        _tighter(b, side_step, pace, transfer_s)


def _fan_levels(b: _Builder, ffn: Pool, steps: list[Array]) -> FanLevels | None:
    """The fan-out levels (:class:`FanLevels`) of the expert shapes that serve across the NICs at
    the TPOT target at some token batch of the options (as :func:`_add_ffn` offers them:
    their step and their own NICs' share fit half the pace); None where none does."""
    half = b.slo.tpot_s * AFD_SIDE_SHARE
    idx = np.array(b.shapes("decode", unit="ffn"), dtype=int)
    if idx.size == 0 or b.afd_wait > half:
        return None
    per_nic = _nic_seconds(b, ffn)[idx]
    serves = np.zeros(idx.size, dtype=bool)
    for per_gpu, step in zip(b.opts.ffn_tokens_per_gpu, steps, strict=True):
        seqs = (per_gpu * b.s.pool.gpus)[idx]
        serves |= (step[idx] <= half) & (b.afd_wait + seqs * per_nic <= half)
    per_token, first = np.unique(afd_bytes_per_token(b.s.pool)[idx][serves], return_index=True)
    if per_token.size == 0:
        return None
    return FanLevels(per_token, afd_fan_out(b.s.pool)[1][idx][serves][first])


def _attention_seconds(b: _Builder, att: Pool) -> list[Array]:
    """Per fan-out level (:attr:`fans`; its own shape's fan-out where there is none), the
    seconds an attention instance takes on its own NICs to send and receive one sequence's
    hidden states a step."""
    if b.fans is None:
        return [_nic_seconds(b, att)]
    return [_nic_seconds(b, att, moved) for moved in b.fans.per_token]


def _nic_seconds(b: _Builder, side: Pool, per_token: Array | float | None = None) -> Array:
    """Seconds an instance of ``side`` (the attention or the FFN side) takes on its own NICs
    to send or receive one sequence's hidden states a step (its tokens' dispatch and combine,
    :func:`~dse.perf.afd.afd_bytes_per_token`; ``per_token`` bytes where given, those of an
    expert instance of its own shape where not)."""
    moved = afd_bytes_per_token(b.s.pool) if per_token is None else per_token
    return np.asarray(moved * (1.0 + b.s.draft) / (side.nic_bytes_per_s * b.p.nic_eff * side.gpus))


def _nic_batch(b: _Builder, batch: Array, pace: float, per_seq: Array) -> Array:
    """An attention unit's ``batch`` across the NICs, at most the sequences whose hidden states
    its own NICs send in its half of ``pace`` after the RDMA waits (``per_seq`` seconds each),
    as the simulations step it: the design's NIC budget pools the bytes over every instance's
    NICs, and until session 57 was the only bound (Qwen3-235B on H200, 2-GPU attention
    instances of 954 sequences stepped at 114 ms against a 100 ms pace)."""
    room = max(pace * AFD_SIDE_SHARE - b.afd_wait, 0.0)
    return np.minimum(batch, np.floor(room / per_seq))


def _misses_nics(b: _Builder, i: int, pace: float, of: str, per_seq: Array) -> None:
    """Leaves out attention shape ``i`` across the NICs, whose NICs cannot send one sequence's
    hidden states (``per_seq`` seconds; to the narrowest expert shapes) in half of the pace
    after the RDMA waits (:func:`_nic_batch`)."""
    one = float(per_seq[i]) + b.afd_wait
    why = (f"across the NICs, one sequence's hidden states take {one * 1e3:.2f} ms a step on an "
           f"attention instance's NICs, over half of {of}")  # fmt: skip
    b.exclude(i, "attention", why, one / (pace * AFD_SIDE_SHARE))


def _near(b: _Builder, att: Pool, ffn: Pool, batch: Array, pace: float, steps: list[Array]) -> list[_Near]:
    """Per FFN token batch of the options, which shapes' FFN units make an attention-FFN unit
    with the attention units of their shape (``batch`` sequences each, at ``pace``) that fits
    in one scale-up domain (:func:`~dse.perf.afd.afd_in_domain`), whose transfers over NVLink
    fit the side's share of the pace with their NVLink waits
    (:func:`~dse.perf.afd.afd_transfer_s`), and whose expert step (``steps``) fits it too.
    The unit is an expert instance and the attention instances its token batch takes, or an
    attention instance and the expert instances its batch takes, as many as fit beside it in
    the domain: where fewer fit, the side with more runs below its batch (the other one's
    capacity binds in the MILP)."""
    s, p = b.s, b.p
    per_token = afd_bytes_per_token(s.pool) * (1.0 + s.draft)
    room, g = s.pool.domain_gpus, s.pool.gpus
    most = np.maximum(np.floor((room - g) / g + 1e-9), 1.0)  # beside one instance of the other side
    out = []
    for per_gpu, step in zip(b.opts.ffn_tokens_per_gpu, steps, strict=True):
        seqs = per_gpu * g
        live = batch > 0
        need = seqs / np.where(live, batch, 1.0)  # attention instances one expert instance takes
        beside = np.minimum(np.ceil(need - 1e-9), most)
        spread = np.minimum(np.ceil(1.0 / need - 1e-9), most)
        fan_in = beside / spread
        inside = live & afd_in_domain(att, ffn, fan_in, True)
        sent = np.minimum(batch, spread * seqs) * per_token  # an attention instance's
        got = np.minimum(seqs, beside * batch) * per_token  # an expert instance's
        xfer = afd_transfer_s(att, ffn, p, sent, got, fan_in, inside)
        out.append(
            _Near(
                ok=inside & (xfer <= pace * AFD_SIDE_SHARE) & (step <= pace * AFD_SIDE_SHARE),
                attention_per_ffn=beside,
                ffn_per_attention=spread,
                per_domain=np.floor(room / afd_unit_gpus(att, ffn, fan_in) + 1e-9),
                transfer_s=xfer,
                step_s=step,
            )
        )
    return out


def _add_ffn(
    b: _Builder,
    ffn: Pool,
    pace: float,
    tag: str,
    of: str,
    near: list[_Near],
    near_t: list[_Near],
    beside: dict[int, int],
) -> None:
    """FFN units (the pool's FFN side ``ffn``) at each token batch of the options, at ``pace``
    (``tag`` and ``of`` name it): across the NICs, and where ``near`` (``near_t`` at the
    target) says so, also in one scale-up domain with their shape's attention row
    (``beside``); see :func:`add_afd`."""
    s, slo = b.s, b.slo
    target = pace == slo.tpot_s
    wait = b.afd_wait
    far, far_t = wait > pace * AFD_SIDE_SHARE, wait > slo.tpot_s * AFD_SIDE_SHARE
    ffn_w = weight_bytes_per_gpu(ffn) / GB
    # across the NICs an expert instance's own NICs take its batch's hidden states, after the
    # waits, in the side's share of the step, as the simulations step it: the design's NIC
    # budget pools the bytes over every instance's NICs, and until 2026-12-06 was the only
    # bound (an 8-GPU B200 unit of 2,048 tokens, 46.5 ms on its NICs against a 39.8 ms share)
    per_nic = _nic_seconds(b, ffn)
    moved = afd_bytes_per_token(s.pool)  # a token's bytes a step, by the shape's fan-out level
    for k, per_gpu in enumerate(b.opts.ffn_tokens_per_gpu):
        seqs = per_gpu * s.pool.gpus
        n, n_t = near[k], near_t[k]
        step, nics = n.step_s, wait + seqs * per_nic
        for i in b.shapes("decode", unit="ffn"):
            fits, fits_t = step[i] <= pace * AFD_SIDE_SHARE, step[i] <= slo.tpot_s * AFD_SIDE_SHARE
            # its NICs take its batch's hidden states in time: a unit across them may serve
            nic_fits, nic_fits_t = (
                nics[i] <= pace * AFD_SIDE_SHARE,
                nics[i] <= slo.tpot_s * AFD_SIDE_SHARE,
            )
            if fits and not far and not nic_fits:
                b.exclude(
                    i, "ffn", f"across the NICs, {seqs[i]:.0f} tokens' hidden states take "
                    f"{nics[i] * 1e3:.2f} ms a step on an expert instance's NICs, over half of {of}",
                    float(nics[i] / (pace * AFD_SIDE_SHARE)),
                )  # fmt: skip
            if far:
                over = wait / (pace * AFD_SIDE_SHARE)
                b.exclude(i, "ffn", f"the hidden states' transfers wait {wait * 1e3:.2f} ms a step "
                             f"on RDMA, over half of {of}", over)  # fmt: skip
            elif not fits:
                b.exclude(
                    i,
                    "ffn",
                    f"expert step for {seqs[i]:.0f} sequences takes {step[i] * 1e3:.2f} ms, "
                    f"over half of {of}",
                    float(step[i] / (pace * AFD_SIDE_SHARE)),
                )
            for domain in (False, True):
                paired = i in beside
                alive = fits and bool(n.ok[i] and paired if domain else not far and nic_fits)
                had = fits_t and bool(
                    n_t.ok[i] and paired if domain else not far_t and nic_fits_t
                )  # the target's
                if not (alive or had):
                    continue
                suffix = f"/b{seqs[i]:.0f}" + (NVLINK if domain else "") + tag
                partner = beside[i] if domain else -1
                level = -1 if domain or b.fans is None else b.fans.level(float(moved[i]))
                if not alive:
                    _dead(b, i, Role.FFN, suffix, partner, level)
                    continue
                if target:
                    _tighter(b, float(step[i]), pace, float(n.transfer_s[i]) if domain else wait)
                row = _ffn_row(b, i, seqs, float(ffn_w[i]), pace, suffix)
                row.fan = level
                if domain:
                    row.partner = partner
                    row.beside = float(n.attention_per_ffn[i])
                    row.spread = float(n.ffn_per_attention[i])
                    row.per_domain = float(n.per_domain[i])


def _ffn_steps(b: _Builder, ffn: Pool) -> list[Array]:
    """Per FFN token batch of the options, the FFN units' time per output token of the expert
    half (``ffn``; a step yields ``accept`` tokens per sequence)."""
    s, out = b.s, []
    for per_gpu in b.opts.ffn_tokens_per_gpu:
        seqs = per_gpu * s.pool.gpus
        cost = forward_cost(
            ffn, b.p, tokens=seqs * (1.0 + s.draft), sequences=seqs, context=np.zeros_like(seqs),
            prefill=False, speed=s.speed,
        )  # fmt: skip
        out.append(cost.total_s / s.accept)
    return out


def _ffn_row(b: _Builder, i: int, seqs: Array, weights_gb: float, pace: float, suffix: str) -> Row:
    """An FFN unit of shape ``i`` at ``seqs[i]`` sequences and ``pace``, appended."""
    s = b.s
    w = weights_gb
    info = b.info(i, Role.FFN, suffix=suffix, batch=float(seqs[i]), weights_gb=w, hbm_gb=w, tpot=pace)
    row = Row(info, i, len(b.classes), dec=float(seqs[i] / pace), nic=float(s.nic_gb_s[i]))
    b.rows.append(row)
    return row


def _tighter(b: _Builder, side_step: float, pace: float, transfer_s: float) -> None:
    """Offer the pace of a unit whose side steps in ``side_step`` (``dse place``), where it is
    :data:`PACE_APART` below the target's ``pace``; nor faster than its transfers take
    (``transfer_s``: the RDMA waits across the NICs, whose bytes the NIC budgets take, or the
    whole transfer inside one scale-up domain)."""
    own = _pace_up(max(side_step, transfer_s) / AFD_SIDE_SHARE)
    if b.opts.tighter_paces and own < pace * (1.0 - PACE_APART):
        b.afd_paces.add(own)


def _dead(b: _Builder, i: int, role: Role, suffix: str, partner: int = -1, fan: int = -1) -> None:
    """A unit of shape ``i`` the target runs but this pace cannot: it carries nothing (an FFN
    unit keeps its ``partner``, and a unit across the NICs its ``fan`` level, as the target's
    do: the same structure)."""
    info = b.info(i, role, suffix=suffix + "/none", hbm_gb=0.0, tpot=np.nan)
    b.rows.append(Row(info, i, len(b.classes), partner=partner, fan=fan))


NVLINK = "/nvlink"  # the name of an attention-FFN unit in one scale-up domain (:func:`add_afd`)

# a tighter pace within this share of one already kept (or of the target) is not solved again:
# the shape it would credit fully is credited within that share at the slower one
PACE_APART = 0.02


def _pace_up(seconds: float) -> float:
    """A pace rounded up to a tenth of a millisecond (a unit's name carries it), so that the
    batch found at it is the one that set it."""
    return float(np.ceil(seconds * 1e4 - 1e-6) / 1e4)
