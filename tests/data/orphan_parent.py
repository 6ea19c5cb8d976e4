"""A run's parent that tells its sampler process six trials, whose writes are slow, and dies
without closing it (as under SIGKILL): ``tests/test_study.py`` checks all six get stored."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import dse.study.proposer as proposer
from dse.study.objectives import ObjectiveDef
from dse.study.spec import load_study
from dse.study.storage import StoredStudy, open_study

spec = load_study(Path(__file__).with_name("tiny-study.toml"))
url = f"sqlite:///{sys.argv[1]}"
open_study(spec, url, [ObjectiveDef.metric(n) for n in spec.objectives.names], 1)  # created
stored = StoredStudy.load(url, spec.name)
real = proposer.write_finished


def slow(*args: object, **kwargs: object) -> None:
    time.sleep(0.3)
    real(*args, **kwargs)  # type: ignore[arg-type]


proposer.write_finished = slow  # the forked child inherits it
p = proposer.Proposer(spec, stored, [], seed=1, budget=50, stream=0, todo=50)
for i in range(6):
    job = p.next()
    p.finish(job.number, [1.0 + i] * len(stored.study.directions), -1.0, {"record": {"i": i}})
time.sleep(0.05)  # the child sends a proposal ahead that this parent never reads
print(p._proc.pid, flush=True)
os._exit(0)
