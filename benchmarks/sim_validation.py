"""The fluid simulator against the discrete-event reference: errors per scenario, stability-verdict
agreement, the oscillation case, and the speed ratio.

Two pipelines: a small one (8 prefill servers of 0.5 s, 6 decode instances of 128 slots at
20 ms + 0.15 ms per sequence) for the scenario table, and a DeepSeek-V3 placement on B200 (from
``dse place``) for the speed ratio at a realistic batch. Prints figures, not verdicts.
Run: ``python benchmarks/sim_validation.py``.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
from record import figure

from dse.catalog import load_catalog
from dse.evaluation import design_of
from dse.perf.params import load_params
from dse.placement import PlacementRequest, Topology, place
from dse.sim import ArrivalKind, Arrivals, OutputLengths, Pipeline, Planner, PlannerKind, Scenario
from dse.sim.des import simulate_des
from dse.sim.fluid import simulate_fluid
from dse.sim.from_placement import pipeline_of
from dse.workload import Slo, Workload

TAIL = OutputLengths((0.9, 0.1), (200.0, 2000.0))
LONG_TAIL = OutputLengths((0.95, 0.05), (150.0, 4500.0))
SEEDS = (1, 2, 3)


def small(cp: float = 8, cd: float = 6, slots: int = 128, slope: float = 0.00015) -> Pipeline:
    table = (0.02 + slope * np.arange(slots + 1))[None, :]
    return Pipeline(
        np.array([float(cp)]),
        np.array([0.5]),
        np.array([0.01]),
        np.array([float(cd)]),
        np.array([float(slots)]),
        table,
        np.array([np.inf]),
    )


def capacity(p: Pipeline, lengths: OutputLengths) -> float:
    return float(min(p.prefill_capacity()[0], p.decode_capacity(lengths)[0]))


def scenarios(p: Pipeline) -> list[tuple[str, Pipeline, Scenario]]:
    cap = capacity(p, TAIL)

    def const(load: float, lengths: OutputLengths = TAIL, **kw: object) -> Scenario:
        return Scenario(
            Arrivals(ArrivalKind.CONSTANT, load * cap), lengths, horizon_s=1800, warmup_s=300, **kw
        )  # type: ignore[arg-type]

    osc = Planner(
        PlannerKind.REACTIVE, period_s=30.0, delay_s=90.0, switch_s=20.0, threshold_s=2.0, max_move=3
    )
    damped = replace(osc, kind=PlannerKind.HYSTERESIS)
    # 60% returning turns: reloads of 0.4 s over 4 links, midfills of 0.3 s, handoffs of 0.2 s over 6
    midfill = replace(
        p,
        handoff_s=np.array([0.2]),
        midfill_share=np.array([0.6]),
        midfill_s=np.array([0.3]),
        reload_s=np.array([0.4]),
        reload_servers=np.array([4.0]),
        handoff_servers=np.array([6.0]),
    )
    mcap = capacity(midfill, TAIL)
    tilt = small(cp=2, cd=6, slots=64, slope=0.0002)  # 7 req/s needs 4-6 prefill: the planner must move
    return [
        ("light (40%)", p, const(0.4)),
        ("moderate (70%)", p, const(0.7)),
        ("near capacity (93%)", p, const(0.93)),
        ("overload (120%)", p, const(1.2)),
        (
            "burst (60% x1.6 for 5 min)",
            p,
            Scenario(
                Arrivals(ArrivalKind.BURST, 0.6 * cap, burst_factor=1.6, burst_start_s=600, burst_s=300),
                TAIL,
                horizon_s=1800,
                warmup_s=300,
            ),
        ),
        (
            "diurnal (60% +-30%)",
            p,
            Scenario(
                Arrivals(ArrivalKind.DIURNAL, 0.6 * cap, amplitude=0.3, period_s=1200),
                TAIL,
                horizon_s=2400,
                warmup_s=300,
            ),
        ),
        ("long-tailed decode (70%)", p, const(0.7, LONG_TAIL)),
        (
            "midfill-heavy (60% returning, 70%)",
            midfill,
            Scenario(Arrivals(ArrivalKind.CONSTANT, 0.7 * mcap), TAIL, horizon_s=1800, warmup_s=300),
        ),
        (
            "oscillation (reactive, 90 s stale)",
            tilt,
            Scenario(Arrivals(ArrivalKind.CONSTANT, 7.0), TAIL, planner=osc, horizon_s=3600, warmup_s=600),
        ),
        (
            "damped (hysteresis)",
            tilt,
            Scenario(Arrivals(ArrivalKind.CONSTANT, 7.0), TAIL, planner=damped, horizon_s=3600, warmup_s=600),
        ),
        (
            "damped (predictive)",
            tilt,
            Scenario(
                Arrivals(ArrivalKind.CONSTANT, 7.0),
                TAIL,
                planner=replace(osc, kind=PlannerKind.PREDICTIVE),
                horizon_s=3600,
                warmup_s=600,
            ),
        ),
    ]


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else float("nan")


def main() -> None:
    p = small()
    print(
        f"small pipeline: capacity {capacity(p, TAIL):.2f} req/s (prefill {p.prefill_capacity()[0]:.1f}, "
        f"decode {p.decode_capacity(TAIL)[0]:.1f}); DES averaged over seeds {SEEDS}"
    )
    header = (
        f"{'scenario':36s} {'tput':>6s} {'TPOT':>6s} {'E2E':>6s} {'TTFT':>6s} {'TTFTp99':>8s} {'E2Ep99':>7s}"
        f"  stable(f/d)  oscillation period f/d"
    )
    print(header)
    for name, pipe, sc in scenarios(p):
        f, _ = simulate_fluid(pipe, sc)
        ds = [simulate_des(pipe, sc, seed=s)[0] for s in SEEDS]

        def dmean(key: str, ds: list = ds) -> float:  # type: ignore[type-arg]
            return float(np.mean([getattr(d, key)[0] for d in ds]))

        errs = [
            rel(float(getattr(f, k)[0]), dmean(k))
            for k in ("requests_per_s", "tpot_mean_s", "e2e_mean_s", "ttft_mean_s", "ttft_p99_s", "e2e_p99_s")
        ]
        stab = f"{'y' if f.stable[0] else 'n'}/{''.join('y' if d.stable[0] else 'n' for d in ds)}"
        osc = (
            f"{f.oscillation_period_s[0]:.0f}/" + ",".join(f"{d.oscillation_period_s[0]:.0f}" for d in ds)
            if f.oscillating[0] or any(d.oscillating[0] for d in ds)
            else "none"
        )
        flag = " (near capacity: low confidence)" if f.near_capacity[0] else ""
        print(
            f"{name:36s} " + " ".join(f"{100 * e:5.1f}%" for e in errs[:4]) + f" {100 * errs[4]:7.1f}%"
            f" {100 * errs[5]:6.1f}%  {stab:>11s}  {osc}{flag}"
        )

    # stability verdict agreement outside a 5% band around capacity
    cap = capacity(p, TAIL)
    loads = np.linspace(0.5, 1.5, 41)
    agree = total = 0
    for load in loads:
        if abs(load - 1.0) <= 0.05:
            continue
        sc = Scenario(Arrivals(ArrivalKind.CONSTANT, load * cap), TAIL, horizon_s=1800, warmup_s=300)
        f, _ = simulate_fluid(p, sc)
        d, _, _ = simulate_des(p, sc, seed=int(load * 1000))
        agree += int(f.stable[0] == d.stable[0])
        total += 1
    print(
        f"stability verdict agreement outside +-5% of capacity: {agree}/{total} = {100 * agree / total:.1f}%"
    )
    figure("fluid vs DES stability verdicts agreeing (outside +-5% of capacity)", 100 * agree / total, "%")

    # speed at a realistic batch: DeepSeek-V3 on B200 from the placement engine
    catalog, params = load_catalog(), load_params()
    for rate in (20.0, 200.0):
        speed(catalog, params, rate)


def speed(catalog, params, rate: float) -> None:  # type: ignore[no-untyped-def]
    req = PlacementRequest(
        model="deepseek-v3",
        hardware=("b200",),
        topology=Topology.DISAGGREGATED,
        workload=Workload(requests_per_s=rate, input_tokens=4000.0, output_tokens=1000.0),
        slo=Slo(ttft_s=2.0, tpot_s=0.05),
    )
    placed = place(req, catalog=catalog, params=params, with_shadow_prices=False)
    assert placed.best is not None
    real, _ = pipeline_of(design_of(req, placed.best), catalog, params)
    w = req.workload
    sc = Scenario(
        Arrivals(ArrivalKind.CONSTANT, w.requests_per_s),
        OutputLengths((1.0,), (w.output_tokens,)),
        horizon_s=1800,
        warmup_s=300,
    )
    simulate_fluid(real, sc)  # compile and warm
    t0 = time.perf_counter()
    reps = 20
    for _ in range(reps):
        f, _ = simulate_fluid(real, sc)
    t_one = (time.perf_counter() - t0) / reps
    many = real.tiled(1000)
    t0 = time.perf_counter()
    simulate_fluid(many, sc)
    t_many = (time.perf_counter() - t0) / 1000
    t0 = time.perf_counter()
    d, _, _ = simulate_des(real, sc, seed=0)
    t_des = time.perf_counter() - t0
    print(
        f"DeepSeek-V3 on B200 at {rate:g} req/s ({real.prefill_instances[0]:g} prefill servers, "
        f"{real.decode_instances[0]:g} x {real.slots[0]:g}-slot decode, 30 min): DES {t_des:.2f} s, fluid "
        f"{1e3 * t_one:.2f} ms alone ({t_des / t_one:,.0f}x), {1e3 * t_many:.3f} ms per configuration in a "
        f"batch of 1000 ({t_des / t_many:,.0f}x)"
    )
    figure(f"fluid simulation, 30 min at {rate:g} req/s", 1e3 * t_one, "ms")
    figure(f"fluid per configuration in a batch of 1000, {rate:g} req/s", 1e3 * t_many, "ms")
    figure(f"DES reference, 30 min at {rate:g} req/s", t_des, "s")
    print(
        f"  throughput fluid {f.requests_per_s[0]:.3f} vs DES {d.requests_per_s[0]:.3f} req/s; "
        f"E2E {f.e2e_mean_s[0]:.2f} vs {d.e2e_mean_s[0]:.2f} s; TPOT {1e3 * f.tpot_mean_s[0]:.2f} vs "
        f"{1e3 * d.tpot_mean_s[0]:.2f} ms; TTFT {f.ttft_mean_s[0]:.3f} vs {d.ttft_mean_s[0]:.3f} s"
    )


if __name__ == "__main__":
    main()
