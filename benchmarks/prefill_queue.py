"""Does the MILP price a prefill server's TTFT as the engine-level simulation runs it?

A disaggregated design's prefill pool is priced by :mod:`dse.placement.prefill_queue` (forwards
of what queued during the one before, the chance a prompt finds every instance busy, SGLang's
hand-shake and attention-DP lanes). Before 2026-12-05 it was an M/D/1 wait behind a whole
batch with the throughput fit's queue factor (4.15), which put TensorRT-LLM's prefill pools at
2-10% utilisation and SGLang's attention-DP ones short. For DeepSeek-V3 on H200 and B200 at 20
requests/s (TensorRT-LLM and SGLang; 2,000- and 8,000-token prompts; p90 and p99; a TP8 and an
attention-DP 8-GPU prefill shape), each placed design's prefill pool is resized from one
instance up, and at each size this prints the TTFT the curve gives at the load each instance
takes beside the simulation's, then the ratio's spread. Above 1 the MILP is the stricter. Then
the surrogate it replaced, on one example (:func:`before`).
Run: ``python benchmarks/prefill_queue.py`` (about 10 s).
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
from record import figure

from dse.catalog import load_catalog
from dse.evaluation import design_of
from dse.perf.params import load_params
from dse.placement import PlacementRequest, Topology, place
from dse.placement.prefill_queue import prefill_curve
from dse.placement.request import UnitOptions
from dse.placement.shapes import Shapes
from dse.sim.engine_latency import design_latency
from dse.workload import Slo, Workload

RATE = 20.0
DECODE = ("8gpu-dpa-ep8",)  # one decode shape: the simulation takes the design whatever its prefill pool
CASES = list(
    itertools.product(("h200-sxm", "b200"), ("sglang", "trt"), (2000.0, 8000.0), (90.0, 99.0),
                      ("8gpu-tp8-ep8", "8gpu-dpa-ep8"))
)  # fmt: skip


def curve_ttft(req: PlacementRequest, shape: str, catalog, params) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    """(prompts/s an instance takes, TTFT at the percentile) along the shape's curve."""
    hw = req.hardware[0]
    s = Shapes(req, catalog.model(req.model), [catalog.hardware(hw)], params, handed=True)
    i = [x.label() for x in s.par].index(shape)
    c = prefill_curve(s, i, req.engine, params, req.slo.percentile, req.workload.requests_per_s)
    assert c is not None
    lat = params.latency
    base = lat.frontend_s + lat.handoff_s + s.fresh_handoff_s[i] + c.scale * s.fresh.one_s[i]
    lam = c.share / (c.scale * s.fresh.busy_s[i] * c.more[0])
    return lam, base + c.extra_s


def main() -> None:
    catalog, params = load_catalog(), load_params()
    ratios: list[float] = []
    for hw, engine, isl, q, shape in CASES:
        only = UnitOptions(prefill_shapes=(shape,), decode_shapes=DECODE)
        req = PlacementRequest("deepseek-v3", (hw,), Workload(RATE, isl, 800.0), Slo(2.0, 0.05, q),
                               Topology.DISAGGREGATED, engine=engine, options=only)  # fmt: skip
        best = place(req, catalog=catalog, params=params, with_shadow_prices=False).best
        if best is None:
            continue
        design = design_of(req, best)
        lam, ttft = curve_ttft(req, shape, catalog, params)
        out = []
        for n in range(1, 40):
            each = RATE / n
            if each > lam[-1]:  # beyond the curve: the MILP would not load an instance so
                continue
            pools = tuple(replace(p, instances=float(n)) if p.role == "prefill" else p for p in design.pools)
            lat = design_latency(replace(design, pools=pools), catalog, params)
            assert lat is not None
            sim = float(np.percentile(lat.ttft_s, q))
            model = float(np.interp(each, lam, ttft))
            if sim <= 5.0:
                ratios.append(model / sim)
                out.append(f"{n}: {model:.2f}/{sim:.2f}")
            if each < 0.3 * lam[-1]:
                break
        print(f"{hw:9s} {engine:6s} {isl:5.0f} tokens p{q:g} {shape}: " + ", ".join(out))
    r = np.array(ratios)
    p10, p90 = np.percentile(r, [10, 90])
    print(f"{len(r)} pool sizes: TTFT priced / simulated median {np.median(r):.2f} (p10 {p10:.2f}, "
          f"p90 {p90:.2f}); below 0.9 at {int((r < 0.9).sum())}")  # fmt: skip
    figure("prefill pool TTFT, priced over simulated (median)", float(np.median(r)), "ratio")
    before(catalog, params)


def before(catalog, params) -> None:  # type: ignore[no-untyped-def]
    """The surrogate the curve replaced, on DeepSeek-V3 on H200 at 20 requests/s of 2,000-token
    prompts, TTFT 0.5 s at p90: a wait of ``k x q x t_batch x rho / (1 - rho)`` behind a whole
    batch (``q`` the throughput fit's queue factor), without the fitted front end and hand-off.
    Prints the utilisation it allowed each prefill shape, and for TensorRT-LLM's 8-GPU
    attention-DP shape the instances that buys against the simulation's TTFT at two."""
    from dse.perf.serving import RHO_MAX
    from dse.placement.candidates import _wait

    slo = Slo(0.5, 0.05, 90.0)
    for engine in ("trt", "sglang"):
        req = PlacementRequest("deepseek-v3", ("h200-sxm",), Workload(RATE, 2000.0, 800.0), slo,
                               Topology.DISAGGREGATED, engine=engine)  # fmt: skip
        s = Shapes(req, catalog.model("deepseek-v3"), [catalog.hardware("h200-sxm")], params, handed=True)
        k_q = slo.wait_quantile_factor * params.prefill_queue_factor
        shares = {}
        for i in np.flatnonzero(s.fits):
            room = slo.ttft_s - s.fresh.one_s[i] - s.fresh_handoff_s[i]
            waited = _wait(float(room), k_q * float(s.fresh.batch_s[i]), RHO_MAX, None)
            shares[s.par[i].label()] = waited[0] if waited else float("nan")
        print(f"before, {engine}: utilisation the surrogate allowed, by prefill shape: "
              + ", ".join(f"{k} {v:.0%}" for k, v in shares.items()))  # fmt: skip
        if engine != "trt":
            continue
        shape = "8gpu-dpa-ep8"
        i = [x.label() for x in s.par].index(shape)
        bought = int(np.ceil(RATE * float(s.fresh.busy_s[i]) / shares[shape] - 1e-9))
        one = replace(req, options=UnitOptions(prefill_shapes=(shape,), decode_shapes=(shape,)))
        best = place(one, catalog=catalog, params=params, with_shadow_prices=False).best
        assert best is not None
        design = design_of(one, best)
        two = tuple(replace(p, instances=2.0) if p.role == "prefill" else p for p in design.pools)
        lat = design_latency(replace(design, pools=two), catalog, params)
        assert lat is not None
        print(f"before, trt {shape}: {bought} prefill instances for {RATE:g} requests/s; the simulation "
              f"holds TTFT {lat.percentile('ttft', 90.0):.2f} s at p90 with 2")  # fmt: skip


if __name__ == "__main__":
    main()
