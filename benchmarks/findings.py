"""The figures behind FINDINGS.md, read from the shipped studies' Parquet exports.

Run the studies first (``dse study run NAME --out runs``), then ``python benchmarks/findings.py``.
Prints figures, not verdicts; FINDINGS.md states the verdicts with these numbers.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import polars as pl

from dse.errors import DseError
from dse.study.results import speed_front as front

RUNS = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("runs")


def trials(study: str) -> pl.DataFrame:
    return pl.read_parquet(RUNS / study / "exports" / "trials" / f"study={study}" / "part-0.parquet")


def table(study: str, name: str) -> pl.DataFrame:
    return pl.read_parquet(RUNS / study / "exports" / name / f"study={study}" / "part-0.parquet")


def kimi() -> None:
    study = "kimi-k3-blackwell"
    t = trials(study).filter(pl.col("feasible"))
    print(f"[{study}] {t.height} feasible trials")
    x, y = "tokens_per_s_per_user", "tokens_per_s_per_gpu"
    overall = front(t, x, y)
    for hw in sorted(t["p_decode_hardware"].unique().to_list()):
        f = front(t.filter(pl.col("p_decode_hardware") == hw), x, y)
        pts = ", ".join(f"{u:.0f}->{g:.0f}" for u, g in zip(f[x].to_list(), f[y].to_list(), strict=True))
        print(f"  decode on {hw}: front (tok/s/user -> tok/s/GPU): {pts}")
    single = t.filter(pl.col("p_prefill_hardware") == pl.col("p_decode_hardware"))
    for label, rows in (("by decode hardware", t), ("single-hardware designs only", single)):
        for speed in (20.0, 30.0, 40.0, 45.0):
            best = {}
            for hw in sorted(t["p_decode_hardware"].unique().to_list()):
                sub = rows.filter((pl.col("p_decode_hardware") == hw) & (pl.col(x) >= speed))
                best[hw] = sub[y].max() if sub.height else None
            shown = ", ".join(f"{k} {v:.0f}" if v is not None else f"{k} none" for k, v in best.items())
            print(f"  {label}: best tok/s/GPU at >= {speed:.0f} tok/s/user: {shown}")
        fastest = rows.group_by("p_decode_hardware").agg(pl.col(x).max()).sort("p_decode_hardware")
        print(f"  {label}: fastest design per hardware (tok/s/user): {fastest.to_dicts()}")
    hbm = overall["hbm_peak_gb_per_gpu"].to_numpy()
    print(
        f"  Pareto front: {overall.height} designs; peak HBM GB/GPU median {np.median(hbm):.1f}, "
        f"max {hbm.max():.1f}; below 80 GB: {int((hbm < 80).sum())} of {len(hbm)}"
    )
    allh = t["hbm_peak_gb_per_gpu"].to_numpy()
    print(
        f"  all feasible: below 80 GB: {int((allh < 80).sum())} of {len(allh)}; median {np.median(allh):.1f}"
    )
    pl_ = table(study, "placements").join(overall.select("trial"), on="trial")
    by_role = pl_.group_by("role").agg(
        pl.col("hbm_gb_per_gpu").median().alias("median"),
        pl.col("hbm_gb_per_gpu").max().alias("max"),
        pl.col("weights_gb_per_gpu").median().alias("weights_median"),
    )
    print("  front pools, HBM GB/GPU by role:", by_role.sort("role").to_dicts())
    topo = overall.group_by("p_topology").len().to_dicts()
    print("  front topologies:", topo)


def agentic() -> None:
    study = "agentic-kv-tiering"
    every = trials(study)
    t = every.filter(pl.col("feasible"))
    print(f"[{study}] {t.height} feasible trials")
    tried = every.group_by("p_kv_policy").agg(pl.len().alias("trials"), pl.col("feasible").sum())
    print(f"  trials and feasible by p_kv_policy: {tried.sort('p_kv_policy').to_dicts()}")
    for col in ("p_kv_policy", "p_prefill_hardware"):
        g = (
            t.group_by(col)
            .agg(pl.col("usd_per_million_tokens").min().alias("best_usd_per_m"), pl.len().alias("trials"))
            .sort("best_usd_per_m")
        )
        print(f"  best $/M tokens by {col}: {g.to_dicts()}")
    best = t.sort("usd_per_million_tokens").head(1)
    n = int(best["trial"][0])
    kv = table(study, "kv_tiers").filter(pl.col("trial") == n)
    stored = kv.group_by("tier").agg(pl.col("stored_gb").sum() / 1e3).sort("tier")
    cols = (
        "p_topology",
        "p_kv_policy",
        "p_prefill_hardware",
        "p_decode_hardware",
        "gpus",
        "usd_per_million_tokens",
    )
    print(f"  best trial {n}: {best.select(*cols).to_dicts()}")
    print(f"  its resting KV (TB) by tier: {stored.to_dicts()}")
    shares = kv.group_by("kv_class", "tier").agg(pl.col("share").sum()).filter(pl.col("share") > 0.001)
    print(f"  its tier shares per class: {shares.sort('kv_class', 'tier').to_dicts()}")


def deepseek_production() -> None:
    study = "deepseek-production"
    t = trials(study).filter(pl.col("feasible")).sort("gpus")
    best = int(t["trial"][0])
    pools = table(study, "placements").filter(pl.col("trial") == best)
    print(
        f"[{study}] {t.height} feasible trials; fewest GPUs {t['gpus'][0]:.0f} "
        f"({t['gpus'][0] / 8:.1f} nodes, {t['gpus'][0] / 8 / 226.75 - 1:+.1%} against the published 226.75) "
        f"in trial {best}, TTFT mean {t['ttft_mean_s'][0]:.2f} s and p50 {t['ttft_pct_s'][0]:.2f} s, "
        f"TPOT {1e3 * t['tpot_mean_s'][0]:.1f} ms"
    )
    for p in pools.iter_rows(named=True):
        batch = p["decode_batch_sequences"]  # null on a prefill pool
        print(
            f"  {p['role']}: {p['instances']} x {p['shape']} = {p['gpus']} GPUs, "
            f"decode batch {'-' if batch is None else f'{batch:.0f}'}"
        )


def shadow_prices() -> None:
    """+10% HBM bandwidth against +10% HBM capacity for the best design of each study."""
    from dse.catalog import load_catalog
    from dse.study import Study
    from dse.study.best import best_design

    catalog = load_catalog()
    for study in ("deepseek-v3-blackwell", "agentic-kv-tiering", "kimi-k3-blackwell"):
        best = best_design(Study.load(study).results(out=RUNS))
        if best is None:
            print(f"[{study}] no feasible design")
            continue
        for hw in sorted({p["hardware"] for p in best.shadow_prices}):
            h = catalog.hardware(hw)
            price = {p["resource"]: p["usd_per_hour"] for p in best.shadow_prices if p["hardware"] == hw}
            # a what-if scales what the engine sizes with; capacity is priced per GB of 10^9 bytes
            bw, cap = 0.1 * h.hbm.bandwidth_tb_per_s, 0.1 * h.hbm.usable_gib * 2**30 / 1e9
            print(
                f"[{study}] {hw}: +10% bandwidth ({bw:.2g} TB/s x ${price['hbm_bandwidth']:.3g}) = "
                f"${bw * price['hbm_bandwidth']:.2f}/h; +10% capacity ({cap:.3g} GB x "
                f"${price['hbm_capacity']:.3g}) = ${cap * price['hbm_capacity']:.2f}/h"
            )


def bandwidth_vs_capacity() -> None:
    """Each what-if H200/B200 against its base at the same point."""
    from dse.study.report_grid import whatif_frame
    from dse.study.spec import load_study

    study = "bandwidth-vs-capacity"
    wf = whatif_frame(load_study(study), trials(study))
    print(f"[{study}] {wf.height} variant-point pairs")
    for v, g in sorted(wf.group_by("variant"), key=lambda kv: str(kv[0][0])):
        ch = g["change_pct"].to_numpy()
        print(
            f"  {v[0]}: better at {(ch < -0.05).sum()} of {ch.size}; median {np.median(ch):+.1f}%, "
            f"min {ch.min():+.1f}%"
        )
    for v in ("h200-cap150", "b200-cap150"):
        won = wf.filter((pl.col("variant") == v) & (pl.col("change_pct") < -0.05))
        print(
            f"  {v} helps at: {won.select('x_model', 'x_input_tokens', 'x_tpot_s', 'change_pct').to_dicts()}"
        )
    t = trials(study)
    axes = ["x_model", "x_input_tokens", "x_tpot_s"]
    for base in ("h200-sxm", "b200"):
        short = base.split("-")[0]

        def cost(hw: str) -> pl.DataFrame:
            return t.filter(pl.col("x_hardware") == hw).select(
                *axes, pl.col("usd_per_million_tokens").alias(hw)
            )

        j = cost(f"{short}-bw150").join(cost(f"{short}-cap150"), on=axes)
        bw, cap = j[f"{short}-bw150"], j[f"{short}-cap150"]
        print(
            f"  {short} head to head: bandwidth variant cheaper at {(bw < cap * (1 - 1e-9)).sum()}, "
            f"capacity variant at {(cap < bw * (1 - 1e-9)).sum()} of {j.height}; "
            f"capacity wins at {j.filter(cap < bw * (1 - 1e-9)).select(*axes).to_dicts()}"
        )
    for col in ("x_input_tokens", "x_tpot_s", "x_model"):
        by = (
            wf.filter(pl.col("variant").str.contains("bw150"))
            .group_by(col)
            .agg(pl.col("change_pct").median().alias("bw_median_pct"))
            .sort(col)
        )
        print(f"  bandwidth variant by {col}: {by.to_dicts()}")


def bandwidth_by_tpot(tie: float = 0.14) -> None:
    """The +50% bandwidth and +50% capacity variants head to head, by TPOT range: which is
    cheaper, and which by more than the model's error (``tie``)."""
    study = "bandwidth-vs-capacity"
    t = trials(study).filter(pl.col("feasible"))
    axes = ["x_model", "x_input_tokens", "x_tpot_s"]
    for lo, hi in ((0.025, 0.05), (0.1, 0.4)):
        won = {
            "bandwidth": 0,
            "capacity": 0,
            "equal": 0,
            "bandwidth beyond the error": 0,
            "capacity beyond the error": 0,
        }
        n = 0
        for short in ("h200", "b200"):

            def cost(hw: str) -> pl.DataFrame:
                return t.filter(pl.col("x_hardware") == hw).select(
                    *axes, pl.col("usd_per_million_tokens").alias(hw)
                )

            j = cost(f"{short}-bw150").join(cost(f"{short}-cap150"), on=axes)
            j = j.filter(pl.col("x_tpot_s").is_between(lo, hi))
            bw, cap = j[f"{short}-bw150"].to_numpy(), j[f"{short}-cap150"].to_numpy()
            n += j.height
            won["bandwidth"] += int((bw < cap * (1 - 1e-9)).sum())
            won["capacity"] += int((cap < bw * (1 - 1e-9)).sum())
            won["equal"] += int((np.abs(bw - cap) <= 1e-9 * cap).sum())
            won["bandwidth beyond the error"] += int((bw * (1 + tie) < cap).sum())
            won["capacity beyond the error"] += int((cap * (1 + tie) < bw).sum())
        print(f"  TPOT {lo * 1e3:g}-{hi * 1e3:g} ms, {n} point pairs (H200 and B200): {won}")


