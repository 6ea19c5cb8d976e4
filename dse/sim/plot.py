"""A PNG of simulated trajectories: traffic, queues, decode batch, instances per role."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dse.atomic import atomic_path
from dse.sim.outputs import Trajectories, row_times

PNG_DPI = 110


def plot_trajectories(
    runs: dict[str, Trajectories],
    path: Path,
    *,
    title: str = "",
    resting_kv_gb: dict[str, np.ndarray] | None = None,
) -> None:
    """:func:`trajectories_figure` written to ``path`` (atomically)."""
    import matplotlib.pyplot as plt

    fig = trajectories_figure(runs, title, resting_kv_gb)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=PNG_DPI)
    plt.close(fig)


def trajectories_figure(
    runs: dict[str, Trajectories], title: str = "", resting_kv_gb: dict[str, np.ndarray] | None = None
) -> Any:
    """Five panels, one line per run (``{"fluid": ..., "des": ...}``), configuration 0 of each:
    traffic, queues, decode batch, instances, and KV (decoding, and resting per tier)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(5, 1, figsize=(9, 12), sharex=True)
    panels = (
        (
            "requests/s",
            lambda tr: ((tr.arrival_rate[0], "arrivals"), (tr.completions_per_s[0], "completions")),
        ),
        ("requests", lambda tr: ((tr.prefill_queue[0], "prefill queue"), (tr.buffer[0], "decode buffer"))),
        ("sequences / instance", lambda tr: ((tr.decode_batch[0], "decode batch"),)),
        (
            "servers / instances",
            lambda tr: (
                (tr.prefill_instances[0], "prefill servers"),
                (tr.decode_instances[0], "decode instances"),
            ),
        ),
    )
    for ax, (ylabel, series) in zip(axes[:4], panels, strict=True):
        for name, tr in runs.items():
            for values, label in series(tr):
                ax.plot(
                    row_times(tr, name, 0.0) / 60.0, values, label=f"{label} ({name})", lw=1.0,
                    ls="-" if name == "fluid" else ":",
                )  # fmt: skip
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    kv = axes[4]
    if "fluid" in runs:
        tr = runs["fluid"]
        at = row_times(tr, "fluid", 0.0) / 60.0
        kv.plot(at, tr.kv_active_gb[0] / 1e3, label="decoding (HBM)", lw=1.0)
        for tier, values in (resting_kv_gb or {}).items():
            if values.max() > 0:
                kv.plot(at, values / 1e3, label=f"resting in {tier}", lw=1.0)
    kv.set_ylabel("KV, TB")
    kv.grid(alpha=0.3)
    kv.legend(fontsize=7, loc="upper right")
    axes[-1].set_xlabel("minutes")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
