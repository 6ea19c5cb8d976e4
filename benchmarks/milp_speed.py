"""Placement MILP solve times: persistent re-solve against rebuilding, on study-sized instances.

A study trial proposes one prefill and one decode shape per hardware; the MILP then sizes the pools
and places three KV classes (5 tiers each). Each trial brings new coefficients (traffic, lengths,
targets) for the same structure, so the solver only loads values and re-solves: straight through
highspy (what studies use), or through pyomo's persistent interface (to compare), against
rebuilding; and with the root start (``formulations/root_start.py``) against without, and with
HiGHS's cutoff at the start's objective against without, alternating in the same run. Also times
the full ``dse place`` instance (every shape, three topologies).

Prints figures, not verdicts. Run: ``python benchmarks/milp_speed.py [TRIALS]``.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace

import numpy as np
from record import figure

from dse.catalog import Catalog, load_catalog
from dse.perf.params import PerfParams, load_params
from dse.placement import PlacementRequest, Topology, place
from dse.placement.candidates import build_candidates
from dse.workload import Slo, ThinkBin, Workload
from formulations import placement, root_start
from formulations.placement_data import PlacementData, Role
from formulations.solve import PlacementSolver, SolveOptions, SolveResult, run_highs

HW = ("b200", "h200-sxm", "gb200-nvl72")
THINK = (ThinkBin(0.6, 30.0), ThinkBin(0.3, 600.0), ThinkBin(0.1, 3600.0))


def subset(d: PlacementData, keep: list[int]) -> PlacementData:
    """The instance restricted to the units ``keep`` (what one trial proposes)."""
    k = np.array(keep)
    return replace(
        d,
        unit_names=tuple(d.unit_names[i] for i in keep),
        unit_hw=d.unit_hw[k],
        unit_role=d.unit_role[k],
        unit_gpus=d.unit_gpus[k],
        prefill_share=d.prefill_share[k],
        fresh_s=d.fresh_s[k],
        decode_tok_s=d.decode_tok_s[k],
        hbm_idle_gb=d.hbm_idle_gb[k],
        nic_gb_s=d.nic_gb_s[k],
        mid_s=d.mid_s[k],
        reload_s=d.reload_s[k],
    )


def trial_request(rng: np.random.Generator, hardware: tuple[str, ...] = HW) -> PlacementRequest:
    w = Workload(
        requests_per_s=float(rng.uniform(5, 300)),
        input_tokens=float(rng.uniform(1000, 8000)),
        output_tokens=float(rng.uniform(200, 2000)),
        returning_share=float(rng.uniform(0.2, 0.8)),
        cached_prefix_tokens=float(rng.uniform(5000, 60000)),
        suffix_tokens=float(rng.uniform(100, 2000)),
        think=THINK,
    )
    slo = Slo(ttft_s=float(rng.uniform(1.0, 5.0)), tpot_s=float(rng.uniform(0.03, 0.08)))
    return PlacementRequest(
        model="deepseek-v3", hardware=hardware, workload=w, slo=slo, topology=Topology.DISAGGREGATED
    )


def pick_units(d: PlacementData) -> list[int]:
    """The first prefill and the first decode shape of each hardware."""
    keep = []
    for h in range(d.n_hw):
        for role in (Role.PREFILL, Role.DECODE):
            idx = [u for u in range(d.n_units) if d.unit_hw[u] == h and d.unit_role[u] == role]
            if idx:
                keep.append(idx[0])
    return keep


def _same(a: SolveResult, b: SolveResult) -> bool:
    """Counts, flows (to 1e-9) and objective alike."""
    sa, sb = a.solution, b.solution
    if sa is None or sb is None:
        return sa is None and sb is None
    return bool(
        np.array_equal(sa.instances, sb.instances)
        and np.allclose(sa.fresh, sb.fresh, rtol=0, atol=1e-9)
        and np.allclose(sa.returning, sb.returning, rtol=0, atol=1e-9)
        and abs(a.objective - b.objective) <= 1e-9 * max(abs(a.objective), 1.0)
    )


def pct(a: list[float], q: float) -> float:
    return float(np.percentile(np.array(a) * 1e3, q))


def study_instances(
    trials: int, hardware: tuple[str, ...], catalog: Catalog, params: PerfParams
) -> tuple[list[PlacementData], list[float]]:
    """``trials`` study-sized instances of one structure on ``hardware``, and the seconds each
    candidate generation took."""
    rng = np.random.default_rng(0)
    gen, instances = [], []
    names: tuple[str, ...] | None = None
    while len(instances) < trials:
        req = trial_request(rng, hardware)
        t0 = time.perf_counter()
        full = build_candidates(req, Topology.DISAGGREGATED, catalog, params).data
        gen.append(time.perf_counter() - t0)
        sub = subset(full, pick_units(full))
        if names is None:
            names = sub.unit_names
        if sub.unit_names == names:  # same structure; a shape that drops out changes it
            instances.append(sub)
    return instances, gen


def root_start_by_hardware(catalog: Catalog, params: PerfParams, trials: int = 60) -> None:
    """Re-solves with and without the root start, alternating, on one, two and three hardware: where
    :data:`formulations.root_start.FEW_COUNTS` draws its line (the start is forced here, even on
    MILPs that few counts leave out)."""
    print(
        f"re-solve median with (forced) / without the root start, by the hardware a trial proposes "
        f"(shipped: no start at {root_start.FEW_COUNTS} counts or fewer):"
    )
    shipped, root_start.FEW_COUNTS = root_start.FEW_COUNTS, 0
    try:
        _started_against_plain(catalog, params, trials)
    finally:
        root_start.FEW_COUNTS = shipped


def _started_against_plain(catalog: Catalog, params: PerfParams, trials: int) -> None:
    for n in range(1, len(HW) + 1):
        instances, _ = study_instances(trials, HW[:n], catalog, params)
        started, plain = PlacementSolver(), PlacementSolver(SolveOptions(root_start=False))
        started.solve(instances[0])
        plain.solve(instances[0])
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(3):
            for d in instances[1:]:
                for solver, key in ((started, True), (plain, False)):
                    t0 = time.perf_counter()
                    solver.solve(d)
                    times[key].append(time.perf_counter() - t0)
        counts = 3 * n
        w, wo = pct(times[True], 50), pct(times[False], 50)
        print(f"  {n} hardware ({counts} counts): {w:.2f} ms with, {wo:.2f} ms without")
        figure(f"MILP re-solve median, {n} hardware, with / without the root start", w / wo, "x")


def cutoff_against_none(instances: list[PlacementData]) -> None:
    """Re-solves as shipped (HiGHS's MIP cut off at the root start's objective, presolve at the
    root only) against without the cutoff and against neither (HiGHS presolving at every node, as
    before 2026-12-03's evening), alternating in one run, two rounds over the trials."""
    solvers = {
        "shipped": PlacementSolver(),
        "no cutoff": PlacementSolver(SolveOptions(cutoff=False)),
        "neither": PlacementSolver(SolveOptions(cutoff=False)),
    }
    for solver in solvers.values():
        solver.solve(instances[0])  # built: what follows are re-solves
    built = next(iter(solvers["neither"]._built.values()))
    assert built.highs is not None
    built.highs.setOptionValue("mip_root_presolve_only", False)
    times: dict[str, list[float]] = {k: [] for k in solvers}
    objective: dict[str, list[float]] = {k: [] for k in solvers}
    for rnd in range(2):
        for d in instances[1:]:
            for k, solver in solvers.items():
                t0 = time.perf_counter()
                r = solver.solve(d)
                times[k].append(time.perf_counter() - t0)
                if rnd == 0:
                    objective[k].append(r.objective if r.has_solution else float("nan"))
    base = np.array(objective["neither"])
    print("re-solve with HiGHS's MIP cut off at the root start's objective and presolve at the root only:")
    for k in solvers:
        same = int(np.sum(np.abs(np.array(objective[k]) - base) <= 1e-4 * np.abs(base)))
        print(
            f"  {k:9s}: median {pct(times[k], 50):.2f} ms, p90 {pct(times[k], 90):.1f} ms; "
            f"the same objective as 'neither' (gap 1e-4) in {same} of {len(base)}"
        )
    ratio = pct(times["shipped"], 50) / pct(times["neither"], 50)
    print(f"  shipped / neither median ratio: {ratio:.2f}")
    figure("MILP re-solve median, shipped / without the cutoff and root-only presolve", ratio, "x")


def main(trials: int = 200) -> None:
    catalog, params = load_catalog(), load_params()
    instances, gen = study_instances(trials, HW, catalog, params)
    warm, unstarted = PlacementSolver(), PlacementSolver(SolveOptions(root_start=False))
    resolve, solver_s, feasible, plain_resolve, agree = [], [], 0, [], 0
    for d in instances:  # with and without the root start, alternating (this machine is noisy)
        t0 = time.perf_counter()
        r = warm.solve(d)
        resolve.append(time.perf_counter() - t0)
        solver_s.append(r.solve_s)
        feasible += r.has_solution
        t0 = time.perf_counter()
        p = unstarted.solve(d)
        plain_resolve.append(time.perf_counter() - t0)
        agree += r.has_solution == p.has_solution and (
            not r.has_solution or abs(r.objective - p.objective) <= 1e-4 * abs(p.objective)
        )
    via_pyomo = PlacementSolver(SolveOptions(direct=False))
    pyomo_resolve = []
    for d in instances:
        t0 = time.perf_counter()
        via_pyomo.solve(d)
        pyomo_resolve.append(time.perf_counter() - t0)
    built = next(iter(warm._built.values()))
    assert built.direct is not None and built.highs is not None and built.columns is not None
    load, fill, highs, via_params = [], [], [], []
    for d in instances:  # what a re-solve does (PlacementSolver._loaded), part by part
        t0 = time.perf_counter()
        placement.update(built.m, d)  # the way before: through pyomo's parameters, to compare
        built.direct.lp()
        via_params.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        values, bounds = placement.param_values(d), placement.var_bounds(d)
        t1 = time.perf_counter()
        lp = built.direct.lp_from(values, bounds)
        t2 = time.perf_counter()
        run_highs(built.highs, lp, built.columns, d)  # the root start and the MILP
        load.append(t1 - t0)
        fill.append(t2 - t1)
        highs.append(time.perf_counter() - t2)
    rebuild, same = [], {"direct": 0, "pyomo": 0}
    again = {"direct": PlacementSolver(), "pyomo": PlacementSolver(SolveOptions(direct=False))}
    for s in again.values():
        s.solve(instances[-1])  # built: what follows are re-solves
    for d in instances[: max(20, trials // 5)]:
        t0 = time.perf_counter()
        alone = PlacementSolver().solve(d)
        rebuild.append(time.perf_counter() - t0)
        for path, solver in again.items():
            same[path] += _same(alone, solver.solve(d))
    d0 = instances[0]
    print(
        f"study-sized instance: {d0.n_units} units on {d0.n_hw} hardware, {d0.n_classes} KV classes"
        f" x 5 tiers; {trials} trials, {feasible} feasible"
    )
    print(f"  candidate generation (perf model, all shapes): median {pct(gen, 50):.1f} ms")
    print(
        f"  re-solve (direct to highspy): median {pct(resolve[1:], 50):.1f} ms, "
        f"p95 {pct(resolve[1:], 95):.1f} ms, max {pct(resolve[1:], 100):.1f} ms "
        f"(the first solve builds: {resolve[0] * 1e3:.1f} ms)"
    )
    print(
        f"  re-solve without the root start (same run): median {pct(plain_resolve[1:], 50):.1f} ms, "
        f"p95 {pct(plain_resolve[1:], 95):.1f} ms; the same objective (within the 1e-4 gap) in "
        f"{agree} of {trials}"
    )
    figure("MILP re-solve median without the root start (same run)", pct(plain_resolve[1:], 50), "ms")
    figure("MILP re-solves with the root start at the same objective", agree, "of", f"{trials} trials")
    print(
        f"  re-solve (pyomo persistent):  median {pct(pyomo_resolve[1:], 50):.1f} ms, "
        f"p95 {pct(pyomo_resolve[1:], 95):.1f} ms"
    )
    print(
        f"  rebuild + solve:     median {pct(rebuild, 50):.1f} ms, p95 {pct(rebuild, 95):.1f} ms "
        f"({len(rebuild)} runs)"
    )
    print(f"  re-solve / rebuild median ratio: {pct(resolve[1:], 50) / pct(rebuild, 50):.2f}")
    n = len(rebuild)
    print(
        f"  the same solution as solving the data alone: direct re-solve {same['direct']} of {n}, "
        f"pyomo persistent re-solve {same['pyomo']} of {n}"
    )
    figure("MILP re-solves equal to solving alone (direct)", same["direct"], "of", f"{n} trials")
    figure("MILP re-solves equal to solving alone (pyomo persistent)", same["pyomo"], "of", f"{n} trials")
    ratio = pct(resolve[1:], 50) / pct(pyomo_resolve[1:], 50)
    print(f"  direct / pyomo re-solve median ratio: {ratio:.2f}")
    figure(
        "MILP re-solve median (direct)", pct(resolve[1:], 50), "ms", f"{d0.n_units} units, {trials} trials"
    )
    figure("MILP re-solve p95 (direct)", pct(resolve[1:], 95), "ms")
    figure("MILP re-solve median (pyomo persistent)", pct(pyomo_resolve[1:], 50), "ms")
    figure("MILP re-solve: HiGHS's own run, median", pct(highs, 50), "ms")
    figure("MILP rebuild + solve median", pct(rebuild, 50), "ms")
    print(
        f"  of a direct re-solve: the parameters' values from the data median {pct(load, 50):.2f} ms, "
        f"the coefficients into arrays {pct(fill, 50):.2f} ms, HiGHS's own run {pct(highs, 50):.1f} ms "
        f"(all solver calls, with a polish LP when the MILP left a gap: {pct(solver_s, 50):.1f} ms); "
        f"loading the same values into pyomo's parameters and reading them back: {pct(via_params, 50):.2f} ms"
    )
    figure("MILP re-solve: the model's arrays from the data, median", pct(load, 50) + pct(fill, 50), "ms")
    figure("MILP re-solve: the same through pyomo's parameters, median", pct(via_params, 50), "ms")

    req = trial_request(np.random.default_rng(1))
    req = replace(req, topology=Topology.AUTO)
    t0 = time.perf_counter()
    rep = place(req, catalog=catalog, params=params)
    total = time.perf_counter() - t0
    print(f"full `dse place` (every shape, 3 topologies, shadow prices): {total:.2f} s")
    figure("full dse place (3 topologies, shadow prices)", total, "s")
    for o in rep.outcomes:
        print(
            f"  {o.topology.value:14s} {o.candidates:3d} units: build {o.result.build_s * 1e3:6.1f} ms, "
            f"solve {o.result.solve_s * 1e3:6.1f} ms, {o.result.termination.value}"
        )
    cutoff_against_none(instances)
    root_start_by_hardware(catalog, params)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
