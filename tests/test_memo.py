"""The performance model's memo (dse.perf.memo): the same inputs give the same object, built
once; other inputs (another hardware object, another parameter set) never meet its entry; what
it shares is read-only; the caller's arrays stay the caller's; the measured tier is not memoised."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dse.catalog import Catalog
from dse.perf import pool as pool_module
from dse.perf import stages
from dse.perf.memo import Memo
from dse.perf.params import load_params
from dse.perf.pool import Pool, build_pool
from dse.perf.stages import forward_cost, pool_terms
from dse.sim.from_placement import SimDesign
from dse.units import Precision

FP8 = Precision.FP8


def _pool(catalog: Catalog, gpus: object, hw: str = "b200", engines: list[str] | None = None) -> Pool:
    return build_pool(
        catalog.model("deepseek-v3"), [catalog.hardware(hw)], gpus=gpus, attn_tp=[8], ep=[8],  # type: ignore[arg-type]
        weight_precision=[FP8], kv_precision=[FP8], engines=engines,
    )  # fmt: skip


def test_a_pool_is_built_once_per_inputs_and_its_arrays_are_read_only(catalog: Catalog) -> None:
    a = _pool(catalog, [8])
    assert _pool(catalog, np.array([8.0])) is a  # the same numbers however they come
    assert _pool(catalog, [16]) is not a and _pool(catalog, [8], hw="h200") is not a
    with pytest.raises(ValueError, match="read-only"):
        a.gpus[0] = 4.0
    mine = np.array([8.0])
    assert _pool(catalog, mine) is a and mine.flags.writeable  # the caller's array is left alone
    model, b200 = catalog.model("deepseek-v3"), catalog.hardware("b200")
    fresh = pool_module._build(model, [b200], [8.0], [8.0], [8.0], [FP8], [FP8], None, None)
    for name in ("gpus", "hbm_bytes_per_s", "expert_weight_bytes", "kv_bytes_per_token"):
        assert np.array_equal(getattr(a, name), getattr(fresh, name))  # the memo's is the builder's


def test_a_what_if_hardware_object_never_meets_another_ones_entry(catalog: Catalog) -> None:
    hw = catalog.hardware("b200")
    faster = replace(hw, hbm=replace(hw.hbm, bandwidth_tb_per_s=2 * hw.hbm.bandwidth_tb_per_s))
    model = catalog.model("deepseek-v3")
    args = {"gpus": [8], "attn_tp": [8], "ep": [8], "weight_precision": [FP8], "kv_precision": [FP8]}
    base, what_if = build_pool(model, [hw], **args), build_pool(model, [faster], **args)  # type: ignore[arg-type]
    assert what_if.hbm_bytes_per_s[0] == 2 * base.hbm_bytes_per_s[0]


def test_the_measured_tier_builds_its_pools_each_time(catalog: Catalog) -> None:
    one, two = (_pool(catalog, [8], hw="h200", engines=["sglang"]) for _ in range(2))
    assert one is not two


def test_pool_terms_are_computed_once_per_pool_and_parameter_set(catalog: Catalog) -> None:
    p = load_params()
    pool = _pool(catalog, [8])
    terms = pool_terms(pool, p)
    assert pool_terms(pool, p) is terms
    other = replace(p, hbm_eff=p.hbm_eff * 0.5)
    assert pool_terms(pool, other) is not terms
    assert pool_terms(pool, other).hbm[0] == pytest.approx(0.5 * terms.hbm[0])
    kwargs = {"tokens": np.array([64.0]), "sequences": np.array([64.0]), "context": np.array([2048.0]),
              "prefill": False, "speed": np.array([1.0])}  # fmt: skip
    changed = replace(pool, ep=np.array([4.0]))  # not the memo's: its terms are made each time
    assert pool_terms(changed, p) is not pool_terms(changed, p)
    fresh = stages._pool_terms(pool, p)  # the builder itself, not memoised
    assert forward_cost(terms, p, **kwargs).total_s[0] == forward_cost(fresh, p, **kwargs).total_s[0]


def test_a_full_memo_starts_afresh() -> None:
    memo = Memo(max_entries=3)
    made = [memo.get(i, None, lambda i=i: i * 10) for i in range(3)]
    assert made == [0, 10, 20] and len(memo) == 3
    assert memo.get(1, None, lambda: -1) == 10  # a hit: not made again
    assert memo.get(7, None, lambda: 70) == 70 and len(memo) == 1


def test_a_pool_of_alike_candidates_is_keyed_by_the_first_and_the_count(catalog: Catalog) -> None:
    model, b200, h200 = catalog.model("deepseek-v3"), catalog.hardware("b200"), catalog.hardware("h200")

    def pool(hardware: list[object], gpus: list[float]) -> Pool:
        n = len(hardware)
        return build_pool(model, hardware, gpus=gpus, attn_tp=[8.0] * n, ep=[8.0] * n,  # type: ignore[arg-type]
                          weight_precision=[FP8] * n, kv_precision=[FP8] * n)  # fmt: skip

    alike = pool([b200] * 257, [8.0] * 257)
    assert pool([b200] * 257, [8.0] * 257) is alike and len(alike.gpus) == 257
    assert pool([b200] * 256, [8.0] * 256) is not alike  # another count
    mixed = pool([b200] * 128 + [h200], [8.0] * 129)
    assert pool([b200] * 128 + [h200], [8.0] * 129) is mixed and mixed.hbm_bytes[-1] != mixed.hbm_bytes[0]
    assert pool([b200] * 129, [8.0] * 128 + [16.0]).gpus[-1] == 16.0  # one candidate differs: not alike


@pytest.fixture(scope="module")
def design(catalog: Catalog) -> SimDesign:
    """DeepSeek-V3 on B200 at 10 requests/s, disaggregated: the placed design the memo tests check."""
    from dse.evaluation import design_of
    from dse.placement import PlacementRequest, Topology, place
    from dse.workload import Slo, Workload

    req = PlacementRequest(
        "deepseek-v3", ("b200",), Workload(10.0, 2000.0, 500.0), Slo(1.0, 0.05, 90.0), Topology.DISAGGREGATED
    )
    best = place(req, catalog=catalog, params=load_params(), with_shadow_prices=False).best
    assert best is not None
    return design_of(req, best)


def test_an_engine_level_simulation_runs_once_for_the_same_inputs(
    catalog: Catalog, design: SimDesign
) -> None:
    """A placed design checked twice runs its simulation once and answers the same to the bit;
    the same design at another traffic (other tables, another window) runs its own."""
    from dse.sim import engine_latency

    params = load_params()
    engine_latency._RUNS.clear()
    first = engine_latency.design_latency(design, catalog, params)
    held = len(engine_latency._RUNS)
    again = engine_latency.design_latency(design, catalog, params)
    assert first is not None and again is not None and held >= 1 and len(engine_latency._RUNS) == held
    for a, b in ((first.ttft_s, again.ttft_s), (first.tpot_s, again.tpot_s), (first.e2el_s, again.e2el_s)):
        np.testing.assert_array_equal(a, b)
    more = replace(design, workload=replace(design.workload, requests_per_s=12.0))
    assert engine_latency.design_latency(more, catalog, params) is not None
    assert len(engine_latency._RUNS) > held


def test_a_design_met_again_builds_nothing(
    catalog: Catalog, design: SimDesign, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same design (its resting KV classes aside, which the engine-level simulation does not
    read) is answered from the design memo: no tables are built again, and the answer is the same
    object; another traffic builds its own."""
    from dse.sim import engine_latency

    params = load_params()
    built = []
    real = engine_latency.tables_of
    monkeypatch.setattr(engine_latency, "tables_of", lambda *a: built.append(1) or real(*a))
    engine_latency._DESIGNS.clear()
    first = engine_latency.design_latency(design, catalog, params)
    assert first is not None and len(built) == 1
    assert engine_latency.design_latency(replace(design, resting=()), catalog, params) is first
    assert len(built) == 1
    more = replace(design, workload=replace(design.workload, requests_per_s=12.0))
    assert engine_latency.design_latency(more, catalog, params) is not first and len(built) == 2
    with pytest.raises(ValueError):  # shared: read-only
        first.ttft_s[0] = 0.0


