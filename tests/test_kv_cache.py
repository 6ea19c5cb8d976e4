"""KV as a live cache (dse.sim.kv_cache): least recently used over the plan's tier capacities."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import Cli

from dse.catalog import Catalog
from dse.sim.kv_cache import MIN_ENTRIES, OUTCOMES, class_names, planned_capacity_gb, simulate_kv_cache
from dse.sim.kv_tiers import TIER_NAMES, RestingClass

ALL_HBM = {"hbm": 1.0, "dram": 0.0, "nvme": 0.0, "network": 0.0, "drop": 0.0}


def test_ample_hbm_keeps_every_session_and_none_drops_everything() -> None:
    c = (RestingClass(0.5, 30.0, 0.4, ALL_HBM),)
    ample = simulate_kv_cache(c, 10.0, capacity_gb={"hbm": 1e6}, seed=1)
    assert ample.simulated["all"]["hbm"] == 1.0 and ample.returns > 500
    none = simulate_kv_cache(c, 10.0, capacity_gb={}, seed=1)
    assert none.simulated["all"]["drop"] == 1.0
    idle = simulate_kv_cache(c, 0.0, seed=1)  # no traffic: no returns, not an error
    assert idle.returns == 0 and set(idle.simulated["all"].values()) == {0.0}
    assert sum(ample.simulated["all"][o] for o in OUTCOMES) == pytest.approx(1.0)


def test_the_longest_resting_move_down_and_off_the_bottom() -> None:
    """Short and long think times sharing an HBM tier the size of the short class's stock (the
    plan's): least recently used keeps the newest 20 GB, 5 s of arrivals of both classes, so a
    short session finds HBM only if it returns within 5 s (1 - e^-0.5 = 39% at a 10 s mean) and
    DRAM otherwise, where the plan had them all in HBM; the long ones move to DRAM, as planned;
    with no DRAM they drop."""
    short = RestingClass(0.5, 10.0, 1.0, ALL_HBM)
    long = RestingClass(0.5, 1000.0, 1.0, {"hbm": 0.0, "dram": 1.0, "nvme": 0.0, "network": 0.0, "drop": 0.0})
    plan = planned_capacity_gb((short, long), 4.0)
    assert plan["hbm"] == pytest.approx(4.0 * 0.5 * 10.0)
    assert plan["dram"] == pytest.approx(4.0 * 0.5 * 1000.0)
    r = simulate_kv_cache((short, long), 4.0, seed=2)
    assert 0.3 < r.simulated["think10s"]["hbm"] < 0.5 and r.simulated["think10s"]["drop"] < 0.05
    assert r.simulated["think1000s"]["hbm"] < 0.1 and r.difference("think10s")["hbm"] < -0.5
    assert r.simulated["think1000s"]["dram"] > 0.9 and r.planned["think1000s"]["dram"] == 1.0
    no_dram = simulate_kv_cache((short, long), 4.0, capacity_gb={"hbm": plan["hbm"]}, seed=2)
    assert no_dram.simulated["think1000s"]["drop"] > 0.8
    assert r.difference("think1000s")["dram"] == pytest.approx(r.simulated["think1000s"]["dram"] - 1.0)


def test_evicting_the_longest_think_time_first_keeps_the_short_ones_in_hbm() -> None:
    """What the plan knows and LRU does not: whose turn comes back last. Evicting the long class
    first keeps twice as many short sessions in HBM as LRU does (the rest of the plan's 100% is
    the stock's swings above its mean, which a tier of the mean's size cannot hold)."""
    short = RestingClass(0.5, 10.0, 1.0, ALL_HBM)
    long = RestingClass(0.5, 1000.0, 1.0, {"hbm": 0.0, "dram": 1.0, "nvme": 0.0, "network": 0.0, "drop": 0.0})
    lru = simulate_kv_cache((short, long), 4.0, seed=2)
    think = simulate_kv_cache((short, long), 4.0, eviction="think", seed=2)
    assert think.eviction == "think" and think.simulated["think10s"]["hbm"] > 0.75
    assert think.simulated["think10s"]["hbm"] > 1.5 * lru.simulated["think10s"]["hbm"]
    assert think.simulated["think1000s"]["dram"] > 0.9
    with pytest.raises(ValueError, match="eviction must be one of lru, think"):
        simulate_kv_cache((short,), 4.0, eviction="fifo")


def test_heavy_traffic_runs_scaled_down_with_the_same_shares() -> None:
    """Rate and tier capacities divided alike leave the shares where they were (they depend on
    capacity / (rate x GB)); a tier too small to hold MIN_ENTRIES sessions' KV scaled down is not.
    Here the HBM tier holds 2,000 sessions, the newest 50 s of arrivals and more as returning ones
    leave room, so a short session (100 s mean) finds it a little more often than 1 - e^-0.5."""
    short = RestingClass(0.5, 100.0, 1.0, ALL_HBM)
    long = RestingClass(0.5, 1000.0, 1.0, {"hbm": 0.0, "dram": 1.0, "nvme": 0.0, "network": 0.0, "drop": 0.0})
    both = (short, long)
    full = simulate_kv_cache(both, 40.0, horizon_dwells=3.0, seed=3)
    scaled = simulate_kv_cache(both, 40.0, horizon_dwells=3.0, seed=3, max_sessions=20_000)
    assert full.returns > 5 * scaled.returns and scaled.capacity_gb == full.capacity_gb
    for cls, tier in (("think100s", "hbm"), ("think100s", "dram"), ("think1000s", "dram")):
        assert scaled.simulated[cls][tier] == pytest.approx(full.simulated[cls][tier], abs=0.02)
    assert 0.39 < full.simulated["think100s"]["hbm"] < 0.5
    small = {"hbm": MIN_ENTRIES * 1.0, "dram": 1e6}  # MIN_ENTRIES sessions of 1 GB: no room to scale
    kept = simulate_kv_cache(both, 40.0, capacity_gb=small, horizon_dwells=3.0, max_sessions=1_000)
    assert kept.returns == simulate_kv_cache(both, 40.0, capacity_gb=small, horizon_dwells=3.0).returns
    no_kv = RestingClass(0.5, 100.0, 0.0, ALL_HBM)  # sessions with nothing cached: any factor will do
    assert simulate_kv_cache((no_kv,), 1000.0, horizon_dwells=3.0, max_sessions=10_000).returns < 20_000


SIMULATE = ("simulate", "--hardware", "b200", "--rate", "8", "--isl", "2000", "--osl", "400",
            "--returning-share", "0.5", "--prefix", "8000", "--suffix", "200", "--think", "0.7:30,0.3:600",
            "--ttft", "2", "--tpot", "0.05", "--horizon", "900")  # fmt: skip


def test_simulate_checks_the_plan_against_the_live_cache(cli: Cli) -> None:
    proc = cli(*SIMULATE, "--json")
    assert proc.code == 0, proc.err
    kv = json.loads(proc.out)["kv_cache"]
    assert kv["returns"] > 1000 and set(kv["simulated"]) == set(OUTCOMES)
    assert sum(kv["simulated"].values()) == pytest.approx(1.0)
    assert sum(kv["planned"].values()) == pytest.approx(1.0)
    for o in OUTCOMES:
        assert kv["difference"][o] == pytest.approx(kv["simulated"][o] - kv["planned"][o])
    assert "KV cache (least recently used over the plan's tier capacities" in cli(*SIMULATE).out
    think = cli(*SIMULATE, "--kv-eviction", "think", "--json")
    assert json.loads(think.out)["kv_cache"]["eviction"] == "think"


def test_a_study_report_checks_its_best_design_as_a_live_cache(tiny_cli_run: object, tmp_path: Path) -> None:
    """The report runs the best design's planned resting KV through the LRU cache and shows both."""
    text = (tmp_path / "tiny-study" / "report" / "report.md").read_text()
    section = text.split("### KV placement as a live cache", 1)[1].split("###", 1)[0]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| ")]
    rows = [r for r in rows if not r[0].strip().startswith("---")]
    assert [r[0].strip() for r in rows[1:]] == ["hbm", "dram", "nvme", "network", "drop"]
    planned = [float(r[1].strip(" %")) for r in rows[1:]]
    live = [float(r[2].strip(" %")) for r in rows[1:]]
    diff = [float(r[3]) for r in rows[1:]]
    assert sum(planned) == pytest.approx(100.0, abs=0.3) and sum(live) == pytest.approx(100.0, abs=0.3)
    assert diff == pytest.approx([b - a for a, b in zip(planned, live, strict=True)], abs=0.11)


