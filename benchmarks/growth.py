"""How the MILP and the simulator grow with the problem: candidate hardware, pools (candidate
units) and KV classes for the MILP; configurations per call and resting KV classes for the fluid
simulator. Prints figures, not verdicts. Run: ``python benchmarks/growth.py``.
"""

from __future__ import annotations

import time

import numpy as np
from record import figure

from dse.catalog import load_catalog
from dse.evaluation import design_of
from dse.perf.params import load_params
from dse.placement import PlacementRequest, Topology
from dse.placement.candidates import build_candidates
from dse.placement.plan import solve_candidates
from dse.sim import ArrivalKind, Arrivals, OutputLengths, Scenario, simulate
from dse.sim.from_placement import pipeline_of
from dse.workload import Slo, ThinkBin, Workload
from formulations.solve import PlacementSolver, SolveOptions

HARDWARE = ("h200-sxm", "b200", "b300", "gb200-nvl72", "mi355x")
REPEATS = 3


def workload(classes: int) -> Workload:
    bins = tuple(ThinkBin(1.0 / classes, 30.0 * 4**i) for i in range(classes))
    return Workload(requests_per_s=50.0, input_tokens=4000.0, output_tokens=800.0, returning_share=0.6,
                    cached_prefix_tokens=20000.0, suffix_tokens=1000.0, think=bins)  # fmt: skip


def milp(hardware: tuple[str, ...], classes: int, catalog, params) -> tuple[int, float, float, float]:  # type: ignore[no-untyped-def]
    """Units, and the medians (ms) of building the candidates, solving, and solving without the
    root start (alternating with the solve)."""
    req = PlacementRequest(model="deepseek-v3", hardware=hardware, workload=workload(classes),
                           slo=Slo(ttft_s=3.0, tpot_s=0.05), topology=Topology.DISAGGREGATED)  # fmt: skip
    build, solve, plain = [], [], []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        cands = build_candidates(req, Topology.DISAGGREGATED, catalog, params)
        build.append(time.perf_counter() - t0)
        for start, times in ((True, solve), (False, plain)):
            t0 = time.perf_counter()
            solver = PlacementSolver(SolveOptions(time_limit_s=60.0, root_start=start))
            out = solve_candidates(req, cands, solver)
            times.append(time.perf_counter() - t0)
            assert out.feasible
    return cands.data.n_units, *(1e3 * float(np.median(t)) for t in (build, solve, plain))


def main() -> None:
    catalog, params = load_catalog(), load_params()
    print("MILP (disaggregated, every shape; median of 3, build = performance model + candidates, "
          "solve = pyomo build + HiGHS):")  # fmt: skip
    for n in range(1, len(HARDWARE) + 1):
        units, b, s, p = milp(HARDWARE[:n], 2, catalog, params)
        print(f"  {n} hardware, 2 KV classes: {units:3d} units; candidates {b:6.1f} ms, solve {s:7.1f} ms "
              f"({p:7.1f} ms without the root start)")  # fmt: skip
        note = f"{p:.0f} ms without the root start"
        figure(f"MILP solve, {n} hardware ({units} units), 2 KV classes", s, "ms", note)
    for k in (1, 2, 4, 8):
        units, b, s, p = milp(HARDWARE[:2], k, catalog, params)
        print(f"  2 hardware, {k} KV classes: {units:3d} units; candidates {b:6.1f} ms, solve {s:7.1f} ms "
              f"({p:7.1f} ms without the root start)")  # fmt: skip
        note = f"{p:.0f} ms without the root start"
        figure(f"MILP solve, 2 hardware, {k} KV classes", s, "ms", note)

    req = PlacementRequest(model="deepseek-v3", hardware=("b200",), workload=workload(4),
                           slo=Slo(ttft_s=3.0, tpot_s=0.05), topology=Topology.DISAGGREGATED)  # fmt: skip
    cands = build_candidates(req, Topology.DISAGGREGATED, catalog, params)
    design = design_of(req, solve_candidates(req, cands, PlacementSolver()))
    pipe, kv_gb = pipeline_of(design, catalog, params)
    w, resting = design.workload, design.resting
    lengths = OutputLengths((0.9, 0.1), (300.0, 4400.0))
    sc = Scenario(Arrivals(ArrivalKind.CONSTANT, w.requests_per_s), lengths, horizon_s=1800.0, warmup_s=300.0)
    simulate(pipe, sc, dt=1.0)  # compile
    print("fluid simulator (30 min at dt = 1 s, two output-length classes):")
    for n in (1, 10, 100, 1000):
        many = pipe.tiled(n)
        t0 = time.perf_counter()
        simulate(many, sc, dt=1.0)
        per = (time.perf_counter() - t0) / n
        print(f"  {n:5d} configurations in one call: {1e3 * per:.3f} ms per configuration")
        figure(f"fluid, {n} configurations per call", 1e3 * per, "ms per configuration")
    for k in (0, 1, len(resting)):
        t0 = time.perf_counter()
        for _ in range(20):
            simulate(pipe, sc, dt=1.0, kv_gb_per_seq=kv_gb, resting=resting[:k])
        ms = 1e3 * (time.perf_counter() - t0) / 20
        print(f"  one configuration with {k} resting KV classes: {ms:.2f} ms")
        figure(f"fluid, one configuration, {k} resting KV classes", ms, "ms")


if __name__ == "__main__":
    main()
