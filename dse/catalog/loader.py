"""One loader for both catalogs: shipped folders first, then user folders that override by id."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from dse.catalog.hardware import Hardware
from dse.catalog.model import PUBLISHED_RTOL, Model
from dse.errors import InputError, UnknownIdError
from dse.paths import SHIPPED_HARDWARE, SHIPPED_MODELS, kernel_tables_root
from dse.typed_data import build, lower_id, read_toml

CATALOG_ENV = "DSE_CATALOG_DIR"
"""Environment variable naming extra catalog folders (``os.pathsep``-separated)."""


E = TypeVar("E", Hardware, Model)


@dataclass(frozen=True)
class Catalog:
    """The validated, frozen catalogs. Look entries up by id or alias."""

    hardware_by_id: Mapping[str, Hardware]
    models_by_id: Mapping[str, Model]
    files: Mapping[str, Path]
    # ids a user's folder replaced with an entry that differs from the shipped one (the calibration
    # measured the shipped entries, not these)
    edited: frozenset[str] = frozenset()

    def hardware(self, name: str) -> Hardware:
        return _lookup("hardware", name, self.hardware_by_id)

    def model(self, name: str) -> Model:
        return _lookup("model", name, self.models_by_id)

    def file_of(self, entry_id: str) -> Path:
        return self.files[entry_id]

    def numbers(self, model: str, hardware: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The numbers of the model's and each hardware's entry, by id (:func:`entry_numbers`):
        what a placement was made with, which `dse simulate --placement` checks its own against."""
        entries: list[Model | Hardware] = [self.model(model), *(self.hardware(h) for h in hardware)]
        return {e.id: entry_numbers(e) for e in entries}


# an entry's words, not its numbers: what a trial computes does not read them (not ``vendor``: it
# decides the engines a GPU runs, the default one and the cold start, and a copy of a B200 made
# "amd" had been called the B200 the runs measured, and simulated a TensorRT-LLM placement)
DOC_FIELDS = frozenset(
    {"name", "status", "sources", "aliases", "notes", "assumptions", "checkpoint", "published"}
)


def entry_numbers(entry: object) -> dict[str, Any]:
    """A catalog entry's numbers, as plain values without its words (:data:`DOC_FIELDS`)."""
    from dse.plain import plain  # numpy: not for a command's start-up

    return {k: v for k, v in plain(entry).items() if k not in DOC_FIELDS}


def _lookup(kind: str, name: str, entries: Mapping[str, E]) -> E:
    key = name.strip().lower()
    if key in entries:
        return entries[key]
    for entry in entries.values():
        if key in entry.aliases:
            return entry
    raise UnknownIdError(kind, name, list(entries))


def load_catalog(extra_dirs: Iterable[Path | str] = (), *, use_env: bool = True) -> Catalog:
    """Load the shipped catalogs, then each extra folder in order (later folders win by id).

    An extra folder holds ``hardware/*.toml`` and/or ``models/*.toml``. Folders named in the
    ``DSE_CATALOG_DIR`` environment variable come before ``extra_dirs``.
    """
    dirs: list[tuple[Path, Path]] = [(SHIPPED_HARDWARE, SHIPPED_MODELS)]
    env = os.environ.get(CATALOG_ENV, "") if use_env else ""
    named = [(raw, CATALOG_ENV) for raw in filter(None, env.split(os.pathsep))]  # where each was named:
    for raw, origin in [*named, *((raw, "") for raw in extra_dirs)]:  # an environment set long ago
        root = Path(raw)
        if not root.is_dir():
            raise InputError(str(root), origin, "catalog folder must exist and be a folder")
        if not any(next((root / kind).glob("*.toml"), None) for kind in ("hardware", "models")):
            # (a typo in the layout would otherwise leave the shipped entries in force, silently)
            rule = "catalog folder must hold hardware/*.toml or models/*.toml (none found)"
            raise InputError(str(root), origin, rule)
        if (stray := _stray_entry(root)) is not None:
            rule = (
                "is not read: a catalog folder's entries are hardware/*.toml and models/*.toml, directly "
                "in them (an entry elsewhere, or named otherwise, would leave the shipped entry in force, "
                "silently)"
            )
            raise InputError(str(stray), origin, rule)
        dirs.append((root / "hardware", root / "models"))
    hardware: dict[str, Hardware] = {}
    models: dict[str, Model] = {}
    files: dict[str, Path] = {}
    hw_files: dict[str, Path] = {}  # by kind: a model id may repeat a hardware id until refused
    model_files: dict[str, Path] = {}
    measured_at: dict[str, float] = {}  # a measured-kernel folder -> the HBM TB/s it ran at
    shipped: dict[str, object] = {}
    edited: set[str] = set()
    for hw_dir, model_dir in dirs:
        for path, entry in _load_folder(hw_dir, Hardware):
            if hw_dir == SHIPPED_HARDWARE and entry.measured_kernels:
                measured_at.setdefault(entry.measured_kernels, entry.hbm.bandwidth_tb_per_s)
            elif entry.measured_kernels:
                _check_kernel_folder(path, entry.measured_kernels)
            hardware[entry.id] = _measured_at(entry, measured_at)
            files[entry.id] = hw_files[entry.id] = path
            _note_edit(hw_dir == SHIPPED_HARDWARE, entry.id, hardware[entry.id], shipped, edited)
        for path, m in _load_folder(model_dir, Model):
            gap = m.published_gap()
            if gap is not None:
                key, published, derived = gap
                rule = (
                    f"must be within {PUBLISHED_RTOL:.0%} of what the architecture gives ({derived:,.4g}): "
                    "check the architecture's fields, or publish that figure for a model of your own"
                )
                raise InputError(str(path), f"published.{key}", rule, published)
            models[m.id] = m
            files[m.id] = model_files[m.id] = path
            _note_edit(model_dir == SHIPPED_MODELS, m.id, m, shipped, edited)
    if not hardware or not models:
        raise InputError(str(SHIPPED_HARDWARE.parent), "", "catalog folders hold no entries")
    for shared in sorted(set(hardware) & set(models)):
        _shared_id(shared, hw_files[shared], model_files[shared])
    _check_aliases("hardware", hardware, files)
    _check_aliases("model", models, files)
    _check_across(hardware, models, files)
    return Catalog(
        MappingProxyType(hardware), MappingProxyType(models), MappingProxyType(files), frozenset(edited)
    )


