"""Study throughput with 1, 2 and 4 ``dse worker`` processes on one PostgreSQL storage.

Starts a throwaway PostgreSQL server on 127.0.0.1 (``tests/pg_server.py``), then for each worker
count runs the headline study's search space (random sampler, so proposals cost the same at any
count) to the same total of trials on a fresh study, timing launch to the last worker's exit.
Prints figures, not verdicts. Run: ``python benchmarks/worker_scaling.py [TRIALS]``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
from record import figure

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import pg_server  # noqa: E402

COUNTS = (1, 2, 4)


def study_file(folder: Path, name: str) -> Path:
    text = (ROOT / "studies" / "deepseek-v3-blackwell.toml").read_text()
    text = text.replace('name = "deepseek-v3-blackwell"', f'name = "{name}"')
    text = text.replace("[search]\n", '[search]\nsampler = "random"\n', 1)
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def main(trials: int = 300) -> None:
    with pg_server.PostgresServer() as server, tempfile.TemporaryDirectory() as tmp:
        url, base = server.url, None
        for n in COUNTS:
            path = study_file(Path(tmp), f"scaling-{n}")
            cmd = [sys.executable, "-m", "dse.cli.main", "worker", str(path), "--storage", url,
                   "--trials", str(trials), "--out", tmp]  # fmt: skip
            t0 = time.perf_counter()
            procs = [
                subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(n)
            ]
            outs = [p.communicate() for p in procs]
            wall = time.perf_counter() - t0
            bad = [err for p, (_, err) in zip(procs, outs, strict=True) if p.returncode != 0]
            if bad:
                raise SystemExit(f"a worker failed: {bad[0][-500:]}")
            done = len(
                optuna.load_study(study_name=f"scaling-{n}", storage=url).get_trials(
                    deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)
                )
            )  # workers finishing together may run a trial or two past the budget
            rate = done / wall
            base = base or rate
            print(
                f"{n} worker(s): {done} trials in {wall:.1f} s = {rate:.2f} trials/s ({rate / base:.2f}x one)"
            )
            figure(
                f"study throughput, {n} worker(s) on PostgreSQL",
                rate,
                "trials/s",
                f"{rate / base:.2f}x one worker",
            )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