def hbm_residency(line: float = 80.0) -> None:
    """Peak HBM residency per GPU against ``line`` GB over every study's feasible designs: several
    traffic levels, models and instance shapes. Whole designs (their fullest pool) and decode
    pools (decode, aggregated and attention pools) apart; a grid's base hardware only (its
    what-if variants are not hardware one can buy)."""
    from dse.study.spec import load_study

    for study in ("kimi-k3-blackwell", "deepseek-v3-blackwell", "agentic-kv-tiering", "bandwidth-vs-capacity",
                  "stage-memory-2027", "deepseek-production"):  # fmt: skip
        try:
            t = trials(study).filter(pl.col("feasible"))
            pools = table(study, "placements")
        except FileNotFoundError:
            print(f"  {study}: run the study first")
            continue
        spec = load_study(study)
        if "x_hardware" in t.columns:
            variants = {v.id for v in spec.variants}
            t = t.filter(~pl.col("x_hardware").is_in(list(variants)))
        design = t["hbm_peak_gb_per_gpu"].to_numpy()
        dec = pools.join(t.select("trial"), on="trial").filter(
            pl.col("role").is_in(["decode", "mixed", "attention"])
        )
        d = dec["hbm_gb_per_gpu"].to_numpy()
        rates = (
            sorted({float(r) for r in t["x_requests_per_s"].to_list()})
            if "x_requests_per_s" in t.columns
            else []
        )
        rate = rates or [spec.workload.requests_per_s]
        shapes = sorted(set(dec["shape"].to_list())) if "shape" in dec.columns else []
        print(
            f"  {study} ({spec.model if not rates else 'grid'}, {', '.join(f'{r:g}' for r in rate)} req/s): "
            f"designs below {line:g} GB {int((design < line).sum())} of {design.size} "
            f"(median {np.median(design):.1f}); decode pools below {int((d < line).sum())} of {d.size} "
            f"(median {np.median(d) if d.size else float('nan'):.1f}); decode shapes {len(shapes)}"
        )


