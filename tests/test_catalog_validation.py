"""Every validation rule of the catalog loader, each with a broken file and its pinned message."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import Cli

from dse.catalog import load_catalog
from dse.errors import InputError, UnknownIdError
from dse.paths import SHIPPED_HARDWARE, SHIPPED_MODELS


def _user_dir(tmp_path: Path, kind: str, name: str, text: str) -> Path:
    folder = tmp_path / kind
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.toml").write_text(text, encoding="utf-8")
    return tmp_path


def _b200(**replace: str) -> str:
    text = (SHIPPED_HARDWARE / "b200.toml").read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


def _load_broken_hardware(tmp_path: Path, text: str, name: str = "b200") -> InputError:
    root = _user_dir(tmp_path, "hardware", name, text)
    with pytest.raises(InputError) as info:
        load_catalog([root], use_env=False)
    assert "\n" not in str(info.value)
    assert str(root / "hardware" / f"{name}.toml") in str(info.value)
    return info.value


CASES = [
    (
        "negative bandwidth",
        {"bandwidth_tb_per_s = 8.0": "bandwidth_tb_per_s = -8.0"},
        r"hbm\.bandwidth_tb_per_s = -8\.0: must be > 0",
    ),
    ("zero capacity", {"capacity_gb = 180": "capacity_gb = 0"}, r"hbm\.capacity_gb = 0: must be > 0"),
    (
        "string for number",
        {"capacity_gb = 180": 'capacity_gb = "180"'},
        r"hbm\.capacity_gb = '180': must be a number",
    ),
    ("nan", {"capacity_gb = 180": "capacity_gb = nan"}, r"hbm\.capacity_gb = nan: must be a finite number"),
    (
        "float for integer",
        {"domain_gpus = 8": "domain_gpus = 8.5"},
        r"scale_up\.domain_gpus = 8\.5: must be an integer",
    ),
    (
        "bool for integer",
        {"domain_gpus = 8": "domain_gpus = true"},
        r"scale_up\.domain_gpus = true: must be an integer",  # as the TOML spells it (was True)
    ),
    (
        "bool for number",
        {"capacity_gb = 180": "capacity_gb = true"},
        r"hbm\.capacity_gb = true: must be a number",
    ),
    (
        "unknown enum",
        {'status = "shipping"': 'status = "rumoured"'},
        r"status = 'rumoured': must be one of shipping, projected",
    ),
    (
        "unknown link kind",
        {'link_kind = "pcie"': 'link_kind = "usb"'},
        r"host\.link_kind = 'usb': must be one of pcie, nvlink-c2c",
    ),
    ("sale unit", {"sale_unit_gpus = 8": "sale_unit_gpus = 0"}, r"sale_unit_gpus = 0: must be > 0"),
    (  # 3 GPUs of an 8-GPU host had been priced and bought as a unit
        "sale unit of no whole host",
        {"sale_unit_gpus = 8": "sale_unit_gpus = 3"},
        r"sale_unit_gpus = 3: must be whole hosts of gpus_per_host \(8\) GPUs, or divide it",
    ),
    (
        "link shared past a host",
        {"gpus_per_link = 1": "gpus_per_link = 16"},
        r"host\.gpus_per_link = 16: must divide gpus_per_host \(8\)",
    ),
    (  # 6 on an 8-GPU host had priced a TP8 instance's all-reduce across the network
        "scale-up domain of no whole host",
        {"domain_gpus = 8": "domain_gpus = 6"},
        r"scale_up\.domain_gpus = 6: must be whole hosts of gpus_per_host \(8\) GPUs, or divide it",
    ),
    (  # read only with measured kernels: it had loaded and done nothing
        "measured bandwidth without measured kernels",
        {'measured_kernels = "b200_sxm"': "measured_hbm_tb_per_s = 8.0"},
        r"measured_hbm_tb_per_s = 8\.0: is read only with measured_kernels",
    ),
    (  # a slip had priced every op from the datasheet, said only in dse predict --json
        "measured kernels of no GPU folder",
        {'measured_kernels = "b200_sxm"': 'measured_kernels = "b200-sxm"'},
        r"measured_kernels = 'b200-sxm': must name a GPU folder of the measured kernel tables \(.*b200_sxm, ",
    ),
    (
        "measured kernels outside the tables",
        {'measured_kernels = "b200_sxm"': 'measured_kernels = ".."'},
        r"measured_kernels = '\.\.': must name a GPU folder",
    ),
    (
        "unknown key",
        {"tdp_w = 1000": "tdp_w = 1000\ntdp_watts = 1000"},
        r"tdp_watts: unknown key; valid keys: .*tdp_w",
    ),
    ("missing key", {"[hbm]\ncapacity_gb = 180\n": "[hbm]\n"}, r"hbm\.capacity_gb: is required"),
    ("missing table", {"[scale_out]\nnic_gbit_per_s_per_gpu = 400\n": ""}, r"scale_out: is required"),
    (
        "string for table",
        {
            "[scale_out]\nnic_gbit_per_s_per_gpu = 400\n": "",
            "tdp_w = 1000": 'tdp_w = 1000\nscale_out = "fast"',
        },
        r"scale_out = 'fast': must be a table",
    ),
    (
        "list item type",
        {'aliases = ["b200-hgx", "dgx-b200"]': 'aliases = ["b200-hgx", 3]'},
        r"aliases\[1\] = 3: must be a string",
    ),
    ("id differs from file", {'id = "b200"': 'id = "b201"'}, r"id = 'b201': must equal the file name 'b200'"),
    (  # it had been read as unset, and -4 had priced a step at 3 s
        "measured bandwidth",
        {"tdp_w = 1000": "tdp_w = 1000\nmeasured_hbm_tb_per_s = -4"},
        r"measured_hbm_tb_per_s = -4: must be > 0",
    ),
    (  # an id `--hardware a,b` would split (it had loaded, and no flag could name it)
        "alias with a comma",
        {'aliases = ["b200-hgx", "dgx-b200"]': 'aliases = ["b200 hgx,v2"]'},
        r"aliases = 'b200 hgx,v2': must hold only a-z, 0-9, '\.', '-' and '_'",
    ),
]


@pytest.mark.parametrize(("label", "replace", "message"), CASES, ids=[c[0] for c in CASES])
def test_broken_hardware_file_names_file_field_value_and_rule(
    tmp_path: Path, label: str, replace: dict[str, str], message: str
) -> None:
    err = _load_broken_hardware(tmp_path, _b200(**replace))
    assert re.search(message, str(err)), str(err)


def test_empty_sources_list_is_refused(tmp_path: Path) -> None:
    text = re.sub(r"sources = \[.*?\]\n", "sources = []\n", _b200(), flags=re.S)  # the list spans lines
    err = _load_broken_hardware(tmp_path, text)
    assert re.search(r"sources = \[\]: must not be empty", str(err))


def test_bad_toml_syntax(tmp_path: Path) -> None:
    err = _load_broken_hardware(tmp_path, "id = \n[[[")
    assert "must be valid TOML" in str(err)


def test_empty_file(tmp_path: Path) -> None:
    err = _load_broken_hardware(tmp_path, "   \n")
    assert str(err).endswith("must not be empty")


def test_not_utf8(tmp_path: Path) -> None:
    folder = tmp_path / "hardware"
    folder.mkdir()
    (folder / "b200.toml").write_bytes(b"id = '\xff\xfe'")
    with pytest.raises(InputError, match=r"b200\.toml: must be UTF-8 text"):
        load_catalog([tmp_path], use_env=False)


def test_upper_case_id_is_refused(tmp_path: Path) -> None:
    err = _load_broken_hardware(tmp_path, _b200(**{'id = "b200"': 'id = "B200"'}), name="B200")
    assert "must be lower case" in str(err)


def test_a_vendor_dse_prices_no_engine_for_is_refused(tmp_path: Path) -> None:
    """`Nvidia` had read as no NVIDIA GPU: TensorRT-LLM refused on it ("runs on NVIDIA GPUs only,
    not b200 (Nvidia)"), SGLang its default in `dse place`, its cold start dropped."""
    for spelled in ("Nvidia", "intel"):
        err = _load_broken_hardware(tmp_path, _b200(**{'vendor = "nvidia"': f'vendor = "{spelled}"'}))
        assert str(err).endswith(f"vendor = '{spelled}': must be one of amd, nvidia (lowercase)"), err


def test_an_upper_case_file_name_is_told_to_be_renamed(tmp_path: Path) -> None:
    """A file `B200x.toml` holding `id = "b200x"` had been told its id must equal 'B200x', an id
    the next load refuses as upper case: the message names the file to rename instead."""
    err = _load_broken_hardware(tmp_path, _b200(**{'id = "b200"': 'id = "b200x"'}), name="B200x")
    assert str(err).endswith(
        "id = 'b200x': must equal the file name 'B200x' (ids are lower case: name the file 'b200x.toml')"
    )


def test_alias_clash_names_both_entries(tmp_path: Path) -> None:
    text = _b200(**{'id = "b200"': 'id = "b200-copy"', '"b200-hgx", ': '"h100", '})
    err = _load_broken_hardware(tmp_path, text, name="b200-copy")
    assert re.search(r"aliases = 'h100': must not repeat an id or alias of hardware 'h100-sxm'", str(err))


def test_a_user_entry_taking_a_shipped_alias_is_the_file_named(tmp_path: Path) -> None:
    """The user's file is the one to change, whichever of the two the check meets first."""
    own = _b200(**{'id = "b200"': 'id = "dgx-b200"', 'aliases = ["b200-hgx", "dgx-b200"]': "aliases = []"})
    err = _load_broken_hardware(tmp_path, own, name="dgx-b200")
    assert str(err).startswith(str(tmp_path / "hardware" / "dgx-b200.toml") + ": id = 'dgx-b200': ")
    shipped = SHIPPED_HARDWARE / "b200.toml"
    assert f"must not repeat an alias of the shipped hardware 'b200' ({shipped})" in str(err)
    aliased = _b200(**{'id = "b200"': 'id = "b200-copy"', '"b200-hgx", ': ""})  # keeps "dgx-b200"
    (tmp_path / "hardware" / "dgx-b200.toml").unlink()
    err = _load_broken_hardware(tmp_path, aliased, name="b200-copy")
    assert str(err).startswith(str(tmp_path / "hardware" / "b200-copy.toml") + ": aliases = 'dgx-b200': ")


def test_a_model_whose_architecture_misses_its_published_size_is_refused(tmp_path: Path) -> None:
    """80 layers typed for DeepSeek-V3's 61: 890 B parameters against the 671 B the file publishes."""
    text = (SHIPPED_MODELS / "deepseek-v3.toml").read_text().replace("layers = 61", "layers = 80")
    root = _user_dir(tmp_path, "models", "deepseek-v3", text)
    with pytest.raises(InputError) as err:
        load_catalog([root], use_env=False)
    assert str(err.value) == (
        f"{root / 'models' / 'deepseek-v3.toml'}: published.params_total_b = 671.0: must be within 3% of "
        "what the architecture gives (889.7): check the architecture's fields, or publish that figure "
        "for a model of your own"
    )


def test_broken_model_file(tmp_path: Path) -> None:
    text = (SHIPPED_MODELS / "kimi-k3.toml").read_text().replace("q_heads = 96", "q_heads = -96")
    root = _user_dir(tmp_path, "models", "kimi-k3", text)
    with pytest.raises(InputError, match=r"kimi-k3\.toml: attention\.q_heads = -96: must be > 0"):
        load_catalog([root], use_env=False)


def test_a_gqa_model_whose_kv_heads_do_not_divide_its_query_heads_is_refused(tmp_path: Path) -> None:
    """5 KV heads of 96 query heads had loaded, and only a published size could catch it."""
    text = (SHIPPED_MODELS / "glm-4.6.toml").read_text().replace("kv_heads = 8", "kv_heads = 5")
    root = _user_dir(tmp_path, "models", "glm-4.6", text)
    said = r"glm-4\.6\.toml: attention\.kv_heads = 5: must divide q_heads \(96\)"
    with pytest.raises(InputError, match=said):
        load_catalog([root], use_env=False)


@pytest.mark.parametrize(
    "name,edit,said",
    [
        (  # MLA's table on a GQA model: read by nothing
            "glm-4.6",
            (
                "[attention]\n",
                "[attention.mla]\nkv_lora_rank = 512\nqk_rope_dim = 64\nqk_nope_dim = 128\n"
                "v_head_dim = 128\n\n[attention]\n",
            ),
            r"attention\.mla: is read only when kind = 'mla' \(this attention is gqa\)",
        ),
        (  # GQA's KV heads on an MLA model: read by nothing, yet checked against the query heads
            "deepseek-v3",
            ('kind = "mla"\n', 'kind = "mla"\nkv_heads = 16\n'),
            r"attention\.kv_heads = 16: is read only when kind = 'gqa'",
        ),
    ],
)
def test_an_attention_setting_of_the_other_kind_is_refused(
    tmp_path: Path, name: str, edit: tuple[str, str], said: str
) -> None:
    text = (SHIPPED_MODELS / f"{name}.toml").read_text()
    assert text.count(edit[0]) == 1
    root = _user_dir(tmp_path, "models", name, text.replace(*edit))
    with pytest.raises(InputError, match=said):
        load_catalog([root], use_env=False)


def test_unknown_precision_in_model(tmp_path: Path) -> None:
    text = (
        (SHIPPED_MODELS / "kimi-k3.toml")
        .read_text()
        .replace('expert_weight_precision = "fp4"', 'expert_weight_precision = "int3"')
    )
    root = _user_dir(tmp_path, "models", "kimi-k3", text)
    with pytest.raises(InputError, match=r"expert_weight_precision = 'int3': must be one of bf16, fp8, fp4"):
        load_catalog([root], use_env=False)


def test_missing_catalog_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nowhere: catalog folder must exist and be a folder"):
        load_catalog([tmp_path / "nowhere"], use_env=False)


def test_a_catalog_folder_laid_out_otherwise_is_refused(tmp_path: Path) -> None:
    """Entries beside the subfolders, a misspelt subfolder or another extension would leave the
    shipped entries in force without a word."""
    for where in ("b200.toml", "hardwares/b200.toml", "hardware/b200.yaml"):
        root = tmp_path / where.replace("/", "_")
        (root / where).parent.mkdir(parents=True, exist_ok=True)
        (root / where).write_text(_b200(), encoding="utf-8")
        rule = "catalog folder must hold hardware/*.toml or models/*.toml (none found)"
        with pytest.raises(InputError, match=re.escape(f"{root}: {rule}")):
            load_catalog([root], use_env=False)
    # beside a folder of the other kind, laid out right, the misspelt or nested one had been ignored
    model = (Path(__file__).resolve().parents[1] / "model_catalog" / "deepseek-v3.toml").read_text()
    # so had an entry at the folder's root and one whose suffix is not .toml in lower case
    for where in ("hardwares/b200.toml", "hardware/x/b200.toml", "Hardware/b200.toml", "b200.toml",
                  "hardware/b200.TOML"):  # fmt: skip
        root = tmp_path / ("beside_" + where.replace("/", "_"))
        (root / where).parent.mkdir(parents=True)
        (root / where).write_text(_b200(), encoding="utf-8")
        (root / "models").mkdir()
        (root / "models" / "deepseek-v3.toml").write_text(model, encoding="utf-8")
        with pytest.raises(InputError, match=re.escape(f"{root / where}: is not read: a catalog folder's")):
            load_catalog([root], use_env=False)
    # a study file kept beside the catalog it runs on is no entry: the folder loads
    (root / "models" / "deepseek-v3.toml").unlink()
    (root / "hardware" / "b200.TOML").rename(root / "hardware" / "b200.toml")
    (root / "my-study.toml").write_text((Path(__file__).parent / "data" / "tiny-study.toml").read_text())
    assert load_catalog([root], use_env=False).hardware("b200").id == "b200"


def test_unknown_id_lists_valid_ids(catalog) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnknownIdError, match=r"unknown hardware id; valid ids: a800-sxm, b200, b300"):
        catalog.hardware("b250")
    with pytest.raises(UnknownIdError, match=r"'gpt5'.*valid ids: deepseek-v3, deepseek-v3.2"):
        catalog.model("gpt5")


