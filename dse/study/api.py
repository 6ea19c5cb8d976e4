"""The Python API of studies: load, change objectives, run, read results as polars tables.

The README's "Python" section shows it whole: a study loaded, an objective of one's own added, a
run into its own folder and its tables read (``tests/test_docs_examples.py`` runs it as shown).
"""

from __future__ import annotations

import numbers
import os
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import optuna
import polars as pl

from dse.catalog import Catalog, load_catalog
from dse.errors import InputError, typed_arg
from dse.metrics import METRICS
from dse.perf.params import PerfParams, load_params, params_from_dict, params_to_dict
from dse.plain import plain
from dse.study.export import export_all
from dse.study.faults import file_in_the_way
from dse.study.objectives import MetricFn, ObjectiveDef
from dse.study.results import (
    TrialsRead,
    best_of,
    designed_trials,
    kv_tiers_frame,
    pareto_frame,
    placements_frame,
    sim_timeseries_frame,
    trials_frame,
)
from dse.study.spec import StudySpec, read_study, spec_record, study_path
from dse.study.storage import (
    calibration_change,
    catalog_change,
    default_storage,
    open_storage,
    open_study,
    redact,
    sqlite_path,
    table_names,
)
from dse.study.variants import catalog_entries, study_catalog, unused_variant, with_catalog_ids

if TYPE_CHECKING:
    from collections.abc import Callable

    from dse.study.runner import RunStats

Folder = Path | str
"""A folder as the Python API takes it: a path, or a string naming one."""


def _checked_spec(spec: StudySpec) -> None:
    """A spec made in Python (``dataclasses.replace`` of a loaded one) held to the rules of a study
    file: a sampler "bogus" had run TPE, a name "a=b" had run, a topology "sideways" or a reversed
    batch range had failed with a traceback after the run made its database."""
    from dse.typed_data import build

    build(StudySpec, _given(plain(spec)), source="spec")


