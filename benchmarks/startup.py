"""Start-up of the `dse` command against bare Python, alternating, in one run.

The command line imports the engine only inside the command that runs, so listing the catalogs or
printing the help costs a small multiple of starting Python at all (target: within 12x of
``python -c "import argparse"``). Prints figures, not verdicts; compare the ratios, since these
machines are noisy. Run: ``python benchmarks/startup.py [ROUNDS]``.

Then what a command that runs a study imports before its first trial (the solver, the simulators,
the study runner, in the order ``dse study run`` imports them), against the same with the four
scipy packages pyomo's import hook used to load (``dse/scipy_hook.py``): the seconds that hook
cost every such process. And the
storage a fresh run opens: a new SQLite study file seeded from the cached empty database
(``dse/study/sqlite_seed.py``), against Optuna creating it (the cache made unusable); and an
existing one opened through dse's storage, which reads its stamp without alembic
(``dse.study.optuna_compat.stamp_read``), against Optuna's own.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from record import figure

DSE = shutil.which("dse", path=str(Path(sys.executable).parent)) or "dse"
COMMANDS = {
    "bare python": [sys.executable, "-c", "import argparse"],
    "dse --help": [DSE, "--help"],
    "dse --version": [DSE, "--version"],
    "dse catalog list": [DSE, "catalog", "list"],
    "dse study list": [DSE, "study", "list"],
}
ENGINE = "import dse.study.api, dse.study.runner, dse.evaluation, dse.sim.engine_latency"  # `dse study run`
HOOKED = ENGINE + "; import scipy.stats, scipy.integrate, scipy.sparse, scipy.spatial"
IMPORTS = {
    "study engine import": [sys.executable, "-c", ENGINE],
    "with pyomo's scipy": [sys.executable, "-c", HOOKED],
}


def wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main(rounds: int = 15) -> None:
    times = _alternating(COMMANDS, rounds)
    bare = statistics.median(times["bare python"])
    print(f"{'command':<20} {'median s':>9} {'min s':>7} {'max s':>7} {'x bare':>7}   ({rounds} rounds)")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<20} {med:9.3f} {min(ts):7.3f} {max(ts):7.3f} {med / bare:7.1f}")
        if name != "bare python":
            figure(f"{name}: start-up", med, "s", f"{med / bare:.1f}x bare python ({bare:.3f} s)")
    engine = _alternating(IMPORTS, max(5, rounds // 3))
    lean, hooked = (statistics.median(engine[name]) for name in IMPORTS)
    print(f"the study engine's imports: {lean:.2f} s; with the scipy packages pyomo's hook loaded: "
          f"{hooked:.2f} s")  # fmt: skip
    figure("study engine imports", lean, "s", f"{hooked - lean:.2f} s less than with pyomo's scipy hook")
    fresh_storage(max(5, rounds // 3))


def fresh_storage(rounds: int) -> None:
    """Open a new study file in a fresh process, seeded and not, alternating."""
    with tempfile.TemporaryDirectory() as tmp:
        blocked = Path(tmp) / "no-cache"
        blocked.write_text("a file where the cache folder would go: no seed")
        code = "import sys; from dse.study.storage import open_storage as o; o('sqlite:///' + sys.argv[1])"
        times: dict[str, list[float]] = {"seeded": [], "created by Optuna": []}
        for r in range(rounds + 1):  # the first round makes the cache's template
            own, none = {"DSE_CACHE_DIR": str(Path(tmp) / "cache")}, {"DSE_CACHE_DIR": str(blocked / "dse")}
            for name, env in (("seeded", own), ("created by Optuna", none)):
                path = Path(tmp) / f"{r}-{len(times[name])}-{name[0]}.db"
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-c", code, str(path)], env={**os.environ, **env}, check=True)
                if r:
                    times[name].append(time.perf_counter() - t0)
    seeded, created = (statistics.median(v) for v in times.values())
    print(f"a process that opens a new study file: {seeded:.2f} s seeded, {created:.2f} s created by Optuna")
    figure("process opening a new study file (seeded)", seeded, "s", f"{created:.2f} s if Optuna creates it")
    existing_storage(rounds)


def existing_storage(rounds: int) -> None:
    """Open an existing study file (a resumed run, the sampler's process, a report) in a fresh
    process, through dse's storage (the stamp read with one select) and through Optuna's own
    (alembic imported to read it), alternating."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 's.db'}"
        made = f"from dse.study.storage import open_storage as o; o({url!r})"
        subprocess.run([sys.executable, "-c", made], check=True)
        codes = {
            "dse": f"from dse.study.storage import open_storage as o; o({url!r})",
            # the same imports
            "Optuna": f"import optuna, dse.study.storage; optuna.storages.RDBStorage({url!r})",
        }
        times: dict[str, list[float]] = {name: [] for name in codes}
        for _ in range(rounds):
            for name, code in codes.items():
                times[name].append(wall([sys.executable, "-c", code]))
    ours, optunas = (statistics.median(v) for v in times.values())
    print(f"a process that opens an existing study file: {ours:.2f} s through dse, {optunas:.2f} s through "
          "Optuna")  # fmt: skip
    figure("process opening an existing study file", ours, "s", f"{optunas:.2f} s through Optuna's storage")


def _alternating(commands: dict[str, list[str]], rounds: int) -> dict[str, list[float]]:
    for cmd in commands.values():  # warm the file cache once
        wall(cmd)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):  # alternate, so a slow moment of the machine hits every command
        for name, cmd in commands.items():
            times[name].append(wall(cmd))
    return times


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
