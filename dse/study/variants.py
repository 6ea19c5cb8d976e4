"""A study's catalog: the shipped (or given) catalog plus the study's what-if hardware variants,
with every id the study names checked before a trial runs."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace
from types import MappingProxyType
from typing import Any, TypeVar

from dse.catalog import Catalog
from dse.catalog.hardware import Hardware
from dse.catalog.loader import entry_numbers
from dse.errors import InputError
from dse.metrics import METRICS
from dse.placement.parallel import parse_shape
from dse.placement.request import Topology
from dse.placement.shapes import parallel_grid, unrunnable
from dse.study.spec import DecodeSearch, PrefillSearch, StudySpec, Variant

T = TypeVar("T")


def variant_hardware(base: Hardware, v: Variant) -> Hardware:
    """``base`` with scaled HBM; price, power, links and compute unchanged."""
    return replace(
        base,
        id=v.id,
        name=f"{base.name} (HBM bandwidth x{v.hbm_bandwidth_scale:g}, capacity x{v.hbm_capacity_scale:g})",
        hbm=replace(
            base.hbm.scaled(v.hbm_capacity_scale),
            bandwidth_tb_per_s=base.hbm.bandwidth_tb_per_s * v.hbm_bandwidth_scale,
        ),
        aliases=(),
        measured_hbm_tb_per_s=base.measured_hbm_tb_per_s or base.hbm.bandwidth_tb_per_s,
        notes=f"what-if variant of {base.id}: HBM scaled as stated, everything else as {base.id}",
    )


def study_catalog(spec: StudySpec, catalog: Catalog, source: str | None = None) -> Catalog:
    """``catalog`` with the study's variants added; unknown ids (model, hardware, variant bases,
    sweep values) fail here as bad input naming the study (``source``: its file) and the field.
    (A variant no trial runs on is refused before a run, not here: :func:`unused_variant`.)"""
    source = source or f"study {spec.name}"
    extra: dict[str, Hardware] = {}
    files = dict(catalog.files)
    for i, v in enumerate(spec.variants):
        if _resolves(catalog.hardware, v.id):  # in any case, or an alias: lookups would find the catalog's
            rule = "must not reuse a catalog hardware id or alias"
            raise InputError(source, f"variants[{i}].id", rule, v.id)
        if _resolves(catalog.model, v.id):  # as a catalog file may not: the two would share one name
            rule = "must not reuse a catalog model id or alias"
            raise InputError(source, f"variants[{i}].id", rule, v.id)
        base = _known(catalog.hardware, v.base, source, f"variants[{i}].base")
        extra[v.id] = variant_hardware(base, v)
        files[v.id] = catalog.file_of(base.id)
    out = Catalog(
        MappingProxyType({**catalog.hardware_by_id, **extra}), catalog.models_by_id, MappingProxyType(files)
    )
    _known(out.model, spec.model, source, "model")
    for i, h in enumerate(spec.hardware):
        _known(out.hardware, h, source, f"hardware[{i}]")
    _once(out.model, spec.sweep.model, source, "sweep.model")
    _once(out.hardware, spec.sweep.hardware, source, "sweep.hardware")
    _fits_context(spec, out, source)
    _one_precision(spec, out, source)
    _runs_on(spec, out, source)
    _priced(spec, out, source)
    return out


def _once(lookup: Callable[[str], Any], names: tuple[str, ...], source: str, field: str) -> None:
    """Each of a swept axis's ``names`` is known, and no two name one entry (``h200-sxm`` and its
    alias ``h200``: the grid's second point had been the first one again, and the run stopped with
    a traceback once no point was left)."""
    first: dict[str, str] = {}
    for i, name in enumerate(names):
        entry = _known(lookup, name, source, f"{field}[{i}]").id
        if entry in first:
            rule = f"must name each entry once: {first[entry]!r} and {name!r} are both {entry!r}"
            raise InputError(source, f"{field}[{i}]", rule, name)
        first[entry] = name


def unused_variant(spec: StudySpec, catalog: Catalog, source: str | None = None) -> InputError | None:
    """A what-if variant no trial runs on, or a grid's ``hardware`` entry (or ``model``) its
    ``sweep.hardware`` (``sweep.model``) leaves out, as the refusal that names it (``catalog``: the study's,
    :func:`study_catalog`): one declared but left out of ``hardware`` (or, in a grid that sweeps
    the hardware, of that axis, which replaces ``hardware`` at each point) had run the study as
    if it were not there. Refused before a run; a stored run is still read (as
    :func:`dse.study.spec.idle_settings`)."""
    source = source or f"study {spec.name}"
    where = "sweep.hardware" if spec.sweep.hardware else "hardware"
    named = {catalog.hardware(h).id for h in (spec.sweep.hardware or spec.hardware)}
    for i, h in enumerate(spec.hardware if spec.sweep.hardware else ()):
        # the sweep's hardware replaces the study's at each point: one it does not name is never run,
        # yet had been checked (its engine, its price) and stored, and an edit of it refused a resume
        if catalog.hardware(h).id not in named:
            rule = "must be named in sweep.hardware: each point runs on the swept hardware alone"
            return InputError(source, f"hardware[{i}]", rule, h)
    # so with the model (a Llama beside a sweep of DeepSeek and Kimi had been stored and exported
    # as the study's model, placed nowhere)
    if spec.sweep.model and catalog.model(spec.model).id not in {
        catalog.model(m).id for m in spec.sweep.model
    }:
        rule = "must be named in sweep.model: each point runs the swept model alone"
        return InputError(source, "model", rule, spec.model)
    for i, v in enumerate(spec.variants):
        if v.id not in named:
            rule = f"must be named in {where}: no trial runs on it otherwise"
            return InputError(source, f"variants[{i}].id", rule, v.id)
    return None


def _serving_precisions(spec: StudySpec, catalog: Catalog) -> dict[str, str]:
    """The serving precision of each model the study places, by model id."""
    models = spec.sweep.model or (spec.model,)
    return {catalog.model(m).id: catalog.model(m).serving_precision.value for m in models}


def _one_precision(spec: StudySpec, catalog: Catalog, source: str) -> None:
    """A study that leaves ``precision`` out takes its model's serving precision; one whose
    swept models serve at different ones must say which it prices."""
    served = _serving_precisions(spec, catalog)
    if spec.precision is None and len(set(served.values())) > 1:
        each = ", ".join(f"{m} {p}" for m, p in served.items())
        rule = f"must be given: the swept models serve at different precisions ({each})"
        raise InputError(source, "precision", rule)


def _runs_on(spec: StudySpec, catalog: Catalog, source: str) -> None:
    """The study's engine profile runs on every GPU it may place (TensorRT-LLM on NVIDIA's, ATOM on
    AMD's): a study on MI355X had been priced as TensorRT-LLM by the default ``engine = "trt"``."""
    from dse.perf.frameworks import engine_vendor_problem

    hardware = {
        catalog.hardware(h).id: catalog.hardware(h).vendor for h in (*spec.hardware, *spec.sweep.hardware)
    }
    why = None if spec.engine is None else engine_vendor_problem(spec.engine, hardware)
    if why is not None:
        raise InputError(source, "engine", f"must run on the study's hardware: {why}", spec.engine)


