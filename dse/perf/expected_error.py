"""How far a prediction may be from a measurement: the error figures the calibration stored in its
provenance (``dse calibrate`` writes them), told to the user with each prediction."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dse.catalog import Catalog
from dse.errors import InputError
from dse.perf.params import POINTS_ENGINE, PerfParams

FEW_ROWS = 25
"""About as many values as the throughput fit sets: a calibration of fewer measured runs cannot pin
them (``dse calibrate`` warns as it fits, a prediction with the file says so in its trust line)."""


@dataclass(frozen=True)
class ExpectedError:
    """How far a prediction may be from a measurement (absolute relative errors), and on what
    basis: "in-sample" where the calibration saw the hardware, "leave-one-hardware-out" where not.
    ``models_fitted``: the models the calibration measured; for any other the error is unmeasured."""

    basis: str
    tput_median_ape: float
    tput_p75_ape: float
    intvty_median_ape: float
    intvty_p75_ape: float
    ttft_median_ape: float | None  # the closed-form TTFT against the measured median, in-sample
    models_fitted: tuple[str, ...]
    model_fitted: bool
    # the simulated percentiles (ttft_p50, ttft_p99, tpot_p50, tpot_p99) on the same basis
    latency_median_ape: dict[str, float | None] | None = None  # None: no run measured it
    kernels: str = "datasheet"  # the tier the calibration priced ops with (PerfParams.kernels)
    # an engine profile no measured run calibrated (its speed and MTP acceptance are assumed)
    assumed_engine: str | None = None
    # the hardware and model entries a user's catalog folder changed from the shipped ones (the
    # calibration measured the shipped ones): ("hardware", id) and ("model", id)
    edited: tuple[tuple[str, str], ...] = ()
    # the measured runs the calibration fitted (provenance ``rows_fitted``; None: not recorded)
    rows_fitted: int | None = None
    # the assumed engine's speed was fitted to the stage points (the fit took them: it prices them
    # with that engine's profile)
    engine_by_points: bool = False

    def describe(self) -> str:
        if self.basis == "in-sample":
            seen = "the calibration saw this hardware"
        else:
            seen = "the calibration did not see this hardware"
        for kind, entry in self.edited:
            if kind == "hardware":
                seen += f"; your catalog changes {entry} from the entry it saw"
        ttft = ""
        lat = self.latency_median_ape
        if lat is not None:
            ttft = (
                f"; simulated TTFT p50 / p99 {_pct(lat['ttft_p50'])} / {_pct(lat['ttft_p99'])}, "
                f"TPOT p50 / p99 {_pct(lat['tpot_p50'])} / {_pct(lat['tpot_p99'])} (median)"
            )
        elif self.ttft_median_ape is not None:
            ttft = f"; TTFT {self.ttft_median_ape:.0%} (median, in-sample)"
        model = ""
        changed = [entry for kind, entry in self.edited if kind == "model"]
        if changed:
            model = f"; the runs measured the shipped {changed[0]}, which your catalog changes: its error is "
            model += "unmeasured"
        elif not self.model_fitted:
            fitted = ", ".join(self.models_fitted)
            model = f"; measured on {fitted} runs only: this model's error is unmeasured"
        if self.assumed_engine is not None and self.engine_by_points:
            model += (
                f"; engine profile {self.assumed_engine} has no measured runs: its speed is fitted to "
                "the stage points alone, its MTP acceptance the calibrated engines' mean"
            )
        elif self.assumed_engine is not None:
            model += (
                f"; engine profile {self.assumed_engine} has no measured runs: its speed and MTP "
                "acceptance are the calibrated engines' mean, an assumption"
            )
        model += _few_rows(self.rows_fitted)
        return (
            f"expected error against measured runs ({self.kernels} kernels, {self.basis}: {seen}), "
            "median / p75: "
            f"tokens/s/GPU {self.tput_median_ape:.0%} / {self.tput_p75_ape:.0%}, "
            f"tokens/s/user {self.intvty_median_ape:.0%} / {self.intvty_p75_ape:.0%}{ttft}{model}"
        )


def _few_rows(rows: int | None) -> str:
    """What a trust line adds of a calibration of fewer than :data:`FEW_ROWS` measured runs ("":
    enough, or not recorded)."""
    if rows is None or rows >= FEW_ROWS:
        return ""
    return (
        f"; the calibration fitted {rows} runs, fewer than the {FEW_ROWS} or so values it sets: a "
        "poorly determined fit, whose errors say little"
    )


def _pct(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.0%}"


def _float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def expected_error(
    params: PerfParams,
    hardware: str,
    model: str,
    engine: str | None = None,
    edited: frozenset[str] = frozenset(),
) -> ExpectedError | None:
    """How far a prediction of ``model`` on ``hardware`` may be from a measurement, from the
    calibration's provenance: the in-sample error where the fit saw that hardware, the
    leave-one-hardware-out error where it did not (None for a file without these figures). An id
    in ``edited`` (an entry a user's catalog folder changed) is one the fit did not see."""
    prov = params.provenance
    seen = hardware in prov.get("hardware_fitted", ()) and hardware not in edited
    prefix = "in_sample" if seen else "loho"
    keys = ("tput_median_ape", "tput_p75_ape", "intvty_median_ape", "intvty_p75_ape")
    if not all(f"{prefix}_{k}" in prov for k in keys):
        return None
    ttft = prov.get("in_sample_ttft_median_ape")
    t_med, t_p75, i_med, i_p75 = (float(prov[f"{prefix}_{k}"]) for k in keys)
    models = tuple(prov.get("models_fitted", ()))
    latency = prov.get("latency", {}).get("in_sample_median_ape" if seen else "loho_median_ape")
    return ExpectedError(
        "in-sample" if seen else "leave-one-hardware-out",
        t_med,
        t_p75,
        i_med,
        i_p75,
        ttft_median_ape=None if ttft is None else float(ttft),
        models_fitted=models,
        model_fitted=model in models and model not in edited,
        latency_median_ape=None if latency is None else {k: _float(v) for k, v in latency.items()},
        kernels=params.kernels,
        assumed_engine=engine
        if engine is not None and engine not in prov.get("engines_fitted", (engine,))
        else None,
        edited=tuple((kind, e) for kind, e in (("hardware", hardware), ("model", model)) if e in edited),
        rows_fitted=prov.get("rows_fitted"),
        engine_by_points=engine == POINTS_ENGINE and prov.get("stage_points") is not None,
    )


def fitted_entries(catalog: Catalog, hardware: list[str], models: list[str]) -> dict[str, Any]:
    """The numbers of the catalog entries a fit saw, as its provenance records them (``catalog``),
    so that a prediction can tell whether its catalog still has them (:func:`changed_since_fit`)."""
    from dse.catalog.loader import entry_numbers

    return _plain({
        "hardware": {h: entry_numbers(catalog.hardware(h)) for h in hardware},
        "models": {m: entry_numbers(catalog.model(m)) for m in models},
    })  # fmt: skip


def changed_since_fit(params: PerfParams, catalog: Catalog) -> frozenset[str]:
    """Ids whose entry in ``catalog`` has other numbers than the calibration saw, prices aside:
    against the entries its provenance records (a fit of a catalog with B200 at 9 TB/s, read with
    the shipped 8 TB/s, had called B200 in-sample; read with its own 9 TB/s it is), or, for a file
    that records none (before 2026-12-07), against the shipped catalog it was fitted with."""
    from dse.catalog.loader import NOT_MEASURED, entry_numbers

    seen = params.provenance.get("catalog")
    if not isinstance(seen, dict):
        return catalog.edited
    out = set()
    for kind, lookup in (("hardware", catalog.hardware), ("models", catalog.model)):
        for key, numbers in dict(seen.get(kind, {})).items():
            try:
                entry = lookup(key)
            except InputError:  # an id the catalog no longer has: not the entry the fit saw
                out.add(key)
                continue
            now = _plain(entry_numbers(entry))
            # (a key a later dse records, such as vendor, is no change to a file without it; nor
            # are the prices, which no run measured: a B200 at one's own price had lost its
            # in-sample error under any calibration dse calibrate writes)
            if any(now[k] != numbers[k] for k in (now.keys() & numbers.keys()) - NOT_MEASURED):
                out.add(entry.id)
    return frozenset(out)


def _plain(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples as lists), so that recorded and current numbers compare."""
    return json.loads(json.dumps(value))


def unmeasured_reason(params: PerfParams, hardware: str, edited: frozenset[str] = frozenset()) -> str | None:
    """Why :func:`expected_error` has no figures for ``hardware``, where the calibration file has
    in-sample figures but none for hardware it did not see (a fit with ``--no-cross-validation``,
    or of runs on one GPU type): the prediction had printed no trust line at all, as though the
    question did not arise; and, as there, that it fitted fewer runs than it sets values (it had
    been said on hardware the calibration saw only). None where :func:`expected_error` answers, or
    the file has no figures."""
    prov = params.provenance
    if "in_sample_tput_median_ape" not in prov or expected_error(params, hardware, "", None, edited):
        return None
    seen = ", ".join(str(h) for h in prov.get("hardware_fitted", ()) if h not in edited) or "none"
    other = hardware in prov.get("hardware_fitted", ()) and hardware in edited
    saw = f"fitted other numbers for {hardware} than this catalog's" if other else "did not see this hardware"
    return (
        f"expected error against measured runs: unknown: the calibration {saw} "
        f"(it measured {seen}) and stores no leave-one-hardware-out error (fitted with "
        "--no-cross-validation, or on runs of one GPU type)" + _few_rows(prov.get("rows_fitted"))
    )


def defaults_note(params: PerfParams) -> str | None:
    """What a command says of a calibration file that lacks values (an older dse's, or an edited
    one): which, and that the uncalibrated defaults stand in for them; None where it lacks none."""
    from dse.paths import calibration_file

    lacks = params.defaulted
    if not lacks:
        return None
    named = ", ".join(lacks[:4]) + (f" and {len(lacks) - 4} more" if len(lacks) > 4 else "")
    return (
        f"{calibration_file()}: lacks {named}: the uncalibrated defaults stand in for them beside "
        "the fitted values (dse calibrate writes a whole fit)"
    )


def calibration_note(params: PerfParams) -> str | None:
    """What a command that prices with a calibration other than the shipped one says of it (the file
    ``$DSE_CALIBRATION`` names, and how many measured runs it fitted); None with the shipped one."""
    from dse.paths import CALIBRATION_ENV, CALIBRATION_FILE, calibration_file

    path = calibration_file()
    if path == CALIBRATION_FILE:
        return None
    rows = params.provenance.get("rows_fitted")
    fitted = "" if rows is None else f", which fitted {rows} measured run{'' if rows == 1 else 's'}"
    few = (
        f": fewer than the {FEW_ROWS} or so values it sets, a poorly determined fit"
        if rows is not None and rows < FEW_ROWS
        else ""
    )
    return f"priced with the calibration {CALIBRATION_ENV} names ({path}){fitted}{few}"
