"""DeepSeek fleet check: does the model reproduce the ~227 nodes of published_points.csv A3?

A1-A3 (P-DS): 608B input tokens/day of which 56.3% hit the on-disk KV cache, 168B output
tokens/day, prefill units EP32 (4 H800 nodes), decode units EP144 (18 nodes), 20-22 tok/s per user
(TPOT about 45-50 ms), average KV length 4989 per output token, MTP with one draft token at the
85-90% acceptance the same source reports. Prompt length per prefill forward: 4096 new tokens, as in
the A4 profile, at 16384 tokens per GPU.
"""

from __future__ import annotations

import numpy as np

from dse.catalog import Catalog, load_catalog
from dse.perf.params import PerfParams, load_params
from dse.perf.pool import build_pool
from dse.perf.serving import decode_capacity_at_tpot, prefill_capacity
from dse.units import Precision

PUBLISHED_NODES = 226.75
INPUT_PER_DAY, OUTPUT_PER_DAY, HIT = 608e9, 168e9, 0.563
TPOT_S = 1.0 / 21.0
ACCEPT = 1.0 + 0.875  # one draft token accepted 85-90% of the time


def fleet_nodes(catalog: Catalog, params: PerfParams) -> dict[str, float]:
    model = catalog.model("deepseek-v3")
    h800 = [catalog.hardware("h800")]
    fp8 = [Precision.FP8]
    speed = np.array([params.engine("sglang").speed])
    pf = build_pool(model, h800, gpus=[32], attn_tp=[1], ep=[32], weight_precision=fp8, kv_precision=fp8)
    pf_rate = prefill_capacity(
        pf, params, isl=np.array([4096.0]), batch_tokens=np.array([16384.0 * 32]), speed=speed
    )[0]
    dec = build_pool(model, h800, gpus=[144], attn_tp=[1], ep=[144], weight_precision=fp8, kv_precision=fp8)
    dec_rate, batch = decode_capacity_at_tpot(
        dec,
        params,
        context=np.array([4989.0]),
        tpot_s=np.array([TPOT_S]),
        speed=speed,
        draft_tokens=np.array([1.0]),
        accept_tokens=np.array([ACCEPT]),
    )
    input_rate = INPUT_PER_DAY * (1.0 - HIT) / 86400.0
    output_rate = OUTPUT_PER_DAY / 86400.0
    pf_per_node = pf_rate / 4.0
    dec_per_node = dec_rate[0] / 18.0
    nodes = input_rate / pf_per_node + output_rate / dec_per_node
    return {
        "prefill_tok_s_per_node_uncached": pf_per_node,
        "decode_tok_s_per_node": dec_per_node,
        "decode_batch_per_gpu": batch[0] / 144.0,
        "prefill_nodes": input_rate / pf_per_node,
        "decode_nodes": output_rate / dec_per_node,
        "nodes": nodes,
        "published_nodes": PUBLISHED_NODES,
        "error": nodes / PUBLISHED_NODES - 1.0,
    }


def main() -> None:
    r = fleet_nodes(load_catalog(), load_params())
    print("DeepSeek fleet check (published_points.csv A1-A3)")
    print(
        f"  prefill per node (uncached tokens/s): {r['prefill_tok_s_per_node_uncached']:,.0f} "
        f"(published about 32,200)"
    )
    print(
        f"  decode per node (tokens/s):           {r['decode_tok_s_per_node']:,.0f} "
        f"(published 14,800) at {r['decode_batch_per_gpu']:.0f} sequences per GPU"
    )
    print(
        f"  nodes: {r['prefill_nodes']:.1f} prefill + {r['decode_nodes']:.1f} decode = "
        f"{r['nodes']:.1f} against {r['published_nodes']} published ({r['error']:+.1%})"
    )


if __name__ == "__main__":
    main()
