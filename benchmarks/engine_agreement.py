"""Do `dse place`'s answers hold once every request goes through the engines' schedulers?

A grid of 192 requests: DeepSeek-V3, GLM-4.6 and Qwen3-235B on B200 and on H200; 20 or 100
requests/s of 2,000-token prompts and 800-token answers; TTFT 0.5 or 1 s at p90 or p99; TPOT 50
or 100 ms; TensorRT-LLM or SGLang. Each is placed over every topology (`dse place`), and each
feasible topology's design is run through the engine-level simulation (`dse place --confirm`:
Poisson arrivals at the mean traffic). Prints how many of the MILP's designs, and of its
cheapest ones, hold their TTFT at the percentile and their TPOT on the mean, how many miss their
TPOT alone, how many attention-FFN designs send hidden states across the NICs to expert pools
that fan out wider than the attention's own shape (which the MILP's attention NIC cap counted
until session 58, when each attention unit came to be sized for the expert units it feeds), and
the time. To compare with an older commit,
run it with ``PYTHONPATH`` at that commit's checkout, each run saving every request's outcome
(``--save FILE.json``: per topology, its $/hour and its simulated TTFT, or none where it cannot
be simulated request by request), then ``--compare BEFORE.json AFTER.json``: the requests whose
answer moved, how many got a cheaper design per topology, and the designs that changed between
holding, missing and not simulated.
Run: ``python benchmarks/engine_agreement.py [--save FILE.json]``, or with ``--compare A B``.
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
import time

import numpy as np
from record import figure

from dse.catalog import load_catalog
from dse.context import Context
from dse.evaluation import EngineCheck, confirmed, design_of, engine_checks
from dse.perf.afd import afd_bytes_per_token
from dse.perf.params import load_params
from dse.placement import PlacementRequest, Topology, place
from dse.sim.engine_latency import _pool
from dse.sim.from_placement import SimDesign, SimPool, expert_routes, one_per_shape, shape_of
from dse.workload import Slo, Workload
from formulations.solve import PlacementSolver

MODELS = ("glm-4.6", "deepseek-v3", "qwen3-235b")
HARDWARE = ("b200", "h200-sxm")
RATES = (20.0, 100.0)
TTFTS = (0.5, 1.0)
PERCENTILES = (90.0, 99.0)
ENGINES = ("trt", "sglang")
TPOTS = (0.05, 0.1)


def main(save: str | None = None) -> None:
    catalog, params = load_catalog(), load_params()
    outcomes: dict[str, dict[str, list[object]]] = {}  # request -> topology -> [$/hour, TTFT, holds]
    ctx = Context(catalog, params, PlacementSolver())
    designs = held = best_held = requests = unsimulated = resolved = 0
    links, over = np.zeros(3, dtype=int), []  # see _tpot_and_fan_out
    t0 = time.perf_counter()
    grid = itertools.product(MODELS, HARDWARE, RATES, TTFTS, PERCENTILES, ENGINES, TPOTS)
    for model, hw, rate, ttft, q, engine, tpot in grid:
        req = PlacementRequest(
            model=model,
            hardware=(hw,),
            workload=Workload(requests_per_s=rate, input_tokens=2000.0, output_tokens=800.0),
            slo=Slo(ttft_s=ttft, tpot_s=tpot, percentile=q),
            engine=engine,
        )
        report = place(req, catalog=catalog, params=params, with_shadow_prices=False)
        if report.best is None:
            continue
        ranked = engine_checks(report, ctx, rounds=0)  # the MILP's own designs, cheapest first
        usd = {o.topology.value: o.usd_per_hour for o in report.ranked()}
        key = f"{model} {hw} {rate:g} req/s TTFT {ttft:g} s p{q:g} TPOT {tpot * 1e3:g} ms {engine}"
        outcomes[key] = {c.topology.value: [usd[c.topology.value], c.ttft_s, c.holds] for c in ranked}
        checks = [c for c in ranked if c.ttft_s is not None]  # those simulated request by request
        requests += 1
        designs += len(checks)
        held += sum(c.holds for c in checks)
        links += _tpot_and_fan_out(req, checks, ctx)
        over += [c.tpot_mean_s / c.tpot_target_s for c in checks if c.ttft_holds and not c.tpot_holds]
        first = ranked[0] if ranked else None
        unsimulated += first is None or first.ttft_s is None  # several decode pools, mixed hardware
        best_held += bool(first is not None and first.ttft_s is not None and first.holds)
        if first is not None and not first.holds:
            print(f"misses: {model} {hw} {rate:g} req/s TTFT {ttft:g} s p{q:g} TPOT {tpot * 1e3:g} ms "
                  f"{engine}: {first.describe()}")  # fmt: skip
            answer = confirmed(report, engine_checks(report, ctx)).best  # as `dse place --confirm`
            fallback = next((c.topology.value for c in ranked if c.holds), None)
            again = answer is not None and answer.topology is first.topology
            resolved += again
            said = f"{answer.topology.value} at ${answer.usd_per_hour:.1f}/hour" if answer else "none"
            nxt = f"{fallback} at ${usd[fallback]:.1f}/hour" if fallback else "none"
            how = "solved again" if again else "another topology"
            print(f"  --confirm: {said} ({how}; the next topology that holds: {nxt})")
    seconds = time.perf_counter() - t0
    print(f"{requests} requests placed; the cheapest design holds in {best_held} and cannot be "
          f"simulated request by request in {unsimulated}; of {designs} designs simulated, {held} "
          f"hold; where the cheapest misses, solving its topology again finds one that holds in "
          f"{resolved} ({seconds:.0f} s)")  # fmt: skip
    figure("cheapest designs that hold in the engine-level simulation", best_held, "of", f"{requests}")
    figure("designs that hold in the engine-level simulation", held, "of", f"{designs} simulated")
    missed = requests - best_held - unsimulated
    figure("cheapest designs that miss and hold when solved again", resolved, "of", f"{missed}")
    by = f" by {min(over) - 1:.1%}-{max(over) - 1:.1%}" if over else ""
    print(f"{links[0]} designs hold their TTFT and miss their TPOT (their worst pool's mean{by}); "
          f"{links[1]} attention-FFN designs send hidden states across the NICs to expert pools "
          f"that fan out wider than the attention's own shape, {links[2]} of them missing their "
          f"TPOT")  # fmt: skip
    figure("designs that miss only their TPOT", int(links[0]), "of", f"{designs} simulated")
    figure("attention-FFN designs feeding wider expert pools across the NICs", int(links[1]), "")
    figure("wall time of the benchmark", seconds, "s")
    if save is not None:
        with open(save, "w") as f:
            json.dump(outcomes, f, indent=0)


def _tpot_and_fan_out(req: PlacementRequest, checks: list[EngineCheck], ctx: Context) -> np.ndarray:
    """(designs that hold their TTFT and miss their TPOT, attention-FFN designs one of whose
    attention pools sends hidden states across the NICs to an expert pool whose tokens fan out to
    more bytes than the attention's own shape's, which the MILP's attention NIC cap counted until
    session 58; those of them that miss their TPOT)."""
    out = np.zeros(3, dtype=int)
    for c in checks:
        out[0] += c.ttft_holds and not c.tpot_holds
        if c.topology is not Topology.AFD or c.outcome is None:
            continue
        design = design_of(req, c.outcome)
        routes = expert_routes(design)
        wider = any(
            not r.near and _per_token(design, ctx, r.pool) > _per_token(design, ctx, a) * (1.0 + 1e-9)
            for a in one_per_shape([p for p in design.pools if p.role == "attention"])
            for r in routes[shape_of(a)]
        )
        out[1:] += (wider, wider and not c.tpot_holds)
    return out


def _per_token(design: SimDesign, ctx: Context, p: SimPool) -> float:
    """Bytes a token's hidden states move between attention and an expert instance of ``p``'s shape."""
    return float(afd_bytes_per_token(_pool(design, ctx.catalog, ctx.params, p))[0])


def _state(o: list[object] | None) -> str:
    if o is None:
        return "absent"
    return "not simulated" if o[1] is None else "holds" if o[2] else "misses"


def compare(before_file: str, after_file: str) -> None:
    """What moved between two saved runs (``--save``): per topology, the requests whose design got
    cheaper (the largest saving with its request), and the designs whose state changed."""
    with open(before_file) as f:
        before = json.load(f)
    with open(after_file) as f:
        after = json.load(f)
    moved: dict[tuple[str, str], int] = {}
    for key in sorted(set(before) & set(after)):
        b, a = before[key], after[key]
        for topo in sorted(set(b) | set(a)):
            change = (_state(b.get(topo)), _state(a.get(topo)))
            if change[0] != change[1]:
                moved[change] = moved.get(change, 0) + 1
                print(f"{key}: {topo} {change[0]} -> {change[1]}")
    for topo in ("aggregated", "disaggregated", "afd"):
        pairs = [(k, before[k][topo][0], after[k][topo][0]) for k in before
                 if k in after and topo in before[k] and topo in after[k]]  # fmt: skip
        cheaper = [(1 - a / b, k, b, a) for k, b, a in pairs if a < b * (1 - 1e-9)]
        dearer = [(a / b - 1, k) for k, b, a in pairs if a > b * (1 + 1e-9)]
        line = f"{topo}: cheaper at {len(cheaper)} of {len(pairs)} requests, dearer at {len(dearer)}"
        if cheaper:
            top = max(cheaper)
            line += (f" (median saving {statistics.median(c[0] for c in cheaper):.1%}); largest saving "
                     f"{top[0]:.1%} ({top[1]}: ${top[2]:,.2f} -> ${top[3]:,.2f}/hour)")  # fmt: skip
        if dearer:
            held = sum(1 for _, k in dearer if _state(before[k][topo]) == "holds")
            line += (f"; dearer by a median {statistics.median(d[0] for d in dearer):.1%}, at most "
                     f"{max(dearer)[0]:.1%}, {held} of them designs that held before")  # fmt: skip
        print(line)
    best = {k: (min(v.values(), key=lambda t: t[0])[0], min(before[k].values(), key=lambda t: t[0])[0])
            for k, v in after.items() if k in before}  # fmt: skip
    down = [1 - a / b for a, b in best.values() if a < b * (1 - 1e-9)]
    up = [a / b - 1 for a, b in best.values() if a > b * (1 + 1e-9)]
    print(f"each request's cheapest design: cheaper at {len(down)}, dearer at {len(up)}; median change "
          f"{statistics.median([a / b - 1 for a, b in best.values()]):+.1%}")  # fmt: skip
    cheapest = sum(1 for k in after if k in before and min(after[k], key=lambda t: after[k][t][0])
                   != min(before[k], key=lambda t: before[k][t][0]))  # fmt: skip
    print(f"requests whose cheapest topology changed: {cheapest}")
    for (was, now), n in sorted(moved.items()):
        print(f"designs {was} -> {now}: {n}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--compare"]:
        compare(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[2] if sys.argv[1:2] == ["--save"] else None)
