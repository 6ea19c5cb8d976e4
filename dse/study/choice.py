"""What a search trial chooses: the conditional search space of a study's ``[search]`` table, as
Optuna parameters and as a typed :class:`Choice` (light: no solver, so the sampler's process and
the storage need nothing heavier)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import optuna

from dse.placement.request import Topology
from dse.study.spec import StudySpec


@dataclass(frozen=True)
class Choice:
    topology: str
    kv_policy: str
    prefill_hardware: str
    decode_hardware: str
    prefill_shape: str
    decode_shape: str
    chunk_tokens: int
    max_batch: int
    prefill_share: float  # aggregated only
    ffn_tokens_per_gpu: float  # attention-FFN only
    midfill_hardware: str | None = None  # four-stage only: where a midfill pool may go
    midfill_shape: str | None = None


SPLIT_DECODE = (Topology.AFD.value, Topology.FOUR_STAGE.value)  # decode attention apart from experts


def suggest(trial: optuna.Trial, spec: StudySpec) -> Choice:
    """Conditional search space: aggregated units have one hardware and shape; disaggregated
    ones a prefill and a decode side; attention-FFN adds the expert-side batch, and four-stage
    the hardware and shape a midfill pool may take."""
    s = spec.search
    topo = trial.suggest_categorical("topology", list(s.topologies))
    kv = trial.suggest_categorical("kv_policy", list(s.kv_policies))
    hw = list(spec.hardware)
    lo, hi = int(s.decode.max_batch[0]), int(s.decode.max_batch[1])
    chunk = int(trial.suggest_categorical("chunk_tokens", [int(c) for c in s.prefill.chunk_tokens]))
    if topo == Topology.AGGREGATED.value:
        h = trial.suggest_categorical("agg_hardware", hw)
        shape = trial.suggest_categorical("agg_shape", list(s.decode.shapes))
        share = trial.suggest_float(
            "agg_prefill_share", s.aggregated.prefill_share[0], s.aggregated.prefill_share[1]
        )
        batch = trial.suggest_int("decode_max_batch", lo, hi, log=True)
        return Choice(topo, kv, h, h, shape, shape, chunk, batch, share, 0.0)
    ph = trial.suggest_categorical("prefill_hardware", hw)
    ps = trial.suggest_categorical("prefill_shape", list(s.prefill.shapes))
    dh = trial.suggest_categorical("decode_hardware", hw)
    ds = trial.suggest_categorical("decode_shape", list(s.decode.shapes))
    batch = trial.suggest_int("decode_max_batch", lo, hi, log=True)
    ffn, mh, ms = 0.0, None, None
    if topo in SPLIT_DECODE:
        ffn = float(trial.suggest_categorical("ffn_tokens_per_gpu", list(s.afd.ffn_tokens_per_gpu)))
    if topo == Topology.FOUR_STAGE.value:
        mh = trial.suggest_categorical("midfill_hardware", hw)
        ms = trial.suggest_categorical("midfill_shape", list(s.midfill.shapes or s.prefill.shapes))
    return Choice(topo, kv, ph, dh, ps, ds, chunk, batch, 0.0, ffn, mh, ms)


def choice_from_params(params: dict[str, Any]) -> Choice:
    """The :class:`Choice` of a finished trial, from its recorded parameters."""
    topo = params["topology"]
    if topo == Topology.AGGREGATED.value:
        h, shape = params["agg_hardware"], params["agg_shape"]
        return Choice(
            topo,
            params["kv_policy"],
            h,
            h,
            shape,
            shape,
            int(params["chunk_tokens"]),
            int(params["decode_max_batch"]),
            float(params["agg_prefill_share"]),
            0.0,
        )
    return Choice(
        topo,
        params["kv_policy"],
        params["prefill_hardware"],
        params["decode_hardware"],
        params["prefill_shape"],
        params["decode_shape"],
        int(params["chunk_tokens"]),
        int(params["decode_max_batch"]),
        0.0,
        float(params.get("ffn_tokens_per_gpu", 0.0)),
        params.get("midfill_hardware"),
        params.get("midfill_shape"),
    )


def trial_params(c: Choice) -> dict[str, Any]:
    """The Optuna parameters :func:`suggest` asks for that give ``c`` (the inverse of
    :func:`choice_from_params`): what enqueues ``c`` as a trial."""
    out: dict[str, Any] = {"topology": c.topology, "kv_policy": c.kv_policy}
    out["chunk_tokens"] = int(c.chunk_tokens)
    if c.topology == Topology.AGGREGATED.value:
        out |= {"agg_hardware": c.prefill_hardware, "agg_shape": c.prefill_shape}
        out |= {"agg_prefill_share": float(c.prefill_share)}
    else:
        out |= {"prefill_hardware": c.prefill_hardware, "prefill_shape": c.prefill_shape}
        out |= {"decode_hardware": c.decode_hardware, "decode_shape": c.decode_shape}
    out["decode_max_batch"] = int(c.max_batch)
    if c.topology in SPLIT_DECODE:
        out["ffn_tokens_per_gpu"] = float(c.ffn_tokens_per_gpu)
    if c.topology == Topology.FOUR_STAGE.value:
        out |= {"midfill_hardware": c.midfill_hardware, "midfill_shape": c.midfill_shape}
    return out


def choice_record(c: Choice) -> dict[str, Any]:
    """The choice as the trial record stores it (``trial_params`` gives it as Optuna parameters)."""
    return asdict(c)