def _priced(spec: StudySpec, catalog: Catalog, source: str) -> None:
    """Every hardware the study may place has a price at its tier where the placement or an
    objective needs one (an objective other than GPUs first, a budget, or an objective in dollars
    after GPUs): a hardware without one fails here, before the run makes its folder, not in its
    first trial. (GPUs first and $/M tokens second had run: the price-less GPU's designs, without
    a cost, were the best design but on no front.)"""
    dollars = [n for n in spec.objectives.names if n in METRICS and METRICS[n].unit.startswith("$")]
    if spec.objectives.names[0] == "gpus" and spec.limits.budget_usd_hour is None and not dollars:
        return
    field = f"usd_per_gpu_hour_{spec.price_tier}"
    named = [(f"hardware[{i}]", h) for i, h in enumerate(spec.hardware)]
    named += [(f"sweep.hardware[{i}]", h) for i, h in enumerate(spec.sweep.hardware)]
    for where, h in named:
        if getattr(catalog.hardware(h).prices, field) is None:
            rule = f"has no {spec.price_tier} price in the catalog; choose another price_tier or count GPUs"
            raise InputError(source, where, rule, h)


def catalog_entries(spec: StudySpec, catalog: Catalog) -> dict[str, dict[str, Any]]:
    """The numbers the study's trials run with: each hardware entry (variants included) and model
    entry it may use, by id, as plain values without the entries' words (names, sources, notes).
    A run stores them, and a resumed run or a worker whose catalog gives other numbers is refused
    (:func:`dse.study.storage.open_stored`): its trials would be priced another way."""

    hardware = [catalog.hardware(h) for h in (*spec.hardware, *spec.sweep.hardware)]
    models = [catalog.model(m) for m in (spec.model, *spec.sweep.model)]
    return {
        "hardware": {h.id: entry_numbers(h) for h in hardware},
        "models": {m.id: entry_numbers(m) for m in models},
    }


