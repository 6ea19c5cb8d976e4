"""What docs/catalogs.md says of a compute what-if on a GPU with measured kernel tables: under
`--kernels measured` the measured ops keep the shipped GPU's times (only HBM bandwidth is scaled,
dse.catalog.loader._measured_at), so twice H200's bf16 compute leaves its prefill unchanged there,
about 6% faster on the datasheet tier; without `measured_kernels` the entry is priced from its
datasheet on either tier."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Cli

from dse.paths import CALIBRATION_FILE, SHIPPED_HARDWARE

PREDICT = ["predict", "--hardware", "h200", "--framework", "sglang", "--isl", "8192", "--osl", "1024",
           "--conc", "64", "--tp", "8", "--ep", "8", "--dp-attention", "--json"]  # fmt: skip


def _prefill_s(cli: Cli, catalog_dir: Path | None) -> float:
    flags = ["--catalog-dir", str(catalog_dir)] if catalog_dir is not None else []
    r = cli(*flags, *PREDICT)
    assert r.code == 0, r.err
    return float(json.loads(r.out)["prediction"]["prefill_one_prompt_s"])


def _h200(folder: Path, *, bf16_scale: float, measured: bool) -> Path:
    text = (SHIPPED_HARDWARE / "h200-sxm.toml").read_text()
    old = "bf16_dense_tflops = 989"
    assert old in text and 'measured_kernels = "h200_sxm"' in text
    text = text.replace(old, f"bf16_dense_tflops = {989 * bf16_scale:g}")
    if not measured:
        text = "\n".join(x for x in text.splitlines() if not x.startswith("measured_kernels"))
    (folder / "hardware").mkdir(parents=True)
    (folder / "hardware" / "h200-sxm.toml").write_text(text)
    return folder


def test_a_compute_what_if_moves_the_datasheet_tier_only(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    faster = _h200(tmp_path / "faster", bf16_scale=2.0, measured=True)
    on_datasheet = _h200(tmp_path / "datasheet", bf16_scale=2.0, measured=False)
    shipped, doubled = _prefill_s(cli, None), _prefill_s(cli, faster)
    assert 0.04 < 1.0 - doubled / shipped < 0.08  # the datasheet tier: about 6% faster
    raw = json.loads(CALIBRATION_FILE.read_text())
    raw["kernels"] = "measured"
    (tmp_path / "measured.json").write_text(json.dumps(raw))
    monkeypatch.setenv("DSE_CALIBRATION", str(tmp_path / "measured.json"))
    assert _prefill_s(cli, faster) == pytest.approx(_prefill_s(cli, None), rel=1e-9)
    assert _prefill_s(cli, on_datasheet) == pytest.approx(doubled, rel=1e-9)