def test_user_folder_overrides_by_id_and_adds_entries(tmp_path: Path) -> None:
    _user_dir(tmp_path, "hardware", "b200", _b200(**{"capacity_gb = 180": "capacity_gb = 192"}))
    _user_dir(
        tmp_path,
        "hardware",
        "b200x",
        _b200(**{'id = "b200"': 'id = "b200x"', '"b200-hgx", "dgx-b200"': '"b200-next"'}),
    )
    cat = load_catalog([tmp_path], use_env=False)
    assert cat.hardware("b200").hbm.capacity_gb == 192
    assert cat.hardware("b200-next").id == "b200x"
    assert len(cat.hardware_by_id) == 13


def test_environment_variable_adds_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _user_dir(tmp_path, "hardware", "b200", _b200(**{"capacity_gb = 180": "capacity_gb = 200"}))
    monkeypatch.setenv("DSE_CATALOG_DIR", str(tmp_path))
    assert load_catalog().hardware("b200").hbm.capacity_gb == 200


def test_a_figure_in_another_unit_is_warned_of_and_still_runs(tmp_path: Path, cli: Cli) -> None:
    """8000 typed into a TB/s key (GB/s meant) is a valid number and a what-if may go far, so it
    runs; the line on stderr names the file, the key and the likely slip."""
    _user_dir(
        tmp_path, "hardware", "b200", _b200(**{"bandwidth_tb_per_s = 8.0": "bandwidth_tb_per_s = 8000"})
    )
    proc = cli("--catalog-dir", tmp_path, "catalog", "show", "b200", "--json")
    assert proc.code == 0 and json.loads(proc.out)["hbm"]["bandwidth_tb_per_s"] == 8000
    assert proc.err == (
        f"dse: warning: {tmp_path / 'hardware' / 'b200.toml'}: hbm.bandwidth_tb_per_s = 8000: outside 0.1 "
        "to 100, where every GPU sits; a GB/s figure in a TB/s key?\n"
    )
    assert cli("catalog", "show", "b200").err == ""  # the shipped entries sit inside every range