def test_a_design_met_again_reuses_its_pipeline(
    catalog: Catalog, design: SimDesign, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fluid simulation's pipeline of a design met before is the one built then (read-only,
    since it is shared); another buffer or traffic builds its own."""
    from dse.sim import from_placement

    params = load_params()
    built = []
    real = from_placement._pipeline
    monkeypatch.setattr(from_placement, "_pipeline", lambda *a: built.append(1) or real(*a))
    from_placement._PIPELINES.clear()
    pipe, kv_gb = from_placement.pipeline_of(design, catalog, params)
    again = from_placement.pipeline_of(replace(design, resting=()), catalog, params)
    assert again[0] is pipe and again[1] == kv_gb and len(built) == 1
    with pytest.raises(ValueError):
        pipe.prefill_s[0] = 0.0
    assert from_placement.pipeline_of(design, catalog, params, buffer_max=10.0)[0] is not pipe
    more = replace(design, workload=replace(design.workload, requests_per_s=12.0))
    from_placement.pipeline_of(more, catalog, params)
    assert len(built) == 3


def test_a_key_that_cannot_be_hashed_is_made_not_kept() -> None:
    """A design built through the API with a list where a tuple is typed cannot be a key: it is
    made each time (not a TypeError, which pipeline_of would report as a malformed placement)."""
    memo: Memo = Memo()
    made = []
    assert memo.get(("a", [1, 2]), None, lambda: made.append(1) or 5) == 5
    assert memo.get(("a", [1, 2]), None, lambda: made.append(1) or 5) == 5
    assert len(made) == 2 and len(memo) == 0
