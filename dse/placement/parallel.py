"""Instance shape labels: ``8gpu-tp8-ep8``, ``16gpu-dpa-ep16``, ``16gpu-pp2-tp8-ep8``, parsed into
the parallelism they name and written back in one canonical form (what every list of shapes is
matched by). What a shape costs on a hardware is :mod:`dse.placement.shapes`'."""

from __future__ import annotations

from dataclasses import dataclass

from dse.errors import InputError


@dataclass(frozen=True)
class Parallel:
    """An instance's GPUs and how its work is split: attention TP (1: data-parallel attention),
    expert parallelism, and pipeline stages (prefill only), each stage ``gpus / pp`` GPUs with
    ``attn_tp`` and ``ep`` inside it and a share of the layers."""

    gpus: int
    attn_tp: int
    ep: int
    pp: int = 1

    @property
    def stage_gpus(self) -> int:
        return self.gpus // self.pp

    def label(self) -> str:
        attn = f"tp{self.attn_tp}" if self.attn_tp > 1 else "dpa"
        stages = f"pp{self.pp}-" if self.pp > 1 else ""
        return f"{self.gpus}gpu-{stages}{attn}-ep{self.ep}"


def parse_shape(label: str) -> Parallel:
    """``"16gpu-dpa-ep16"``, ``"8gpu-tp8-ep8"`` or ``"16gpu-pp2-tp8-ep8"`` as a :class:`Parallel`."""
    try:
        parts = label.split("-")
        pp = 1
        if len(parts) == 4 and parts[1].startswith("pp"):
            pp = int(parts[1].removeprefix("pp"))
            parts = [parts[0], parts[2], parts[3]]
        g, attn, ep = parts
        gpus = int(g.removesuffix("gpu"))
        tp = 1 if attn == "dpa" else int(attn.removeprefix("tp"))
        par = Parallel(gpus, tp, int(ep.removeprefix("ep")), pp)
    except ValueError:
        raise InputError(
            "shape", "label", "must look like 8gpu-tp8-ep8, 16gpu-dpa-ep16 or 16gpu-pp2-tp8-ep8", label
        ) from None
    if min(par.gpus, par.attn_tp, par.ep, par.pp) < 1:
        raise InputError("shape", "label", "GPUs, TP, EP and pipeline stages must each be at least 1", label)
    return par


def canonical_shape(label: str) -> str:
    """``label`` as dse writes it (``8gpu-tp1-ep8`` is ``8gpu-dpa-ep8``, ``pp1-`` is left out):
    the form shapes are matched by."""
    return parse_shape(label).label()