def _reference(
    classes: tuple[RestingClass, ...], rate: float, cap: dict[str, float], eviction: str, seed: int
) -> np.ndarray:
    """The cache as the module describes it, event by event from a heap, each think time drawn
    when its rest begins: per class, the count of each outcome of the returns after the warm-up."""
    import heapq
    from collections import deque

    rng = np.random.default_rng(seed)
    horizon = 6.0 * max(c.dwell_s for c in classes)
    events: list[tuple[float, int, int]] = []
    of: list[int] = []
    for i, c in enumerate(classes):
        r = rate * c.share_of_arrivals
        starts = np.cumsum(rng.exponential(1.0 / r, size=int(r * horizon * 1.2) + 10))
        for s in starts[starts < horizon]:
            of.append(i)
            events.append((float(s), 0, len(of) - 1))
    heapq.heapify(events)
    tiers = [t for t in TIER_NAMES if cap.get(t, 0.0) > 0]
    groups = sorted(range(len(classes)), key=lambda i: -classes[i].dwell_s) if eviction == "think" else [0]
    queue: dict[tuple[str, int], deque[int]] = {(t, g): deque() for t in tiers for g in groups}
    used = dict.fromkeys(tiers, 0.0)
    where: dict[int, str] = {}

    def insert(level: int, sid: int) -> None:
        if level == len(tiers):
            where[sid] = "drop"
            return
        t = tiers[level]
        queue[t, of[sid] if eviction == "think" else 0].append(sid)
        where[sid], used[t] = t, used[t] + classes[of[sid]].gb
        while used[t] > cap[t] + 1e-9:
            old = None
            for g in groups:
                q = queue[t, g]
                while q and where.get(q[0]) != t:
                    q.popleft()
                if q:
                    old = q.popleft()
                    break
            if old is None:
                break
            used[t] -= classes[of[old]].gb
            insert(level + 1, old)

    counts = np.zeros((len(classes), len(OUTCOMES)), dtype=int)
    while events:
        t, kind, sid = heapq.heappop(events)
        if kind == 0:
            insert(0, sid)
            heapq.heappush(events, (t + float(rng.exponential(classes[of[sid]].dwell_s)), 1, sid))
            continue
        tier = where.pop(sid)
        if tier != "drop":
            used[tier] -= classes[of[sid]].gb
        if t >= horizon / 3.0:
            counts[of[sid], OUTCOMES.index(tier)] += 1
    return counts