@pytest.mark.parametrize(
    "edit,doubt",
    [
        (
            ("capacity_tb_per_gpu = 3.84", "capacity_tb_per_gpu = 3840"),
            "storage.local_nvme.capacity_tb_per_gpu = 3840",
        ),
        (("dram_gb_per_gpu = 256", "dram_gb_per_gpu = 0.256"), "host.dram_gb_per_gpu = 0.256"),
        # the links and the prices had no range: 400,000 Gb/s of NIC or $2,400 a GPU-hour loaded silently
        (
            ("nic_gbit_per_s_per_gpu = 400", "nic_gbit_per_s_per_gpu = 400000"),
            "scale_out.nic_gbit_per_s_per_gpu = 400000",
        ),
        (
            ("link_gb_per_s_per_dir = 64", "link_gb_per_s_per_dir = 64000"),
            "host.link_gb_per_s_per_dir = 64000",
        ),
        (
            ("usd_per_gpu_hour_own_hyperscaler = 1.95", "usd_per_gpu_hour_own_hyperscaler = 2400"),
            "prices.usd_per_gpu_hour_own_hyperscaler = 2400",
        ),
        # what the driver shows in TB, and a measured-kernel bandwidth in GB/s, had loaded silently
        (("capacity_gb = 180", "capacity_gb = 180\nvisible_gib = 0.1676"), "hbm.visible_gib = 0.1676"),
        (
            ('measured_kernels = "b200_sxm"', 'measured_kernels = "b200_sxm"\nmeasured_hbm_tb_per_s = 8000'),
            "measured_hbm_tb_per_s = 8000",
        ),
    ],
)
def test_a_kv_tier_in_another_unit_is_warned_of(
    tmp_path: Path, cli: Cli, edit: tuple[str, str], doubt: str
) -> None:
    """NVMe typed in GB (3840 for 3.84 TB per GPU) or host DRAM in TB gave the KV tiers a
    thousandfold the capacity, or a thousandth, with no word: they are warned of as HBM is."""
    _user_dir(tmp_path, "hardware", "b200", _b200(**{edit[0]: edit[1]}))
    proc = cli("--catalog-dir", tmp_path, "catalog", "show", "b200")
    assert proc.code == 0 and f"b200.toml: {doubt}: outside" in proc.err, proc.err