def with_catalog_ids(spec: StudySpec, catalog: Catalog) -> StudySpec:
    """``spec`` as a run stores it: its model and hardware named by ``catalog``'s ids (a study
    catalog: variants are their own ids), and its default shapes those its model runs
    (:func:`model_shapes`). An alias, or an id in another case, is the same entry, and the trials'
    parameters name it as the placements do (``dgx-b200`` in one table and ``b200`` in the other
    once; a model's alias had made a resumed run another study); and the engine and precision it
    leaves out filled in (:meth:`StudySpec.served_by`)."""
    hardware = tuple(dict.fromkeys(catalog.hardware(h).id for h in spec.hardware))
    # (a swept model stays as written: a grid's stored points name it so, and a stored grid read
    # with the ids would run its points again)
    swept = replace(spec.sweep, hardware=tuple(catalog.hardware(h).id for h in spec.sweep.hardware))
    # a variant's base by id, as the points name it: one based on an alias had lost its what-if
    # comparison (the report matched its base against the points' ids)
    variants = tuple(replace(v, base=catalog.hardware(v.base).id) for v in spec.variants)
    named = replace(
        spec,
        model=catalog.model(spec.model).id,
        hardware=hardware,
        sweep=swept,
        variants=variants,
    )
    return model_shapes(named.served_by(catalog), catalog)


def model_shapes(spec: StudySpec, catalog: Catalog) -> StudySpec:
    """A side whose shapes are the default list keeps those its model runs on some hardware of
    the study; where it runs none of them (a dense model: each has expert parallelism), the shapes
    ``dse place`` tries on that hardware. A dense model's study had been refused for a default
    shape it never wrote (EP 8 on a model without experts). A grid that sweeps the model keeps
    the list (each point says what its model cannot run)."""
    if spec.is_grid and spec.sweep.model:
        return spec
    model = catalog.model(spec.model)
    hardware = [catalog.hardware(h) for h in dict.fromkeys((*spec.hardware, *spec.sweep.hardware))]

    def fitted(shapes: tuple[str, ...], default: tuple[str, ...]) -> tuple[str, ...]:
        if shapes != default:
            return shapes
        kept = tuple(s for s in shapes if unrunnable(parse_shape(s), hardware, model) is None)
        return kept or tuple(dict.fromkeys(p.label() for h in hardware for p in parallel_grid(h, model)))

    s = spec.search
    search = replace(
        s,
        prefill=replace(s.prefill, shapes=fitted(s.prefill.shapes, PrefillSearch().shapes)),
        decode=replace(s.decode, shapes=fitted(s.decode.shapes, DecodeSearch().shapes)),
    )
    return replace(spec, search=search)


def _resolves(lookup: Callable[[str], object], name: str) -> bool:
    try:
        lookup(name)
    except InputError:
        return False
    return True


CONTEXT_AXES = ("model", "input_tokens", "output_tokens", "cached_prefix_tokens")
"""The grid axes that set how long a request's context grows, and the window it must fit."""