def _given(x: Any) -> Any:
    """``x`` without the keys of its tables that are None: left out, as a study file leaves them."""
    if isinstance(x, dict):
        return {k: _given(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_given(v) for v in x]
    return x


@dataclass(frozen=True)
class Study:
    """A study to run or read: its resolved spec and its objectives (the spec's metrics, or
    functions of a trial's metrics added with :meth:`with_objective`). Immutable: each ``with_*``
    gives a new study."""

    spec: StudySpec
    objectives: tuple[ObjectiveDef, ...] = ()
    # the study file, which a run's errors name (an unknown id, a shape no hardware runs)
    source: str | None = field(default=None, compare=False)
    # settings of the study file no trial would use (dse.study.spec.idle_settings), as refusals:
    # a run refuses them, the results of a run made before their rule are read with them named
    idle: tuple[InputError, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        """Without objectives (``Study(spec)``), those its ``[objectives] names`` lists: a run had
        optimised them and then failed on its results' none (``IndexError``). Objectives of
        another kind (a metric's name as a string) are bad input: a run had written its folder
        and failed with ``AttributeError``."""
        typed_arg(self.spec, StudySpec, "spec", optional=False)
        _checked_spec(self.spec)
        if not isinstance(self.objectives, tuple | list) or not all(
            isinstance(o, ObjectiveDef) for o in self.objectives
        ):
            rule = "must be a tuple of ObjectiveDef (or use Study.with_objective(NAME) for a metric)"
            raise InputError("objectives", "", rule, self.objectives)
        object.__setattr__(self, "objectives", tuple(self.objectives))
        for o in self.objectives:  # ("sideways" had failed as a stored study's other directions)
            if o.direction not in ("minimize", "maximize"):
                raise InputError(
                    "objectives", f"{o.name}.direction", "must be minimize or maximize", o.direction
                )
        names = [o.name for o in self.objectives]
        if (twice := next((n for n in names if names.count(n) > 1), None)) is not None:
            raise InputError("objectives", "name", "must not name an objective twice", twice)
        if not self.objectives:
            spec_objectives = tuple(ObjectiveDef.metric(n) for n in self.spec.objectives.names)
            object.__setattr__(self, "objectives", spec_objectives)

    @classmethod
    def load(cls, name_or_path: str | Path) -> Study:
        """A shipped study by name (``studies/NAME.toml``) or a study file by path, validated, with
        the objectives its ``[objectives] names`` lists; bad input (:class:`dse.errors.InputError`)
        names the file, the field and the rule, here and when the study runs. A setting no trial
        would use (``returning_share = 0`` beside a cached prefix, ``sampler`` in a grid study: the
        rules of :func:`dse.study.spec.idle_settings`) is held in :attr:`idle` and refused by
        :meth:`run`, not here: the results of a run made before such a rule are still read."""
        if not isinstance(name_or_path, str | os.PathLike):  # None had failed inside pathlib
            raise InputError(
                "name_or_path", "", "must be a study's name or a study file's path", name_or_path
            )
        path = study_path(name_or_path)
        idle: list[InputError] = []
        spec = read_study(path, idle=idle)
        return cls(spec, tuple(ObjectiveDef.metric(n) for n in spec.objectives.names), str(path), tuple(idle))

    def refuse_idle(self) -> None:
        """Bad input for the first setting of the study file no trial would use (:attr:`idle`):
        a new run, or one resumed, takes none."""
        if self.idle:
            raise self.idle[0]

    def with_objective(
        self,
        name: str,
        fn: MetricFn | None = None,
        direction: Literal["minimize", "maximize"] | None = None,
        *,
        replace_all: bool = True,
    ) -> Study:
        """A study whose objective is ``fn(metrics)`` (or the metric ``name`` when ``fn`` is None),
        replacing the current objectives or added to them. A function's direction defaults to
        minimize; a metric's is its own (another is refused). A function may not take a metric's
        name (its values would pass for the metric's in the stored study and its exports), nor an
        objective's name the study already has; it must be a function of one argument (the
        trial's metrics, a mapping), checked here, before a run writes anything. It returns a
        number, or None for no value (nan and infinities are none too, and a run warns of them
        once); what it raises stops a run with one error naming it and the trial
        (:class:`dse.study.objectives.ObjectiveError`)."""
        if direction not in (None, "minimize", "maximize"):
            raise InputError("objective", f"{name}.direction", "must be minimize or maximize", direction)
        typed_arg(replace_all, bool, "replace_all", optional=False)  # "no" had replaced them all
        if fn is not None:
            new = ObjectiveDef.custom(name, fn, direction or "minimize")
        else:
            new = ObjectiveDef.metric(name)
        if direction is not None and direction != new.direction:
            rule = f"is {new.direction}d by its metric's definition, not {direction}d"
            raise InputError("objective", f"{name}.direction", rule, direction)
        kept = () if replace_all else self.objectives
        if any(o.name == name for o in kept):
            raise InputError("objective", "name", "is already an objective of the study", name)
        return replace(self, objectives=(*kept, new))

    def with_stored_objectives(self, *, out: Folder = Path("runs"), storage: str | None = None) -> Study:
        """This study with the objectives (names and directions) its stored study holds (at
        ``storage``, default the SQLite file under ``out``), to read it (``results``; the CLI's
        export, report and deploy): the ranks and columns of its trials, whatever the study file
        names. A study run with an objective function reads back without the function, which
        only a run calls. Unchanged where nothing is stored there (``results`` says so; nothing
        is created) or the storage holds no objectives."""
        out, storage = folder_arg(out), storage_arg(storage)
        url = storage or default_storage(out, self.spec)
        path = sqlite_path(url)
        if path is not None and not path.exists():
            return self  # not created by reading it: results says there is no run
        if (tables := table_names(url)) is not None and "studies" not in tables:
            return self  # no Optuna tables, which opening would create: results says there is no run
        store = open_storage(url)
        try:
            study_id = store.get_study_id_from_name(self.spec.name)
        except KeyError:
            return self
        names = store.get_study_user_attrs(study_id).get("objectives")
        directions = store.get_study_directions(study_id)
        held = [o.name for o in self.objectives]
        if not isinstance(names, list) or len(names) != len(directions) or names == held:
            return self
        objectives = []
        for name, d in zip(names, directions, strict=True):
            maximised = d == optuna.study.StudyDirection.MAXIMIZE
            direction: Literal["minimize", "maximize"] = "maximize" if maximised else "minimize"
            metric = METRICS.get(str(name))
            if metric is not None and metric.direction == direction:
                objectives.append(ObjectiveDef.metric(str(name)))
            else:  # a function's name: its values are stored, the function is not needed to read them
                objectives.append(ObjectiveDef(str(name), direction))
        return replace(self, objectives=tuple(objectives))

    def run(
        self,
        *,
        trials: int | None = None,
        out: Folder = Path("runs"),
        storage: str | None = None,
        seed: int | None = None,
        progress: bool = False,
        catalog: Catalog | None = None,
        params: PerfParams | None = None,
        then: Callable[[StudyResults], None] | None = None,
    ) -> StudyResults:
        """Run (or resume) the study until it holds ``trials`` complete trials (the total, as
        ``dse study run --trials``: trials stored before count; default the study file's budget,
        a grid study's points); ``then`` gets its results while the run still holds the study
        (what it writes from them, another run waits for). ``out`` is a folder (a path or a
        string); ``trials`` and ``seed`` whole numbers; ``progress`` a bool; ``catalog`` and
        ``params`` a :class:`~dse.catalog.Catalog` and :class:`~dse.perf.params.PerfParams`
        (default: the shipped ones). Arguments of the wrong kind are bad input naming them,
        before anything is written."""
        from dse.study.runner import run  # the solver and the simulator: only a run imports them

        self.refuse_idle()
        # an objective without a function that is no metric: its trials had been stored without a
        # value, in silence (a study read back with with_stored_objectives holds names alone)
        if named := next((o for o in self.objectives if o.fn is None and o.name not in METRICS), None):
            rule = (
                "has no function to value the trials with and is no metric (a study read with "
                "with_stored_objectives holds its objectives' names alone): give it with "
                "with_objective(name, fn)"
            )
            raise InputError("objectives", named.name, rule)
        out, storage = folder_arg(out), storage_arg(storage)
        typed_arg(catalog, Catalog, "catalog")  # checked before a run writes anything
        typed_arg(params, PerfParams, "params")
        typed_arg(progress, bool, "progress", optional=False)  # "no" had drawn the bar
        if then is not None and not callable(then):  # it had failed after every trial had run
            raise InputError("then", "", "must be a function of the results, or None", then)

        done: list[StudyResults] = []

        def after(study: optuna.Study, stats: RunStats, spec: StudySpec) -> None:
            # the spec as the run stored it (ids for aliases), as results() reads it: a variant based
            # on an alias had lost its what-if comparison in the report a run writes
            res = StudyResults(spec, self.objectives, study, stats, catalog)
            priced(res, params, where=redact(storage or default_storage(out, self.spec)))
            done.append(res)
            if then is not None:
                then(res)

        run(
            self.spec,
            out=out,
            storage=storage,
            trials=trials,
            seed=seed,
            objectives=list(self.objectives),
            progress=progress,
            catalog=catalog,
            params=params,
            then=after,
            study_file=self.source,
        )
        return done[0]

    def results(
        self, *, out: Folder = Path("runs"), storage: str | None = None, catalog: Catalog | None = None
    ) -> StudyResults:
        """The results stored by an earlier run, read with ``catalog`` (default: the shipped one
        and ``DSE_CATALOG_DIR``'s); bad input when there is no result. Where that catalog's
        numbers differ from those the trials ran with, ``catalog_note`` says which; settings of
        the study no trial used (a run made before the rule that refuses them) are in ``idle``."""
        out, storage = folder_arg(out), storage_arg(storage)
        typed_arg(catalog, Catalog, "catalog")
        url = storage or default_storage(out, self.spec)
        if (db := sqlite_path(url)) is not None and not db.exists():
            if storage:  # the file the user named, not the run folder's, which is not read
                rule = f"names a SQLite file that does not exist ({db}): run the study first"
                raise InputError("--storage", "url", rule, redact(url))
            blocked = file_in_the_way(out)
            if blocked is not None:  # it had said "study.db: does not exist", naming no flag
                raise InputError("out", "", f"must be a folder ({blocked} is a file)", str(out))
            raise InputError(str(out / self.spec.name), "study.db", "does not exist: run the study first")
        # a database without Optuna's tables, which opening it creates: a reader leaves it as it was
        tables = table_names(url)
        held = (
            []
            if tables is not None and "studies" not in tables
            else optuna.study.get_all_study_names(storage=open_storage(url))
        )
        if self.spec.name not in held:  # reading must not create an empty study in someone's database
            others = f" (it holds {', '.join(sorted(held))})" if held else " (it holds none)"
            why = f"is not stored here{others}: run the study first"
            raise InputError(redact(url), "study", why, self.spec.name)
        stored = self.with_stored_objectives(out=out, storage=storage).objectives
        if [o.name for o in stored] != [o.name for o in self.objectives]:  # (a run says: another out=)
            rule = (
                f"the stored study optimises {[o.name for o in stored]}: read it as stored with "
                f"Study.load({self.spec.name!r}).with_stored_objectives(out=...).results(out=...)"
            )
            raise InputError(redact(url), "objectives", rule, [o.name for o in self.objectives])
        base = catalog if catalog is not None else load_catalog()  # the results keep it for their own
        ours = study_catalog(self.spec, base, source=self.source)
        spec = with_catalog_ids(self.spec, ours)  # as the run stored it
        # read by names alone: a function's code is a run's to record and compare (reading had stored
        # it, a write, in a study stored before the digest existed)
        names_only = [ObjectiveDef(o.name, o.direction) for o in self.objectives]
        study = open_study(spec, url, names_only, spec.seed)
        unused = unused_variant(self.spec, ours, self.source)
        res = StudyResults(
            spec, self.objectives, study, None, base, idle=(*self.idle, *filter(None, [unused]))
        )
        changed = catalog_change(study, catalog_entries(spec, ours))
        if changed is not None:  # read all the same: the trials' own records hold what they found
            key, was, now = changed
            res.catalog_note = (
                f"{key} is {now!r} here but the trials ran with {was!r}: the re-simulated series, "
                "shadow prices and launch files use this catalog's numbers (read with the one they "
                "ran with: --catalog-dir, or catalog= from Python)"
            )
        changed = calibration_change(study.user_attrs.get("calibration"), params_to_dict(load_params()))
        if changed is not None:
            key, was, now = changed
            res.calibration_note = (
                f"{key} is {now!r} in the loaded calibration but the trials ran with {was!r}: the "
                "shadow prices, re-simulated series and launch files use the calibration stored with "
                "the study, as its trials did"
            )
        return res


def folder_arg(out: object, arg: str = "out") -> Path:
    """``out`` (a ``pathlib.Path`` or a string) as a path; anything else is bad input naming ``arg``
    (a string had failed inside with Python's bare ``TypeError``)."""
    if isinstance(out, str | os.PathLike) and str(out):
        return Path(out)
    raise InputError(arg, "", "must be a folder: a pathlib.Path or a non-empty string", out)


def storage_arg(storage: object) -> str | None:
    """``storage`` as a storage URL (None, or empty: the run folder's SQLite file); a path, or a
    string that is no URL, is bad input saying how to write it (a ``Path`` had failed with
    ``AttributeError``)."""
    if storage is None or storage == "":
        return None
    if isinstance(storage, str) and "://" in storage:
        return storage
    path = os.fspath(storage) if isinstance(storage, str | os.PathLike) else None
    # a path names its file in the example; one with an '@' is rather a server's, password and all
    example = f"sqlite:///{Path(path).absolute()}" if path and "@" not in path else "sqlite:///PATH"
    server = "postgresql://user@host/db"
    rule = f"must be a storage URL string: {example} for a SQLite file, {server} for a server"
    raise InputError("storage", "", rule, redact(path) if path is not None else storage)


def _trial_numbers(trials: object, complete: list[int], designed: set[int]) -> list[int]:
    """``trials`` as trial numbers of the study, each one of its ``complete`` trials, once, and
    one of those with a stored design to simulate (``designed``): a trial listed twice had its
    series twice, so a sum over it doubled, and one without a design had none, silently."""
    listed = list(trials) if isinstance(trials, list | tuple | range) else None
    if listed is None or any(isinstance(n, bool) or not isinstance(n, numbers.Integral) for n in listed):
        raise InputError("trials", "", "must be a list of trial numbers (ints)", trials)
    held = set(complete)
    missing = next((n for n in listed if n not in held), None)
    if missing is not None:
        span = f"{len(held)}, from {min(held)} to {max(held)}" if held else "none"
        rule = f"has {missing}, which is not a complete trial of the study (complete trials: {span})"
        raise InputError("trials", "", rule, listed)
    twice = next((n for i, n in enumerate(listed) if n in listed[:i]), None)
    if twice is not None:
        raise InputError("trials", "", f"has {twice} twice: list each trial once", listed)
    bare = next((n for n in listed if n not in designed), None)
    if bare is not None:
        why = "no placement, or stored before records kept one"
        rule = f"has {bare}, a trial without a design to simulate ({why})"
        raise InputError("trials", "", rule, listed)
    return [int(n) for n in listed]


def priced(res: StudyResults, params: PerfParams | None = None, *, where: str) -> None:
    """Shadow prices of the best trial, stored with the study (what a run ends with: a lone run,
    and each worker once the study holds its budget). Ctrl-C here is the run's interruption,
    which says what ``where`` (the storage, as the run names it) holds."""
    from dse.study.faults import StudyInterrupted
    from dse.study.prices import pricing_context, store_best_prices  # the solver: only a run imports it

    try:
        store_best_prices(res, pricing_context(res, params or res.params))
    except KeyboardInterrupt:
        done = len(res.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))
        raise StudyInterrupted(done, done, where, "best design's shadow prices") from None


@dataclass
class StudyResults:
    """A study's trials as polars tables, the columns of the Parquet exports (docs/schema.md):
    :attr:`trials`, :attr:`pareto`, :attr:`placements`, :attr:`kv_tiers` and
    :meth:`sim_timeseries`; :meth:`export` writes them. What :meth:`Study.run` returns and
    :meth:`Study.results` reads back."""

    spec: StudySpec
    objectives: tuple[ObjectiveDef, ...]
    study: optuna.Study
    stats: RunStats | None
    _catalog: Catalog | None = field(default=None, repr=False)
    # read under a catalog whose numbers differ from those the trials ran with: which, in words
    catalog_note: str | None = None
    # read where the loaded calibration is not the one the trials ran with: which number differs
    calibration_note: str | None = None
    # settings of the study no trial used, each as the refusal a new run meets (read from a run
    # made before the rule; :attr:`Study.idle`, and a what-if variant no trial ran on)
    idle: tuple[InputError, ...] = ()

    @property
    def names(self) -> list[str]:
        """The objectives' names, as their columns ``objective_<name>`` take them."""
        return [o.name for o in self.objectives]

    @cached_property
    def read(self) -> TrialsRead:
        """The study's trials, read from its storage once, when first needed: every table is
        built from these (workers may be adding trials meanwhile); :meth:`TrialsRead.note` says
        what was not finished then."""
        return TrialsRead(self.study)

    @cached_property
    def trials(self) -> pl.DataFrame:
        """One row per finished trial: its choices ``p_*``, metrics, constraints ``c_*``,
        ``feasible``, ``binding``, ``objective_<name>`` per objective, ``design``."""
        return trials_frame(self.read, self.names, self.spec.slo.percentile, self.spec.sweep.axes())

    @cached_property
    def pareto(self) -> pl.DataFrame:
        """The designs on the front of the objectives (feasible trials with a value for each), as
        :attr:`trials`' rows, best first on the first objective. A grid study's is empty (with
        the columns): each point is a question of its own, with its own traffic and hardware, so
        a front across them ranks unlike things; its answer is :attr:`trials`, a row per point."""
        if self.spec.is_grid:
            return self.trials.clear()
        return pareto_frame(self.trials, self.names, [o.direction for o in self.objectives])

    @cached_property
    def placements(self) -> pl.DataFrame:
        """One row per trial and pool: role, hardware, shape, instances, GPUs, HBM, load, $/hour."""
        return placements_frame(self.read)

    @cached_property
    def kv_tiers(self) -> pl.DataFrame:
        """One row per trial, KV class of returning turns and tier: the share resting there."""
        return kv_tiers_frame(self.read)

    @property
    def ranking(self) -> list[tuple[str, str]]:
        """The objectives as :func:`~dse.study.results.ranked` takes them: ``(name, direction)``."""
        return [(o.name, o.direction) for o in self.objectives]

    def best_trial(self) -> int | None:
        """The feasible trial best on the first objective, among those with a value for it (a
        function's None, nan or infinity is none; among equals, the best on the later objectives,
        then by :data:`~dse.study.results.TIE_BREAK`, then the first); None when no trial has one."""
        return best_of(self.trials, *self.ranking)

    def sim_timeseries(self, trials: list[int] | None = None) -> pl.DataFrame:
        """Re-simulated trajectories of ``trials`` (default: the first five of the front; a grid
        study's best point), each the number of a complete trial with a design, listed once (bad
        input names the first that is not)."""
        if trials is None:
            return self._front_series
        numbers = _trial_numbers(trials, self.trials["trial"].to_list(), designed_trials(self.read))
        return sim_timeseries_frame(self.read, numbers, self._cat(), self.params)

    @cached_property
    def _front_series(self) -> pl.DataFrame:
        if self.spec.is_grid:  # no front across a grid's points: its best point's design
            best = self.best_trial()
            front = [] if best is None else [best]
        else:
            front = self.pareto["trial"].unique(maintain_order=True).to_list()[:5]
        return sim_timeseries_frame(self.read, front, self._cat(), self.params)

    @cached_property
    def params(self) -> PerfParams:
        """The performance model's parameters the trials ran with, stored with the study by its
        first run: what its shadow prices, re-simulated series and launch files are computed
        with. A study stored before a run kept them holds none, and is read with the loaded
        calibration (``DSE_CALIBRATION``, else the shipped one)."""
        held = self.study.user_attrs.get("calibration")
        if held is None:
            return load_params()
        return params_from_dict(held, f"study {self.spec.name}: the calibration stored with it")

    def _cat(self) -> Catalog:
        """The catalog with the study's what-if variants."""
        return self._study_catalog

    @cached_property
    def _study_catalog(self) -> Catalog:
        return study_catalog(self.spec, self._catalog if self._catalog is not None else load_catalog())

    def tables(self) -> dict[str, pl.DataFrame]:
        """Every exported table by its name (``sim_timeseries``: the front's first five designs, a
        grid study's best point)."""
        return {
            "trials": self.trials,
            "pareto": self.pareto,
            "placements": self.placements,
            "kv_tiers": self.kv_tiers,
            "sim_timeseries": self.sim_timeseries(),
        }

    def export(self, out: Folder) -> list[Path]:
        """Parquet tables under ``out`` (a path or a string; hive partitions by study), atomically.
        Each file's ``dse.catalog`` metadata holds the catalog numbers its rows were computed
        with: the trials' (as they ran), but ``sim_timeseries``', simulated now with these
        results' catalog (:attr:`catalog_note` says where the two differ). ``dse.calibration``
        holds the performance model's numbers the trials were priced with (:attr:`params`, which
        the series is simulated with too; a study stored before runs kept them: the series' alone)."""
        out = folder_arg(out)
        catalog = self.study.user_attrs.get("catalog")  # the numbers the trials ran with
        simulated = catalog_entries(self.spec, self._cat())  # and those the series is simulated with
        tables = self.tables()
        return export_all(
            tables,
            out,
            self.spec.name,
            spec_record(self.spec),
            catalog,
            series_catalog=simulated,
            calibration=self.study.user_attrs.get("calibration"),
            series_calibration=params_to_dict(self.params),
        )