def test_a_narrower_format_slower_than_a_wider_one_is_warned_of(tmp_path: Path, cli: Cli) -> None:
    """fp8 typed below bf16 (450 for 4,500) loaded silently and priced every fp8 GEMM at a fifth
    of bf16's speed: no GPU is slower in the narrower format."""
    _user_dir(tmp_path, "hardware", "b200", _b200(**{"fp8_dense_tflops = 4500": "fp8_dense_tflops = 450"}))
    proc = cli("--catalog-dir", tmp_path, "catalog", "show", "b200")
    assert proc.code == 0
    assert proc.err == (
        f"dse: warning: {tmp_path / 'hardware' / 'b200.toml'}: compute.fp8_dense_tflops = 450: below "
        "bf16_dense_tflops (2250), where every GPU is at least as fast in the narrower format; the two "
        "swapped, or a sparse figure?\n"
    )


def test_a_gpu_without_the_formats_its_ops_fall_back_to_names_the_one_it_needs(
    tmp_path: Path, cli: Cli
) -> None:
    """A GPU of an fp4 figure alone loads (a projected part may publish no other), but its dense
    layers and attention run in bf16 without an fp8 figure: the refusal had read "is required to
    serve bf16" under --precision fp4, as though bf16 had been asked for."""
    text = _b200(**{"bf16_dense_tflops = 2250\nfp8_dense_tflops = 4500\n": ""})
    _user_dir(tmp_path, "hardware", "b200", text)
    proc = cli("--catalog-dir", tmp_path, "predict", "--hardware", "b200", "--precision", "fp4", "--tp", "8")
    assert proc.code == 2 and proc.err.count("\n") == 1, proc.err
    said = "compute.bf16_dense_tflops: is required: b200 has no figure for bf16, and a format a GPU lacks"
    assert said in proc.err
    assert (
        "(the dense layers and attention run in fp8 where the GPU has an fp8 figure, else in bf16)"
        in proc.err
    )


