"""The fast path a study takes around Optuna's storage: a finished trial written in one
transaction must read back as what Optuna's own ``add_trial`` writes."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import optuna
import pytest
from conftest import TINY, Cli
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from dse.study.storage import StoredStudy, open_storage, write_finished

DISTS = {
    "topology": CategoricalDistribution(("aggregated", "disaggregated")),
    "batch": IntDistribution(1, 4096, log=True),
    "share": FloatDistribution(0.1, 0.5),
}


def _trials() -> list[optuna.trial.FrozenTrial]:
    start = datetime(2026, 11, 30, 1, 2, 3, 456789)
    made = [
        create_trial(
            state=TrialState.COMPLETE,
            values=[0.125, 3e5],
            params={"topology": "disaggregated", "batch": 405, "share": 0.3},
            distributions=DISTS,
            user_attrs={"record": {"metrics": {"gpus": 16.0, "ttft_s": None}, "pools": [{"role": "decode"}]}},
            system_attrs={"constraints": [0.0, -1.5]},
        ),
        create_trial(  # a trial without a design: the worst values, infinite
            state=TrialState.COMPLETE,
            values=[math.inf, -math.inf],
            params={"topology": "aggregated", "batch": 1, "share": 0.1},
            distributions=DISTS,
            user_attrs={"record": {"binding": "placement: no unit fits"}},
        ),
        create_trial(
            state=TrialState.FAIL,
            params={"topology": "aggregated"},
            distributions={"topology": DISTS["topology"]},
        ),
    ]
    for i, t in enumerate(made):
        t.datetime_start = start + timedelta(seconds=i)
        t.datetime_complete = start + timedelta(seconds=i, milliseconds=20)
    return made


def _created(url: str, directions: tuple[str, ...] = ("minimize",)) -> StoredStudy:
    storage = open_storage(url)
    study = optuna.create_study(storage=storage, study_name="s", directions=list(directions))
    return StoredStudy.of(study, storage, url)


def _stored(url: str, write) -> list[optuna.trial.FrozenTrial]:  # type: ignore[no-untyped-def]
    stored = _created(url, ("minimize", "maximize"))
    for t in _trials():
        write(stored, t)
    return optuna.load_study(study_name="s", storage=url).get_trials(deepcopy=False)


def test_a_trial_written_in_one_transaction_reads_back_as_optuna_writes_it(tmp_path: Path) -> None:
    ours = _stored(f"sqlite:///{tmp_path / 'ours.db'}", write_finished)
    theirs = _stored(f"sqlite:///{tmp_path / 'theirs.db'}", lambda s, t: s.study.add_trial(t))
    assert [t.number for t in ours] == [0, 1, 2]
    fields = (
        "number state values params distributions user_attrs system_attrs "
        "intermediate_values datetime_start datetime_complete"
    ).split()
    for a, b in zip(ours, theirs, strict=True):
        for f in fields:
            assert getattr(a, f) == getattr(b, f), f
    assert ours[1].values == [math.inf, -math.inf]


def test_a_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    stored = _created(url)
    bad = create_trial(value=1.0, params={"batch": 4}, distributions={"batch": DISTS["batch"]})
    bad.user_attrs["record"] = {"not json": object()}
    with pytest.raises(TypeError):
        write_finished(stored, bad)
    assert optuna.load_study(study_name="s", storage=url).get_trials() == []


def test_numbers_count_every_earlier_trial_and_the_record_is_merged(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    stored = _created(url)
    stored.study.ask()  # a running trial (number 0) and a failed one (number 1) come first
    failed = stored.study.ask()
    stored.study.tell(failed, state=TrialState.FAIL)
    done = create_trial(value=2.0, params={"batch": 8}, distributions={"batch": DISTS["batch"]})
    done.user_attrs["kept"] = 1
    write_finished(stored, done, {"record": {"metrics": {"gpus": 8.0}}})
    back = optuna.load_study(study_name="s", storage=url).get_trials()
    assert [t.number for t in back] == [0, 1, 2]
    assert back[2].user_attrs == {"kept": 1, "record": {"metrics": {"gpus": 8.0}}}


WRITER = """
import sys
import optuna
from optuna.distributions import IntDistribution
from optuna.trial import create_trial
from dse.study.storage import StoredStudy, write_finished

stored = StoredStudy.load(sys.argv[1], "s")
for i in range(int(sys.argv[2])):
    t = create_trial(value=float(i), params={"b": i}, distributions={"b": IntDistribution(0, 1000)})
    write_finished(stored, t, {"writer": sys.argv[3]})
