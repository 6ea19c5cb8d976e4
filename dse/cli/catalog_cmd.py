"""`dse catalog list|show`: what the catalogs hold, for people and for machines."""

from __future__ import annotations

import argparse
import json
from dataclasses import fields
from typing import Any

from dse.catalog import Catalog, Hardware, Model
from dse.catalog.hardware import Prices
from dse.cli.table import format_table
from dse.errors import InputError, UnknownIdError
from dse.typed_data import to_plain
from dse.units import Precision


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("catalog", help="list and show hardware and model catalog entries")
    csub = p.add_subparsers(dest="catalog_cmd", required=True, metavar="COMMAND")
    lp = csub.add_parser("list", help="a table of one catalog")
    lp.add_argument("kind", nargs="?", choices=["hardware", "models"], help="one catalog (default: both)")
    lp.add_argument("--json", action="store_true", help="machine-readable output")
    sp = csub.add_parser("show", help="every field of one entry, with units and sources")
    sp.add_argument("id", metavar="ID", help="hardware or model id (or alias)")
    sp.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace, catalog: Catalog) -> int:
    if args.catalog_cmd == "list":
        kinds = [args.kind] if args.kind else ["hardware", "models"]
        if args.json:
            records = {kind: _records(kind, catalog) for kind in kinds}
            print(json.dumps(records[args.kind] if args.kind else records, indent=2))
            return 0
        print("\n\n".join(_table(kind, catalog) for kind in kinds))
        return 0
    return _show(args.id, catalog, as_json=args.json)


def model_record(m: Model) -> dict[str, Any]:
    """A model with its derived figures, as plain values."""
    rec = to_plain(m)
    rec["derived"] = {
        "params_total_b": round(m.params_total() / 1e9, 2),
        "params_active_b": round(m.params_active() / 1e9, 2),
        "kv_bytes_per_token_bf16": m.kv_bytes_per_token(Precision.BF16),
        "kv_bytes_per_token_fp8": m.kv_bytes_per_token(Precision.FP8),
        "fixed_state_bytes_per_request": m.fixed_state_bytes_per_request(Precision.BF16),
        "weight_gb_native": round(m.weight_bytes() / 1e9, 1),
    }
    return rec


def _records(kind: str, catalog: Catalog) -> list[dict[str, Any]]:
    """One catalog's entries as plain values (models with their derived figures), sorted by id."""
    if kind == "hardware":
        return [to_plain(h) for h in sorted(catalog.hardware_by_id.values(), key=lambda h: h.id)]
    return [model_record(m) for m in sorted(catalog.models_by_id.values(), key=lambda m: m.id)]


def _table(kind: str, catalog: Catalog) -> str:
    if kind == "hardware":
        rows = [_hardware_row(h) for h in sorted(catalog.hardware_by_id.values(), key=lambda h: h.id)]
        return format_table(
            [
                "id",
                "status",
                "fp8_tflops",
                "fp4_tflops",
                "hbm_gb",
                "hbm_gib_sized",
                "hbm_tb_per_s",
                "scaleup_gpus",
                "host_link",
                *(f.name.replace("usd_per_gpu_hour_", "usd_hour_") for f in fields(Prices)),  # per GPU
            ],
            rows,
        )
    models = sorted(catalog.models_by_id.values(), key=lambda m: m.id)
    rows = []
    for m in models:
        d = model_record(m)["derived"]
        rows.append(
            [
                m.id,
                m.attention.kind.value,
                d["params_total_b"],
                d["params_active_b"],
                d["kv_bytes_per_token_bf16"],
                d["fixed_state_bytes_per_request"] / 2**20,
                _weights(m),
            ]
        )
    return format_table(
        [
            "id",
            "attention",
            "params_total_b",
            "params_active_b",
            "kv_bytes_per_token_bf16",
            "fixed_state_mib_per_request",
            "weights",
        ],
        rows,
    )


def _weights(m: Model) -> str:
    """The checkpoint's weight precision, and its routed experts' where they differ (gpt-oss-120b's
    and Kimi K3's fp4 experts hold most of their bytes: "bf16" alone would size them 3-4x)."""
    native, expert = m.native_weight_precision, m.expert_weight_precision
    return native.value if expert is None or expert is native else f"{native.value}, experts {expert.value}"


def _hardware_row(h: Hardware) -> list[object]:
    return [
        h.id,
        h.status.value,
        h.compute.fp8_dense_tflops,
        h.compute.fp4_dense_tflops,
        h.hbm.capacity_gb,
        h.hbm.usable_gib,  # what the engine sizes with: the driver's figure where it shows less
        h.hbm.bandwidth_tb_per_s,
        h.scale_up.domain_gpus,
        h.host.link_kind.value,
        *(getattr(h.prices, f.name) for f in fields(Prices)),  # every tier: own_hyperscaler is the default
    ]


def _show(entry_id: str, catalog: Catalog, *, as_json: bool) -> int:
    try:
        entry: Hardware | Model = catalog.hardware(entry_id)
        rec = to_plain(entry)
    except UnknownIdError:
        try:
            entry = catalog.model(entry_id)
        except UnknownIdError:
            valid = sorted([*catalog.hardware_by_id, *catalog.models_by_id])
            # the argument as the user typed it, not the catalog's inner kind ("catalog: catalog entry = ...")
            rule = f"unknown hardware or model id; valid ids: {', '.join(valid)}"
            raise InputError("dse catalog show", "ID", rule, entry_id) from None
        rec = model_record(entry)
    rec["file"] = str(catalog.file_of(entry.id))
    if as_json:
        print(json.dumps(rec, indent=2))
        return 0
    pairs = _flatten(rec)
    width = max(45, *(len(key) for key, _ in pairs))  # a longer key had pushed its value out of line
    for key, value in pairs:
        print(f"{key:{width}s} {value}")
    return 0


def _flatten(rec: dict[str, Any], prefix: str = "") -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for k, v in rec.items():
        if isinstance(v, dict):
            out += _flatten(v, f"{prefix}{k}.")
        elif isinstance(v, list):
            out.append((prefix + k, ", ".join(map(str, v)) if v else "-"))
        else:
            out.append((prefix + k, "-" if v is None else v))
    return out