def _fits_context(spec: StudySpec, catalog: Catalog, source: str) -> None:
    """The study's requests fit its model's context window. A grid point whose swept lengths or
    model do not is an infeasible point, with the reason (``build_candidates``), but a swept value
    that fits at no point of the grid is bad input: 400,000 cached tokens swept on DeepSeek-V3
    had run the grid, stored and reported it, and ended in exit 3."""
    axes = {k: v for k, v in spec.sweep.axes().items() if k in CONTEXT_AXES} if spec.is_grid else {}
    if not axes:
        model = catalog.model(spec.model)
        broken = spec.workload.context_problem(model.max_context, model.id)
        if broken is not None:
            key, rule, value = broken
            raise InputError(source, f"workload.{key}", rule, value)
        return
    # each swept value: "" untried, None fits at some point, else a rule it breaks at every point
    fits: dict[tuple[str, Any], str | None] = {(k, v): "" for k, values in axes.items() for v in values}
    for values in itertools.product(*axes.values()):
        point = dict(zip(axes, values, strict=True))
        lengths: dict[str, Any] = {k: float(v) for k, v in point.items() if k != "model"}
        model = catalog.model(str(point.get("model", spec.model)))
        broken = replace(spec.workload, **lengths).context_problem(model.max_context, model.id)
        for axis_value in point.items():
            if broken is None:
                fits[axis_value] = None
            elif fits[axis_value] == "":
                fits[axis_value] = broken[1]
    for (axis, value), broke in fits.items():
        if broke:
            raise InputError(source, f"sweep.{axis}", f"{broke} at some point of the grid", value)


def runnable_shapes(spec: StudySpec, catalog: Catalog, source: str | None = None) -> None:
    """Each shape the search lists runs on some hardware of the study (``catalog``: the study's,
    with its variants), as ``dse place --shapes`` checks it: a shape none can run would only spend
    trials. Checked before a run, not where stored results are read (a study stored before a rule
    stays readable). A grid that sweeps the model is checked point by point."""
    source = source or f"study {spec.name}"
    if spec.is_grid and spec.sweep.model:
        return
    spec = model_shapes(spec, catalog)
    model = catalog.model(spec.model)
    hardware = [catalog.hardware(h) for h in dict.fromkeys((*spec.hardware, *spec.sweep.hardware))]
    s = spec.search
    sides = (("prefill", s.prefill.shapes), ("midfill", s.midfill.shapes), ("decode", s.decode.shapes))
    for side, shapes in sides:
        for i, label in enumerate(shapes):
            if (why := unrunnable(parse_shape(label), hardware, model)) is not None:
                rule = f"no hardware of the study can run it: {why}"
                raise InputError(source, f"search.{side}.shapes[{i}]", rule, label)


def runnable_topologies(spec: StudySpec, catalog: Catalog, source: str | None = None) -> None:
    """Each topology the search lists can serve the study's model: one that splits the experts
    from attention needs routed experts, and a dense model's trials in it would only be
    infeasible; and so must ``mtp = true``, whose drafts need the model's MTP layers. A grid
    that sweeps the model is checked point by point (an infeasible point with the reason:
    :func:`dse.placement.candidates.build_candidates`)."""
    if spec.is_grid and spec.sweep.model:
        return
    model = catalog.model(spec.model)
    if spec.mtp and (why := model.no_mtp()) is not None:  # its drafts: no engine launches them
        raise InputError(source or f"study {spec.name}", "mtp", why, True)
    if spec.precision == "fp4" and (why := model.fp4_problem()) is not None:  # fp8's figures, labelled fp4
        raise InputError(source or f"study {spec.name}", "precision", why, "fp4")
    if model.moe is not None:
        return
    for i, name in enumerate(spec.search.topologies):
        if Topology(name).splits_experts:
            rule = f"needs a model with routed experts to split from attention ({model.id} has none)"
            raise InputError(source or f"study {spec.name}", f"search.topologies[{i}]", rule, name)


def _known(lookup: Callable[[str], T], name: str, source: str, field: str) -> T:
    try:
        return lookup(name)
    except InputError as exc:
        raise InputError(source, field, exc.rule, name) from None