"""


@pytest.mark.e2e
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_writers_sharing_a_storage_never_number_two_trials_alike(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "postgresql":
        url = str(request.getfixturevalue("postgres_url"))
        name = f"s-{tmp_path.name}"
    else:
        url, name = f"sqlite:///{tmp_path / 'x.db'}", "s"
    optuna.create_study(storage=open_storage(url), study_name=name)
    script = WRITER.replace('sys.argv[1], "s"', f'sys.argv[1], "{name}"')
    procs = [
        subprocess.Popen([sys.executable, "-c", script, url, "40", str(w)], stderr=subprocess.PIPE, text=True)
        for w in range(3)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    numbers = [t.number for t in optuna.load_study(study_name=name, storage=url).get_trials()]
    assert sorted(numbers) == list(range(120))


def test_a_storage_of_another_schema_goes_through_optuna(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import dse.study.optuna_compat as compat

    monkeypatch.setattr(compat, "SCHEMA_VERSION", "v0")
    url = f"sqlite:///{tmp_path / 'x.db'}"
    stored = _created(url)
    called: list[int] = []
    real = stored.study.add_trial
    monkeypatch.setattr(stored.study, "add_trial", lambda t: (called.append(1), real(t)))
    write_finished(stored, create_trial(value=1.0), {"record": {"x": 1}})
    assert called == [1]
    assert optuna.load_study(study_name="s", storage=url).get_trials()[0].user_attrs == {"record": {"x": 1}}


OPENER = """
import sys, time
from pathlib import Path
from dse.study.storage import open_storage

ready, go = Path(sys.argv[2]), Path(sys.argv[3])
ready.touch()
while not go.exists():
    time.sleep(0.001)
open_storage(sys.argv[1])
"""


@pytest.mark.e2e
def test_processes_opening_a_new_database_together_all_open_it(tmp_path: Path) -> None:
    """Each creates Optuna's tables unless they exist; all but the first find them created under
    their feet (SQLite: "table studies already exists") and open what the first made."""
    for round_ in range(2):
        folder = tmp_path / str(round_)
        folder.mkdir()
        go, url = folder / "go", f"sqlite:///{folder / 's.db'}"
        ready = [folder / f"ready-{i}" for i in range(4)]
        cmds = [[sys.executable, "-c", OPENER, url, str(r), str(go)] for r in ready]
        procs = [subprocess.Popen(c, stderr=subprocess.PIPE, text=True) for c in cmds]
        deadline = time.monotonic() + 120
        while not all(r.exists() for r in ready) and time.monotonic() < deadline:
            time.sleep(0.01)
        go.touch()
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err


def test_a_study_setting_is_pinned_by_the_first_writer_of_runs_opening_it_at_once(tmp_path: Path) -> None:
    """Runs opening a new study together (workers starting, each with its catalog numbers) each
    claim the setting; one stores its value and every other learns that one, rather than each
    believing its own pinned (Optuna's set_user_attr reads, then writes, and ignores a conflict)."""
    import threading

    from dse.study.optuna_compat import claim_study_attr

    url = f"sqlite:///{tmp_path / 'x.db'}"
    _created(url)
    handles = [optuna.load_study(study_name="s", storage=open_storage(url)) for _ in range(6)]
    start, got = threading.Barrier(len(handles)), {}

    def claim(i: int) -> None:
        start.wait()
        got[i] = claim_study_attr(handles[i], "catalog", {"price": i})

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(len(handles))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, (_, new) in got.items() if new]
    assert len(winners) == 1
    assert all(value == {"price": winners[0]} for value, _ in got.values())
    assert optuna.load_study(study_name="s", storage=url).user_attrs["catalog"] == {"price": winners[0]}
    # a storage Optuna keeps in memory takes the same rule by its own methods
    mem = optuna.create_study()
    assert claim_study_attr(mem, "k", 1) == (1, True)
    assert claim_study_attr(mem, "k", 2) == (1, False)


def test_a_run_folder_a_url_would_read_otherwise_keeps_its_own_database(tmp_path: Path, cli: Cli) -> None:
    """The default storage is the run folder's file as an escaped URL: ``--out 'r?x'`` had opened
    the file ``r`` (the rest read as a query) and ``--out 'r%20x'`` a folder ``r x``."""
    for name in ("r?x", "r%20x"):
        out = tmp_path / name
        run = cli("study", "run", TINY, "--out", out, "--trials", "2", "--no-export", "--no-progress")
        assert run.code == 0, run.err
        assert (out / "tiny-study" / "study.db").is_file(), name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r%20x", "r?x"]