def _note_edit(
    is_shipped: bool, entry_id: str, entry: Hardware | Model, shipped: dict[str, object], edited: set[str]
) -> None:
    """Keep the shipped entries, and note an id a later folder replaces with an entry of other
    numbers than the shipped one's (one that restores the shipped entry, or changes only its words
    or prices, is no edit)."""
    if is_shipped:
        shipped[entry_id] = entry
    elif entry_id in shipped and _unwritten(entry, shipped[entry_id]) != shipped[entry_id]:
        edited.add(entry_id)
    else:
        edited.discard(entry_id)


# what the measured runs do not depend on: an entry's words and its prices (a B200 at your own
# price, the example of docs/catalogs.md, is the B200 the runs measured)
NOT_MEASURED = DOC_FIELDS | {"prices"}


def _unwritten(entry: Hardware | Model, shipped: object) -> Hardware | Model:
    """``entry`` with the shipped entry's words and prices in place of its own (a model of a
    hardware's id, or the reverse, as it is: another entry, refused once all are loaded)."""
    if type(shipped) is not type(entry):
        return entry
    own = {f.name for f in fields(entry)} & NOT_MEASURED
    return replace(entry, **{name: getattr(shipped, name) for name in own})


def _check_kernel_folder(path: Path, system: str) -> None:
    """A user's entry names measured kernels by a GPU folder of the tables: a slip (``b200`` for
    ``b200_sxm``) had priced every op from the datasheet, said only in ``dse predict --json``. Not
    checked where the tables are not installed (every op is then priced from the datasheet)."""
    root = kernel_tables_root()
    if root is None:
        return
    folders = sorted(d.name for d in root.iterdir() if d.is_dir())
    if system not in folders:
        rule = f"must name a GPU folder of the measured kernel tables ({', '.join(folders)})"
        raise InputError(str(path), "measured_kernels", rule, system)


def _measured_at(h: Hardware, measured_at: Mapping[str, float]) -> Hardware:
    """A user's entry that takes a shipped GPU's measured kernels at another HBM bandwidth (a
    what-if override) prices them as a variant does: measured at the shipped GPU's bandwidth, and
    scaled to its own (:mod:`dse.perf.kernels`). Without this its memory-bound kernels kept the
    measured times, and more bandwidth could even predict less."""
    at = measured_at.get(h.measured_kernels)
    if at is None or h.measured_hbm_tb_per_s is not None or at == h.hbm.bandwidth_tb_per_s:
        return h
    return replace(h, measured_hbm_tb_per_s=at)