def stage_memory() -> None:
    """Per-GPU HBM per stage: in all, and the working set without resting KV."""
    from dse.study.report_grid import stage_memory_frame
    from dse.study.spec import load_study

    study = "stage-memory-2027"
    sm = stage_memory_frame(load_study(study), trials(study), table(study, "placements"))
    print(f"[{study}] {sm.height} stage pools")
    for hw, g in sorted(sm.group_by("x_hardware"), key=lambda kv: str(kv[0][0])):
        print(
            f"  {hw[0]}: max total {g['hbm_gb_per_gpu'].max():.0f} GB, max working set "
            f"{g['working_gb_per_gpu'].max():.0f} GB, pools >= 400 GB total "
            f"{(g['hbm_gb_per_gpu'] >= 400).sum()} / working "
            f"{(g['working_gb_per_gpu'] >= 400).sum()} of {g.height}"
        )
    big = sm.filter(pl.col("working_gb_per_gpu") >= 400).select(
        "x_model",
        "x_hardware",
        "x_cached_prefix_tokens",
        "x_tpot_s",
        "x_kv_policy",
        "role",
        "working_gb_per_gpu",
    )
    print(f"  working sets >= 400 GB: {big.to_dicts()}")
    by_tpot = sm.group_by("x_hardware", "x_tpot_s").agg(pl.col("working_gb_per_gpu").max().round(0))
    print(f"  largest working set by TPOT: {by_tpot.sort('x_hardware', 'x_tpot_s').to_dicts()}")
    t = trials(study)
    axes = ["x_model", "x_cached_prefix_tokens", "x_tpot_s", "x_kv_policy"]
    for base, x4 in (("gb300-nvl72", "gb300-hbm-x4"), ("vr200-nvl144", "vr200-hbm-x4")):

        def gpus(hw: str) -> pl.DataFrame:
            return t.filter(pl.col("x_hardware") == hw).select(*axes, pl.col("gpus").alias(hw))

        j = gpus(base).join(gpus(x4), on=axes).drop_nulls()
        cut = j.filter(pl.col(x4) < pl.col(base)).with_columns(
            (100 * (pl.col(x4) / pl.col(base) - 1)).round(0).alias("change_pct")
        )
        print(
            f"  {x4} against {base}: fewer GPUs at {cut.height} of {j.height} feasible pairs, "
            f"{cut.select(*axes, 'change_pct').to_dicts()}"
        )