def test_cli_bad_catalog_exits_2_with_one_line(tmp_path: Path, cli: Cli) -> None:
    _user_dir(tmp_path, "hardware", "b200", _b200(**{"bandwidth_tb_per_s = 8.0": "bandwidth_tb_per_s = 0"}))
    proc = cli("--catalog-dir", tmp_path, "catalog", "list", "hardware")
    assert proc.code == 2
    assert proc.out == ""
    lines = proc.err.strip().splitlines()
    assert len(lines) == 1
    assert re.fullmatch(r"dse: error: .*b200\.toml: hbm\.bandwidth_tb_per_s = 0: must be > 0", lines[0])


def test_visible_hbm_above_the_datasheet_is_one_line_and_exit_2(tmp_path: Path, cli: Cli) -> None:
    bad = _b200(**{"bandwidth_tb_per_s = 8.0": "bandwidth_tb_per_s = 8.0\nvisible_gib = 300"})
    _user_dir(tmp_path, "hardware", "b200", bad)
    proc = cli("--catalog-dir", tmp_path, "catalog", "list", "hardware")
    assert proc.code == 2 and proc.out == ""
    (line,) = proc.err.strip().splitlines()
    assert re.fullmatch(
        r"dse: error: .*b200\.toml: hbm\.visible_gib = 300(\.0)?: must be at most capacity_gb .*", line
    ), line