def _stray_entry(root: Path) -> Path | None:
    """A TOML file of ``root`` in a folder named like an entries' folder but not one (``hardwares/``,
    ``model/``, ``Hardware/``) or nested in one (``hardware/x/``), an entries' file whose suffix is
    not ``.toml`` in lower case (``h200-sxm.TOML``), or an entry (a table with an ``id``) at the
    folder's root beside them: each had been ignored, the shipped entry left in force. (Another
    TOML file at the root, a study file kept beside its catalog, is not an entry.)"""
    kinds = (root / "hardware", root / "models")
    for kind in kinds:
        cased = [p for p in sorted(kind.glob("*")) if p.suffix.lower() == ".toml" and p.suffix != ".toml"]
        if cased:
            return cased[0]
    for path in sorted(root.glob("*.toml")):
        try:
            entry = "id" in read_toml(path)
        except InputError:  # not TOML: not an entry either
            entry = False
        if entry:
            return path
    for path in sorted(root.rglob("*.toml")):
        folder = path.parent
        if folder in kinds:
            continue
        named_so = folder.name.lower().rstrip("s") in ("hardware", "model")
        if named_so or any(k in folder.parents for k in kinds):
            return path
    return None


def _load_folder(folder: Path, cls: type[E]) -> list[tuple[Path, E]]:
    if not folder.is_dir():
        return []
    out = []
    for path in sorted(folder.glob("*.toml")):
        entry = build(cls, read_toml(path), source=str(path))
        if entry.id != path.stem:
            rule = f"must equal the file name '{path.stem}'"
            if path.stem != path.stem.lower():  # no id can: it had asked for one it then refused
                rule += f" (ids are lower case: name the file '{path.stem.lower()}{path.suffix}')"
            raise InputError(str(path), "id", rule, entry.id)
        out.append((path, entry))
    return out


def _check_aliases(kind: str, entries: Mapping[str, E], files: Mapping[str, Path]) -> None:
    owner: dict[str, str] = {i: i for i in entries}
    for entry in entries.values():
        for i, alias in enumerate(entry.aliases):
            if (broken := lower_id(alias)) is not None:
                raise InputError(str(files[entry.id]), "aliases", broken, alias)
            if alias == entry.id or alias in entry.aliases[:i]:
                said = "the entry's own id" if alias == entry.id else "listed twice"
                raise InputError(str(files[entry.id]), "aliases", f"must name it otherwise: {said}", alias)
            other = owner.get(alias, entry.id)
            if other != entry.id and _shipped(files[entry.id]) and not _shipped(files[other]):
                # a user's entry takes a shipped entry's alias: the user's file is the one to change
                field = "id" if other == alias else "aliases"
                rule = f"must not repeat an alias of the shipped {kind} '{entry.id}' ({files[entry.id]})"
                raise InputError(str(files[other]), field, rule, alias)
            if other != entry.id:
                raise InputError(
                    str(files[entry.id]),
                    "aliases",
                    f"must not repeat an id or alias of {kind} '{owner[alias]}' ({files[owner[alias]]})",
                    alias,
                )
            owner[alias] = entry.id


def _shared_id(name: str, hw_file: Path, model_file: Path) -> None:
    """Refuse a model and a hardware entry of one id, naming the user's file: the model's, unless
    the model is shipped and the hardware is the user's."""
    if _shipped(model_file) and not _shipped(hw_file):
        rule = f"must not repeat the id of the shipped model '{name}' ({model_file})"
        raise InputError(str(hw_file), "id", rule, name)
    raise InputError(str(model_file), "id", "must not repeat the id of a hardware entry", name)


def _check_across(
    hardware: Mapping[str, Hardware], models: Mapping[str, Model], files: Mapping[str, Path]
) -> None:
    """No model is named (by its id or an alias) as a hardware is: `dse catalog show NAME` and
    the error messages would find the hardware, and the model could not be shown by that name.
    The user's file is the one named, whichever of the two it is."""
    hw_of = {name: h.id for h in hardware.values() for name in (h.id, *h.aliases)}
    for m in models.values():
        for field, name in (("id", m.id), *(("aliases", a) for a in m.aliases)):
            if name not in hw_of:
                continue
            h = hw_of[name]
            if _shipped(files[m.id]) and not _shipped(files[h]):
                own = "id" if name == h else "aliases"
                rule = f"must not repeat an id or alias of the shipped model '{m.id}' ({files[m.id]})"
                raise InputError(str(files[h]), own, rule, name)
            rule = f"must not repeat an id or alias of hardware '{h}' ({files[h]})"
            raise InputError(str(files[m.id]), field, rule, name)


def _shipped(path: Path) -> bool:
    return path.parent in (SHIPPED_HARDWARE, SHIPPED_MODELS)