def decode_variability() -> None:
    study = "decode-variability"
    t = trials(study)
    print(f"[{study}] {t.height} points, {int(t['feasible'].sum())} feasible (TTFT p99 <= 2 s)")
    for burst in sorted(t["x_burst_factor"].unique().to_list()):
        g = t.filter(pl.col("x_burst_factor") == burst)
        for head in sorted(g["x_headroom"].unique().to_list()):
            h = g.filter(pl.col("x_headroom") == head)
            print(
                f"  burst x{burst:g}, headroom {head:g}: feasible {int(h['feasible'].sum())}/{h.height}; "
                f"TTFT p99 median {h['ttft_p99_s'].median():.2f} s, max {h['ttft_p99_s'].max():.1f} s; "
                f"peak prefill queue max {h['queue_peak_prefill_requests'].max():.0f}, "
                f"peak decode buffer max {h['queue_peak_buffer_requests'].max():.0f}"
            )
    for head in sorted(t["x_headroom"].unique().to_list()):
        print(
            f"  headroom {head:g}: GPUs median {t.filter(pl.col('x_headroom') == head)['gpus'].median():.0f}"
        )
    for tail in sorted(t["x_output_tail"].unique().to_list()):
        print(
            f"  output tail {tail}: TTFT p99 median "
            f"{t.filter(pl.col('x_output_tail') == tail)['ttft_p99_s'].median():.2f} s"
        )
    bursts = t.filter(pl.col("x_burst_factor") > 1)
    moves = (
        bursts.group_by("x_planner", "x_planner_period_s", "x_planner_delay_s")
        .agg(
            pl.col("planner_moves").median().alias("median_moves"),
            pl.col("planner_moves").max().alias("max_moves"),
            pl.col("ttft_p99_s").median().alias("ttft_p99_median_s"),
            pl.col("feasible").sum().alias("feasible"),
            pl.len().alias("points"),
        )
        .sort("x_planner", "x_planner_period_s", "x_planner_delay_s")
    )
    for row in moves.to_dicts():
        print(f"  planner under bursts: {row}")
    for buf in sorted(t["x_buffer_requests"].unique().to_list()):
        b = t.filter((pl.col("x_buffer_requests") == buf) & (pl.col("x_burst_factor") > 1))
        print(
            f"  buffer {buf:g} under bursts: TTFT p99 median {b['ttft_p99_s'].median():.2f} s, "
            f"peak prefill queue median {b['queue_peak_prefill_requests'].median():.0f}, "
            f"peak buffer median {b['queue_peak_buffer_requests'].median():.0f}"
        )


def grid_topologies() -> None:
    """The topology each grid point records (the cheapest whose design the simulations hold)."""
    for study in ("bandwidth-vs-capacity", "stage-memory-2027"):
        t = trials(study).filter(pl.col("feasible"))
        counts = dict(t.group_by("p_topology").len().sort("p_topology").rows())
        print(f"[{study}] topology of the {t.height} feasible points: {counts}")


if __name__ == "__main__":
    for fn in (
        kimi,
        agentic,
        deepseek_production,
        shadow_prices,
        bandwidth_vs_capacity,
        bandwidth_by_tpot,
        hbm_residency,
        stage_memory,
        decode_variability,
        grid_topologies,
    ):
        try:
            fn()
        except FileNotFoundError as exc:
            print(f"{fn.__name__}: run the study first ({exc.filename})")
        except DseError as exc:
            print(f"{fn.__name__}: run the study first ({exc})")
