"""Stage-level measurements from ``published_points.csv`` as structured calibration targets.

Each entry reads its measured value from the CSV by row id; the structure (pool size, lengths,
batch, precisions) is transcribed from that row's ``parallelism``/``batch`` text and cited by id.
Rows whose batch or structure the source leaves open (B4c, B6a/b, G1, F1) are not used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dse.catalog import Catalog
from dse.errors import InputError
from dse.perf.params import POINTS_ENGINE, PerfParams
from dse.perf.pool import build_pool
from dse.perf.stages import forward_cost
from dse.typed_data import measured_number, read_csv
from dse.units import Precision


@dataclass(frozen=True)
class StagePoint:
    id: str
    stage: str  # "prefill" or "decode"
    hardware: str
    gpus: int
    context: float  # prompt length (prefill) or KV length (decode)
    batch_per_gpu: float  # tokens per GPU per forward (prefill) or sequences per GPU (decode)
    expert_precision: Precision
    kv_precision: Precision


POINTS_MODEL = "deepseek-v3"  # every stage point is DeepSeek-V3 (R1) serving
POINTS = (
    StagePoint("A4", "prefill", "h800", 32, 4096, 16384, Precision.FP8, Precision.BF16),
    StagePoint("B1a", "prefill", "h100-sxm", 32, 1024, 16384, Precision.FP8, Precision.BF16),
    StagePoint("B1b", "prefill", "h100-sxm", 32, 2048, 16384, Precision.FP8, Precision.BF16),
    StagePoint("B1c", "prefill", "h100-sxm", 32, 4096, 16384, Precision.FP8, Precision.BF16),
    StagePoint("A5", "decode", "h800", 128, 4096, 128, Precision.FP8, Precision.BF16),
    StagePoint("B2", "decode", "h100-sxm", 72, 2000, 256, Precision.FP8, Precision.BF16),
    StagePoint("B4a", "decode", "gb200-nvl72", 48, 2000, 1408, Precision.FP4, Precision.FP8),
)


def measured_per_gpu(path: Path) -> dict[str, float]:
    """Measured tokens/s per GPU of each point (per-node figures divided by 8)."""
    header, rows, lines = read_csv(path, "--points")
    missing = [c for c in ("id", "metric", "value") if c not in header]
    if missing:
        raise InputError(str(path), missing[0], "is a required column")
    out = {}
    structure = {p.id: p for p in POINTS}
    for row, line in zip(rows, lines, strict=True):
        v = measured_number(row["value"], f"{path.name} line {line}", "value")
        out[row["id"]] = v / 8.0 if (row["metric"] or "").endswith("per_node") else v
        if row["id"] in structure:
            _same_setup(structure[row["id"]], row, f"{path.name} line {line}")
    absent = [p.id for p in POINTS if p.id not in out]
    if absent:
        raise InputError(str(path), "id", "must list every stage point the fit prices", absent[0])
    return {p.id: out[p.id] for p in POINTS}


def _same_setup(point: StagePoint, row: dict[str, str], where: str) -> None:
    """A row that measures another setup than the one the fit prices its id as (the published
    one: model, GPU, GPUs, prompt or KV length) is refused: only its value is read, so another GPU
    or pool size under a shipped id had been fitted as the published setup's figure."""
    setup: dict[str, str | float] = {
        "model": POINTS_MODEL,
        "hardware": point.hardware,
        "gpus": point.gpus,
        "isl": point.context,
    }
    for column, want in setup.items():
        held = (row.get(column) or "").strip()
        if not held:
            continue
        same = held.lower() == want if isinstance(want, str) else _number(held) == float(want)
        if not same:
            rule = (
                f"must be {want} for stage point {point.id}: the fit prices it as the published setup "
                f"({POINTS_MODEL} on {point.gpus} {point.hardware} GPUs, {point.stage} at "
                f"{point.context:g} tokens) and reads only its value; a run of your own goes to --data"
            )
            raise InputError(where, column, rule, held)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def predict_points(
    catalog: Catalog, params: PerfParams, points: tuple[StagePoint, ...] = POINTS
) -> np.ndarray:
    """Predicted tokens/s per GPU of each point (SGLang engine profile, no MTP)."""
    model = catalog.model(POINTS_MODEL)
    speed = np.array([params.engine(POINTS_ENGINE).speed])
    out = []
    for pt in points:
        pool = build_pool(
            model,
            [catalog.hardware(pt.hardware)],
            gpus=[pt.gpus],
            attn_tp=[1],
            ep=[pt.gpus],
            weight_precision=[pt.expert_precision],
            kv_precision=[pt.kv_precision],
            engines=params.kernel_engines([POINTS_ENGINE]),
        )
        if pt.stage == "prefill":
            tokens = np.array([pt.batch_per_gpu * pt.gpus])
            t = forward_cost(
                pool,
                params,
                tokens=tokens,
                sequences=tokens / pt.context,
                context=np.array([pt.context]),
                prefill=True,
                speed=speed,
            ).total_s
        else:
            tokens = np.array([pt.batch_per_gpu * pt.gpus])
            t = forward_cost(
                pool,
                params,
                tokens=tokens,
                sequences=tokens,
                context=np.array([pt.context]),
                prefill=False,
                speed=speed,
            ).total_s
        out.append(float(tokens[0] / t[0] / pt.gpus))
    return np.array(out)
