"""Does a looser TPOT target ever cost more? Aggregated and attention-FFN designs with and without
the tighter paces.

36 series: DeepSeek-V3, GLM-4.6 and Kimi K2 on H200 and B200, 50 requests/s of 2,000- or
8,000-token prompts and 800-token answers, TTFT 0.5, 1 or 2 s at p90; each placed at TPOT 30, 50,
100, 150, 200 and 300 ms, once with the decode units at their target's largest batch only
(``tighter_paces=False``, as a search trial builds them) and once also at tighter paces (``dse
place`` now), the two alternating: aggregated (units also at the grid's tighter paces), then
attention-FFN (the design also solved at each attention and FFN unit's own pace below the target).
Prints, per topology, the series whose cost rises with a looser target, the largest rise, how
many points the paces made cheaper, and the time of both.
Run: ``python benchmarks/tpot_paces.py``.
"""

from __future__ import annotations

import itertools
import time

from record import figure

from dse.catalog import load_catalog
from dse.perf.params import load_params
from dse.placement import PlacementRequest, Topology, place
from dse.placement.request import UnitOptions
from dse.workload import Slo, Workload

MODELS = ("deepseek-v3", "glm-4.6", "kimi-k2")
HARDWARE = ("h200-sxm", "b200")
PROMPTS = (2000.0, 8000.0)
TTFTS = (0.5, 1.0, 2.0)
TPOTS = (0.03, 0.05, 0.1, 0.15, 0.2, 0.3)


CATALOG, PARAMS = load_catalog(), load_params()


def cost(
    topology: Topology, model: str, hw: str, prompt: float, ttft: float, tpot: float, paced: bool
) -> tuple[float, float]:
    """$/hour of the answer of one topology (inf if none) and the seconds `place` took."""
    req = PlacementRequest(
        model=model,
        hardware=(hw,),
        workload=Workload(requests_per_s=50.0, input_tokens=prompt, output_tokens=800.0),
        slo=Slo(ttft_s=ttft, tpot_s=tpot, percentile=90.0),
        topology=topology,
        options=UnitOptions(tighter_paces=paced),
    )
    t0 = time.perf_counter()
    best = place(req, catalog=CATALOG, params=PARAMS, with_shadow_prices=False).best
    return (best.usd_per_hour if best is not None else float("inf")), time.perf_counter() - t0


def main() -> None:
    for topology in (Topology.AGGREGATED, Topology.AFD):
        series_of(topology)


def series_of(topology: Topology) -> None:
    """Every series placed as ``topology``, with and without the paces; prints and records."""
    name = "aggregated" if topology is Topology.AGGREGATED else "attention-FFN"
    print(f"\n{name}: $/hour at TPOT " + ", ".join(f"{t * 1e3:g}" for t in TPOTS) + " ms")
    rising = {False: 0, True: 0}
    worst = {False: 0.0, True: 0.0}
    seconds = {False: 0.0, True: 0.0}
    cheaper = points = 0
    for n, (model, hw, prompt, ttft) in enumerate(itertools.product(MODELS, HARDWARE, PROMPTS, TTFTS)):
        series: dict[bool, list[float]] = {False: [], True: []}
        for tpot in TPOTS:
            for paced in (n % 2 == 0, n % 2 == 1):  # alternate which goes first
                usd, s = cost(topology, model, hw, prompt, ttft, tpot, paced)
                series[paced].append(usd)
                seconds[paced] += s
            points += 1
            cheaper += series[True][-1] < series[False][-1] * (1 - 1e-9)
        for paced, c in series.items():
            rises = [b / a - 1 for a, b in itertools.pairwise(c) if a < float("inf") and b > a * (1 + 1e-9)]
            rising[paced] += bool(rises)
            worst[paced] = max([worst[paced], *rises])
        print(
            f"{model:12s} {hw:9s} {prompt:6.0f} TTFT {ttft:3.1f}  before "
            + " ".join(f"{c:8.1f}" for c in series[False])
            + "  now "
            + " ".join(f"{c:8.1f}" for c in series[True])
        )
    total = len(MODELS) * len(HARDWARE) * len(PROMPTS) * len(TTFTS)
    for paced, label in ((False, "target's batch only"), (True, "with tighter paces")):
        print(
            f"{name}, {label}: a looser TPOT costs more in {rising[paced]} of {total} series "
            f"(largest rise {worst[paced]:.1%}); `place` {seconds[paced]:.1f} s in all"
        )
        figure(
            f"{name}: series where a looser TPOT costs more, {label}", rising[paced], "of", f"{total} series"
        )
        figure(f"{name} place time, {label}", seconds[paced], "s", f"{points} points")
    print(f"{name}: cheaper with the paces at {cheaper} of {points} points")
    figure(f"{name}: points cheaper with the paces", cheaper, "of", f"{points} points")


if __name__ == "__main__":
    main()
