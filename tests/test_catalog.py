"""The shipped catalogs: every reference row is present and derived figures match published ones."""

from __future__ import annotations

import csv

import pytest

from dse.catalog import Catalog
from dse.paths import REFERENCE_DIR as REFERENCE
from dse.units import Precision


def _rows(name: str) -> list[dict[str, str]]:
    with open(REFERENCE / name, newline="") as fh:
        return list(csv.DictReader(fh))


def test_every_hardware_row_has_an_entry(catalog: Catalog) -> None:
    ids = {r["id"] for r in _rows("hardware.csv")}
    assert ids == set(catalog.hardware_by_id)
    assert len(catalog.hardware_by_id) == 12


def test_every_cited_source_is_named_in_the_repository(catalog: Catalog) -> None:
    """A catalog entry cites ``TAG: document <address>`` as ``reference/SOURCES.md`` lists it, or a
    file of ``reference/``."""
    listed = dict(
        line[2:].split(": ", 1)
        for line in (REFERENCE / "SOURCES.md").read_text().splitlines()
        if line[:2] == "- "
    )
    entries = [*catalog.hardware_by_id.values(), *catalog.models_by_id.values()]
    for entry in entries:
        for source in entry.sources:
            if source.startswith("reference/"):
                assert (REFERENCE.parent / source.split()[0]).is_file(), (entry.id, source)
            else:
                tag, text = source.split(": ", 1)
                assert listed[tag].replace(" (no single address)", "") == text, (entry.id, tag)


def test_hardware_entries_match_reference_numbers(catalog: Catalog) -> None:
    for row in _rows("hardware.csv"):
        hw = catalog.hardware(row["id"])
        assert hw.hbm.capacity_gb == float(row["hbm_gb"])
        assert hw.hbm.bandwidth_tb_per_s == float(row["hbm_tb_per_s"])
        assert hw.scale_up.domain_gpus == int(row["scaleup_domain_gpus"])
        assert hw.status.value == row["status"]
        assert set(row["sources"].split(";")) <= {s.split(":")[0] for s in hw.sources}
        if row["fp8_dense_tflops"]:
            assert hw.compute.fp8_dense_tflops == float(row["fp8_dense_tflops"])
        else:
            assert hw.compute.fp8_dense_tflops is None


def test_projected_hardware_is_marked(catalog: Catalog) -> None:
    assert catalog.hardware("vr200").projected
    assert not catalog.hardware("b200").projected


def test_grace_hosts_share_the_c2c_link(catalog: Catalog) -> None:
    gb = catalog.hardware("gb200")
    assert gb.host.link_kind.value == "nvlink-c2c" and gb.host.gpus_per_link == 2
    assert catalog.hardware("b200").host.link_kind.value == "pcie"


def test_rack_systems_count_host_links_and_hosts_per_gpu(catalog: Catalog) -> None:
    """The C2C figure is each GPU's share of its CPU's link per direction (Grace 900 GB/s and Vera
    1.8 TB/s bidirectional, each CPU serving 2 GPUs), and an NVL72/NVL144 compute tray holds 4 GPUs."""
    for hw_id, cpu_link_bidir in (("gb200-nvl72", 900), ("gb300-nvl72", 900), ("vr200-nvl144", 1800)):
        hw = catalog.hardware(hw_id)
        assert hw.host.link_gb_per_s_per_dir == cpu_link_bidir / 2 / hw.host.gpus_per_link, hw_id
        assert hw.gpus_per_host == 4, hw_id


@pytest.mark.parametrize("alias", sorted({r["hardware"] for r in _rows("inferencex_calibration.csv")}))
def test_inferencex_hardware_names_resolve(catalog: Catalog, alias: str) -> None:
    assert catalog.hardware(alias).id


@pytest.mark.parametrize("alias", ["b200", "gb200", "h100", "mi355x", "h800", "h100-sxm"])
def test_short_names_resolve(catalog: Catalog, alias: str) -> None:
    assert catalog.hardware(alias).id.startswith(alias.split("-")[0])


def test_every_model_row_has_an_entry(catalog: Catalog) -> None:
    assert {r["id"] for r in _rows("models.csv")} == set(catalog.models_by_id)
    assert catalog.model("dsr1").id == "deepseek-v3"


@pytest.mark.parametrize("row", _rows("models.csv"), ids=lambda r: r["id"])
def test_derived_parameters_within_three_percent(catalog: Catalog, row: dict[str, str]) -> None:
    m = catalog.model(row["id"])
    total = m.params_total() / 1e9
    active = m.params_active() / 1e9
    assert total == pytest.approx(float(row["params_total_b"]), rel=0.03)
    assert active == pytest.approx(float(row["params_active_b"]), rel=0.03)


@pytest.mark.parametrize("row", _rows("models.csv"), ids=lambda r: r["id"])
def test_kv_bytes_per_token_equal_reference(catalog: Catalog, row: dict[str, str]) -> None:
    m = catalog.model(row["id"])
    bf16 = float(row["kv_bytes_per_token_bf16"])
    assert m.kv_bytes_per_token(Precision.BF16) == bf16
    if m.attention.sparse_indexer is None:  # V3.2's fp8 layout and fp8 indexer keys: test_perf_model
        assert m.kv_bytes_per_token(Precision.FP8) == bf16 / 2


def test_kimi_k3_keeps_a_fixed_linear_attention_state(catalog: Catalog) -> None:
    k3 = catalog.model("kimi-k3")
    assert k3.full_attention_layers == 24 and k3.linear_layers == 69
    state_mib = k3.fixed_state_bytes_per_request(Precision.BF16) / 2**20
    assert state_mib == pytest.approx(414, rel=0.01)
    # the state does not grow with context, the MLA KV does
    short = k3.kv_bytes_per_request(1_000, Precision.BF16)
    long = k3.kv_bytes_per_request(101_000, Precision.BF16)
    assert long - short == pytest.approx(100_000 * 27648)


def test_gpt_oss_sliding_window_caps_its_layers(catalog: Catalog) -> None:
    oss = catalog.model("gpt-oss-120b")
    assert oss.full_attention_layers == 18
    assert oss.fixed_state_bytes_per_request(Precision.BF16) / 2**20 == pytest.approx(4.5)


def test_weights_use_the_expert_precision(catalog: Catalog) -> None:
    k3 = catalog.model("kimi-k3")
    # routed experts in fp4 dominate: about 2.72T x 0.5 B plus ~55B x 2 B
    assert 1.4e12 < k3.weight_bytes() < 1.6e12
    assert catalog.model("deepseek-v3").weight_bytes() == pytest.approx(671e9, rel=0.01)