def test_cli_unknown_id_exits_2(cli: Cli) -> None:
    proc = cli("catalog", "show", "b250")
    assert proc.code == 2
    assert "Traceback" not in proc.err
    assert "valid ids: a800-sxm" in proc.err


def _broken_model(tmp_path: Path, name: str, **replace: str) -> str:
    text = (SHIPPED_MODELS / f"{name}.toml").read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    root = _user_dir(tmp_path, "models", name, text)
    with pytest.raises(InputError) as info:
        load_catalog([root], use_env=False)
    return str(info.value)


@pytest.mark.parametrize(
    ("name", "replace", "message"),
    [
        (
            "deepseek-v3",
            {"experts_per_token = 8": "experts_per_token = 300"},
            r"moe\.experts_per_token = 300: must be <= routed_experts \(256\)",
        ),
        (
            "deepseek-v3",
            {"dense_layers = 3": "dense_layers = 70"},
            r"dense_layers = 70: must be <= layers \(61\)",
        ),
        ("deepseek-v3", {"mtp_layers = 1": "mtp_layers = -1"}, r"mtp_layers = -1: must be >= 0"),
        (  # it had loaded, then every command refused its serving precision, blaming an unused flag
            "llama-3.1-70b",
            {'native_weight_precision = "bf16"': 'native_weight_precision = "fp4"'},
            r"native_weight_precision = 'fp4': must not be fp4 for a model without routed experts",
        ),
        (
            "llama-3.1-70b",
            {
                'native_weight_precision = "bf16"': (
                    'native_weight_precision = "bf16"\nexpert_weight_precision = "fp4"'
                )
            },
            r"expert_weight_precision = 'fp4': must not be fp4 for a model without routed experts",
        ),
        ("deepseek-v3", {"dense_ffn_dim = 18432\n": ""}, r"dense_ffn_dim: is required when dense_layers > 0"),
        ("deepseek-v3", {"[attention.mla]": "[attention.unused]"}, r"attention\.unused: unknown key"),
        (
            "kimi-k3",
            {"layers = 69": "layers = 93"},
            r"attention = 93: .*must leave at least one full attention layer of 93",
        ),
        ("qwen3-235b-a22b", {"kv_heads = 4\n": ""}, r"attention\.kv_heads: is required when kind = 'gqa'"),
        ("deepseek-v3", {'kind = "mla"': 'kind = "mla"\nq_heads_extra = 1'}, r"unknown key"),
        # experts in no layer: the table had been read and ignored, and --ep taken for a MoE model
        (
            "deepseek-v3",
            {"dense_layers = 3": "dense_layers = 61"},
            r"moe: must be left out where every layer is dense",
        ),
    ],
    ids=[
        "k>E",
        "dense>layers",
        "negative-mtp",
        "dense-fp4",
        "dense-fp4-experts",
        "dense-ffn-missing",
        "mla-table-renamed",
        "no-full-layer",
        "gqa-kv-heads-missing",
        "unknown-attention-key",
        "moe-in-no-layer",
    ],
)
def test_cross_field_model_rules(tmp_path: Path, name: str, replace: dict[str, str], message: str) -> None:
    err = _broken_model(tmp_path, name, **replace)
    assert re.search(message, err), err
    assert "\n" not in err


def test_mla_without_its_table(tmp_path: Path) -> None:
    text = (SHIPPED_MODELS / "kimi-k2.toml").read_text()
    text = text.split("[attention.mla]")[0] + "[moe]" + text.split("[moe]")[1]
    root = _user_dir(tmp_path, "models", "kimi-k2", text)
    with pytest.raises(InputError, match=r"attention\.mla: is required when kind = 'mla'"):
        load_catalog([root], use_env=False)


def test_model_id_may_not_repeat_a_hardware_id(tmp_path: Path) -> None:
    text = (SHIPPED_MODELS / "kimi-k2.toml").read_text().replace('id = "kimi-k2"', 'id = "b200"')
    root = _user_dir(
        tmp_path, "models", "b200", text.replace('aliases = ["kimi-k2-instruct", "k2"]', "aliases = []")
    )
    with pytest.raises(InputError, match=r"id = 'b200': must not repeat the id of a hardware entry"):
        load_catalog([root], use_env=False)