def test_the_cache_is_the_event_by_event_one() -> None:
    """Think times drawn up front in the order the rests begin, the events sorted once, the
    compiled replay taking each tier's evictions tier by tier: the same outcome of every return as
    a heap taking them one by one, drawing each think time then and moving each eviction down at
    once, over random classes, capacities (two to four tiers) and both evictions."""
    rng = np.random.default_rng(3)
    for case in range(24):
        classes = tuple(
            RestingClass(
                share_of_arrivals=float(rng.uniform(0.1, 0.5)),
                dwell_s=float(rng.choice([5.0, 30.0, 120.0])),
                gb=float(rng.uniform(0.2, 4.0)),
                tiers={"hbm": 0.5, "dram": 0.3},
            )
            for _ in range(int(rng.integers(1, 4)))
        )
        cap = {"hbm": float(rng.uniform(1.0, 40.0)), "dram": float(rng.uniform(0.0, 40.0))}
        if case >= 12:  # three and four tiers: evictions going down two or three tiers in one rest
            cap |= {
                "nvme": float(rng.uniform(0.0, 20.0)),
                "network": float(rng.uniform(0.0, 20.0) * (case % 3)),
            }
        eviction = ("lru", "think")[case % 2]
        rep = simulate_kv_cache(classes, 3.0, capacity_gb=cap, eviction=eviction, seed=case)
        want = _reference(classes, 3.0, cap, eviction, case)
        assert rep.returns == want.sum() > 0
        for i, name in enumerate(class_names(classes)):
            got = np.array([rep.simulated[name][o] for o in OUTCOMES])
            np.testing.assert_allclose(got, want[i] / max(want[i].sum(), 1), rtol=0, atol=1e-15)


@pytest.mark.parametrize(
    ("model", "shape", "split"),
    [
        ("deepseek-v3", "8gpu-tp8-ep8", 1),  # MLA: every GPU of the TP group holds the latent KV whole
        ("deepseek-v3", "8gpu-dpa-ep8", 1),  # a session on one attention-DP rank: one GPU's link
        ("qwen3-235b-a22b", "8gpu-tp8-ep8", 4),  # 4 KV heads over 8 GPUs: 4 shares, each twice
    ],
)
def test_a_session_reloads_over_the_links_of_the_gpus_that_split_its_kv(
    catalog: Catalog, model: str, shape: str, split: int
) -> None:
    """A resting session's KV comes back over the host links of the GPUs that split it, each
    reading its share: a GPU holding a copy reads all of it, as the engines keep a host tier per
    rank. The reload had been spread over all of an instance's GPUs (8x too fast for MLA)."""
    from dse.perf.params import load_params
    from dse.placement import PlacementRequest
    from dse.placement.request import UnitOptions
    from dse.placement.shapes import Shapes
    from dse.workload import Slo, ThinkBin, Workload

    w = Workload(10.0, 2000.0, 500.0, returning_share=0.5, cached_prefix_tokens=20000.0,
                 suffix_tokens=500.0, think=(ThinkBin(1.0, 60.0),))  # fmt: skip
    opts = UnitOptions(prefill_shapes=(shape,), decode_shapes=(shape,))
    req = PlacementRequest(model, ("b200",), w, Slo(2.0, 0.1, 90.0), options=opts)
    hw = catalog.hardware("b200")
    s = Shapes(req, catalog.model(model), [hw], load_params())
    i = [p.label() for p in s.par].index(shape)
    link = hw.host.link_gb_per_s_per_dir
    assert s.reload_s(i, "dram") == pytest.approx(s.resting_gb / (link * split), rel=1e-9)
