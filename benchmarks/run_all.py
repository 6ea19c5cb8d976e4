"""``make bench``: every benchmark, one after another, into one results file.

Runs each script in ``BENCHES`` as its own process (their output streams through), collects the
figures they record (:mod:`record`), and writes ``benchmarks/results/latest.json`` (machine,
versions, date, every figure) and ``benchmarks/results/latest.md`` (a table), then puts the table
into ``docs/benchmarks.md`` between its ``bench`` markers. Figures, not verdicts: compare ratios within
one run, these machines are noisy. ``python benchmarks/run_all.py [NAME ...]`` runs some of them.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
BENCH_PAGE = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
BENCHES = (
    "startup",
    "perf_speed",
    "accuracy",
    "kernel_accuracy",
    "overhead_split",
    "latency_accuracy",
    "choices",
    "latency_speed",
    "milp_speed",
    "tpot_paces",
    "engine_agreement",
    "agg_prefill_batch",
    "prefill_queue",
    "sim_validation",
    "growth",
    "midfill",
    "study_speed",
    "trial_eval",
    "worker_scaling",
)
PACKAGES = ("numpy", "polars", "pyomo", "highspy", "optuna", "numba", "dse")


def machine() -> dict[str, object]:
    cpu = ""
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        cpu = platform.processor()
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_gb, 1), "os": platform.platform()}


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for p in PACKAGES:
        try:
            out[p] = importlib.metadata.version(p)
        except importlib.metadata.PackageNotFoundError:
            out[p] = "-"
    return out


def table(figures: list[dict[str, object]]) -> str:
    lines = ["| benchmark | figure | value | unit | note |", "|---|---|---:|---|---|"]
    for f in figures:
        v = float(f["value"])  # type: ignore[arg-type]
        shown = f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
        lines.append(f"| {f['benchmark']} | {f['figure']} | {shown} | {f['unit']} | {f['note']} |")
    return "\n".join(lines)


def main(names: list[str]) -> int:
    unknown = sorted(set(names) - set(BENCHES))
    if unknown:
        print(f"run_all.py: unknown benchmark {unknown[0]!r}; known: {', '.join(BENCHES)}", file=sys.stderr)
        return 2
    chosen = [b for b in BENCHES if not names or b in names]
    figures: list[dict[str, object]] = []
    failed = []
    for name in chosen:
        print(f"\n=== {name} ===", flush=True)
        with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as sink:
            env = {**os.environ, "DSE_BENCH_RESULTS": sink.name}
            t0 = time.perf_counter()
            rc = subprocess.run([sys.executable, str(HERE / f"{name}.py")], env=env).returncode
            wall = time.perf_counter() - t0
            rows = [json.loads(line) for line in sink if line.strip()]
        if rc != 0:
            failed.append(name)
        figures += rows
        figures.append({"benchmark": name, "figure": "wall time of the benchmark", "value": wall, "unit": "s",
                        "note": "" if rc == 0 else f"exit code {rc}"})  # fmt: skip
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    doc = {
        "date": stamp,
        "machine": machine(),
        "versions": versions(),
        "benchmarks": chosen,
        "figures": figures,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "latest.json").write_text(json.dumps(doc, indent=2) + "\n")
    m, v = doc["machine"], doc["versions"]
    head = (
        f"Measured {stamp} on {m['cpu']} ({m['cores']} cores, {m['memory_gib']} GiB); "  # type: ignore[index]
        + ", ".join(f"{k} {val}" for k, val in v.items())  # type: ignore[union-attr]
        + "."
    )
    md = f"{head}\n\n{table(figures)}\n"
    (RESULTS / "latest.md").write_text(md)
    if len(chosen) == len(BENCHES) and not failed and BENCH_PAGE.exists():
        text = BENCH_PAGE.read_text()
        if BEGIN in text and END in text:
            a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
            BENCH_PAGE.write_text(text[:a] + "\n" + md + text[b:])
    print(
        f"\nwrote {RESULTS / 'latest.json'} and {RESULTS / 'latest.md'}"
        + (f"; failed: {failed}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
