"""What the calibration cannot tell apart: the fixed time of a forward per step against per layer.

The decode step's fixed time is ``step_overhead_ms + layers x layer_overhead_us``. Every measured
run the fit reads is DeepSeek-R1, 61 layers, so the data fixes only the sum at 61 layers, and how
the fit splits it is an accident of its path (the leave-one-hardware-out folds put the per-layer
share anywhere from 3 to 75 us). For a model of another depth the split matters. This prints, for
one H200 node at 64 requests in flight (ISL 1024, OSL 1024, SGLang), each model's predicted TPOT
and tokens/s/GPU under the shipped calibration and under the same calibration with the whole
fixed time charged per layer (the same sum at 61 layers, so DeepSeek's predictions stay).

Prints figures, not verdicts. Run: ``python benchmarks/overhead_split.py`` (about 10 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from record import figure

from dse.catalog import load_catalog
from dse.paths import CALIBRATION_FILE

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = CALIBRATION_FILE
# every measured run is DeepSeek-R1, of DeepSeek-V3's depth
CALIBRATED_LAYERS = load_catalog(use_env=False).model("deepseek-v3").layers
# (model, GPUs of the instance): the smallest H200 instance whose weights fit
MODELS = (("deepseek-v3", 8), ("qwen3-235b-a22b", 8), ("glm-4.6", 8), ("gpt-oss-120b", 1))


def per_layer(calibration: dict[str, object]) -> dict[str, object]:
    """The calibration with its fixed time at DeepSeek's depth charged per layer only."""
    p = dict(calibration["params"])  # type: ignore[call-overload]
    total_us = p["step_overhead_ms"] * 1e3 + CALIBRATED_LAYERS * p["layer_overhead_us"]
    p["step_overhead_ms"] = 0.0
    p["layer_overhead_us"] = total_us / CALIBRATED_LAYERS
    return {**calibration, "params": p}


def predict(model: str, gpus: int, calibration: Path) -> dict[str, float]:
    argv = [sys.executable, "-m", "dse.cli.main", "predict", "--model", model, "--hardware", "h200",
            "--conc", "64", "--tp", str(gpus), "--ep", str(gpus), "--json"]  # fmt: skip
    env = {**os.environ, "DSE_CALIBRATION": str(calibration)}
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True, cwd=ROOT).stdout
    return json.loads(out)["prediction"]  # type: ignore[no-any-return]


def main() -> None:
    shipped = json.loads(SHIPPED.read_text())
    p = shipped["params"]
    print(f"shipped: {p['step_overhead_ms']:.2f} ms per step + {p['layer_overhead_us']:.2f} us per layer; "
          f"per layer only: {per_layer(shipped)['params']['layer_overhead_us']:.1f} us per layer")  # type: ignore[index]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        alt = Path(tmp) / "per_layer.json"
        alt.write_text(json.dumps(per_layer(shipped)))
        print("| model | fixed time of a decode step, shipped / per layer only | TPOT ms | tokens/s/GPU |")
        print("|---|---|---|---|")
        for model, gpus in MODELS:
            a, b = predict(model, gpus, SHIPPED), predict(model, gpus, alt)
            ratio = b["tput_per_gpu"] / a["tput_per_gpu"]
            print(f"| {model} | {a['decode_overhead_ms']:.2f} / {b['decode_overhead_ms']:.2f} ms | "
                  f"{a['tpot_mean_ms']:.1f} / {b['tpot_mean_ms']:.1f} | {a['tput_per_gpu']:.0f} / "
                  f"{b['tput_per_gpu']:.0f} ({ratio - 1:+.0%}) |")  # fmt: skip
            figure(f"tokens/s/GPU per layer only / shipped, {model}", ratio, "x", "H200, 64 requests")


if __name__ == "__main__":
    main()
