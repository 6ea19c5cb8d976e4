"""How good dse's choice is where the measured runs can tell: for each question the measured
runs answer (one GPU, prompt and answer length, and precision: DeepSeek-R1 as InferenceX ran it),
its configurations (aggregated or disaggregated, MTP or not, parallelism, concurrency) are the
choices; the ones whose measured median TTFT and TPOT meet the targets are feasible. dse, fitted
without that GPU's runs (leave one hardware out, as ``benchmarks/accuracy.py`` and
``benchmarks/latency_accuracy.py``), predicts every configuration's tokens/s/GPU (the closed form)
and TTFT and TPOT p50 (the engine-level simulation, replaying the run's closed loop) and picks the
one it predicts fastest among those it predicts feasible. Scored by the measurements: whether the
pick is feasible, whether it is the measured best, and its measured tokens/s/GPU over the best's
(an infeasible pick or none scores 0).

Against two pickers without dse's latency model: one that picks uniformly at random among the
question's configurations (its expected scores), and one that takes dse's fastest prediction
with the targets ignored. Several target pairs, so that no one pair decides it.

Prints figures, not verdicts. Run: ``python benchmarks/choices.py`` (about 3 minutes on two
cores).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from record import figure

from dse.calibration import fit as cal
from dse.calibration.folds import default_jobs
from dse.calibration.latency import fit_latency, measured_latency
from dse.calibration.published import POINTS, measured_per_gpu
from dse.catalog import load_catalog
from dse.paths import MEASURED_RUNS, PUBLISHED_POINTS
from dse.perf.params import PerfParams, default_params, load_params

# (TTFT p50 s, TPOT p50 s): AIConfigurator's question (1 s, 30 ms), a tighter and a looser one
TARGETS = ((0.5, 0.020), (1.0, 0.030), (2.0, 0.050))
MIN_FEASIBLE = 2  # a question whose measured runs meet the targets in fewer configurations tells nothing


@dataclass(frozen=True)
class Scores:
    questions: int
    feasible: float  # picks (or their expectation) the measurements find feasible
    best: float  # picks that are the measured best
    share_median: float  # median over questions of the pick's measured tokens/s/GPU over the best's
    unanswered: int = 0  # questions where the picker found no configuration feasible


def score(
    question: Sequence[tuple[object, ...]],
    measured: np.ndarray,
    meas_ttft: np.ndarray,
    meas_tpot: np.ndarray,
    predicted: np.ndarray,
    pred_ttft: np.ndarray,
    pred_tpot: np.ndarray,
    ttft_s: float,
    tpot_s: float,
) -> dict[str, Scores]:
    """The three pickers' scores over the questions (rows grouped by ``question``) whose measured
    runs meet (``ttft_s``, ``tpot_s``) in at least :data:`MIN_FEASIBLE` configurations."""
    groups: dict[tuple[object, ...], list[int]] = defaultdict(list)
    for k, q in enumerate(question):
        groups[q].append(k)
    ok = (meas_ttft <= ttft_s) & (meas_tpot <= tpot_s)
    told = (pred_ttft <= ttft_s) & (pred_tpot <= tpot_s)
    picks: dict[str, list[tuple[float, float, float]]] = {"dse": [], "latency-blind": [], "random": []}
    unanswered = 0
    for rows in groups.values():
        idx = np.array(rows)
        feasible = idx[ok[idx]]
        if len(feasible) < MIN_FEASIBLE:
            continue
        top = measured[feasible].max()

        def scored(k: int, top: float = top) -> tuple[float, float, float]:
            good = bool(ok[k])
            return float(good), float(good and measured[k] >= top), measured[k] / top if good else 0.0

        candidates = idx[told[idx]]
        if len(candidates):
            picks["dse"].append(scored(int(candidates[np.argmax(predicted[candidates])])))
        else:
            unanswered += 1
            picks["dse"].append((0.0, 0.0, 0.0))
        picks["latency-blind"].append(scored(int(idx[np.argmax(predicted[idx])])))
        each = np.array([scored(int(k)) for k in idx])
        picks["random"].append(tuple(each.mean(axis=0)))  # type: ignore[arg-type]
    out = {}
    for name, got in picks.items():
        a = np.array(got)
        out[name] = Scores(
            len(a), float(a[:, 0].sum()), float(a[:, 1].sum()), float(np.median(a[:, 2])),
            unanswered if name == "dse" else 0,
        )  # fmt: skip
    return out


def loho_predictions(data: list[cal.Measured], catalog, params: PerfParams) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    """Each run's tokens/s/GPU and (TTFT p50, TTFT p99, TPOT p50, TPOT p99), each from the fits
    without its GPU's runs."""
    folds: dict[str, PerfParams] = {}
    measured = measured_per_gpu(PUBLISHED_POINTS)
    values = [measured[p.id] for p in POINTS]
    jobs = default_jobs()
    tput, _ = cal.leave_one_hardware_out(data, catalog, default_params(), POINTS, values, folds, jobs)
    latency = fit_latency(data, catalog, params, folds, jobs).loho_predicted
    assert latency is not None
    return np.asarray(tput), latency


def main() -> None:
    catalog = load_catalog(use_env=False)
    params = load_params()
    data, _ = cal.read_measured(MEASURED_RUNS, catalog)
    tput, lat = loho_predictions(data, catalog, params)
    meas = measured_latency(data)
    question = [(m.row.hardware, m.row.isl, m.row.osl, m.raw.get("precision", "")) for m in data]
    measured = np.array([m.tput_per_gpu for m in data])
    print(
        f"{len(data)} measured runs in {len(set(question))} questions (GPU, prompt and answer "
        "lengths, precision); choices: each question's configurations; leave-one-hardware-out"
    )
    print("| targets (TTFT p50, TPOT p50) | picker | questions | pick feasible | pick the best | "
          "median pick / best | no answer |\n|---|---|---|---|---|---|---|")  # fmt: skip
    for ttft_s, tpot_s in TARGETS:
        got = score(question, measured, meas[:, 0], meas[:, 2], tput, lat[:, 0], lat[:, 2], ttft_s, tpot_s)
        for name, s in got.items():
            print(
                f"| {ttft_s:g} s, {tpot_s * 1e3:g} ms | {name} | {s.questions} | {s.feasible:.1f} | "
                f"{s.best:.1f} | {s.share_median:.2f} | {s.unanswered if name == 'dse' else ''} |"
            )
            tag = f"{name}_ttft{ttft_s:g}_tpot{tpot_s * 1e3:g}"
            figure(f"{tag}_best_share", s.best / max(s.questions, 1), "fraction", f"{s.questions} questions")
            figure(f"{tag}_feasible_share", s.feasible / max(s.questions, 1), "fraction")


if __name__ == "__main__":
    main()
