"""The PNG figures of a study report: Pareto frontier, stage times, HBM residency, a trajectory.

Each figure is drawn with matplotlib's Agg backend (imported when first needed) and written
atomically; a figure without data is skipped with the reason, which the report prints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import polars as pl

from dse.atomic import atomic_path
from dse.sim.plot import PNG_DPI  # one resolution for every PNG dse draws
from dse.study.results import speed_front
from dse.units import GB, GIB

if TYPE_CHECKING:
    from dse.study.report import BestDesign

HBM_LINE_GB = 80.0
"""The design brief's line for peak HBM residency per GPU ("stays below 80 GB"), in GB of 10^9
bytes: not an H100's capacity, which is 80 GiB (:data:`H100_GB`)."""
H100_GB = 80.0 * GIB / GB
"""An H100's HBM in GB: its datasheet's "80 GB" is 80 GiB (nvidia-smi: 81,559 MiB)."""
STAGES = ("gemm", "attention", "communication", "overhead")


@dataclass(frozen=True)
class Figure:
    """A PNG of the report: drawn, or skipped for the reason given."""

    file: str
    caption: str
    skipped: str = ""  # why it was not drawn; "" when it was


def floats_of(df: pl.DataFrame, col: str) -> np.ndarray:
    if df.is_empty() or col not in df.columns:
        return np.empty(0)
    return df[col].cast(pl.Float64).drop_nulls().to_numpy()


# ---------------------------------------------------------------------------------------------
# Markdown


def stage_names(stage_ms: dict[str, dict[str, float]]) -> list[str]:
    """The known stages in their order, then any others in order of first appearance."""
    seen = list(dict.fromkeys(k for v in stage_ms.values() for k in v))
    return [s for s in STAGES if s in seen] + [s for s in seen if s not in STAGES]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def drawable(text: str) -> tuple[str, str]:
    """``text`` and a font family that draws every character of it: the default font when it can,
    else an installed font that covers the text (a CJK study name), else the default font with each
    character it lacks written as its code point (``U+5C0F``), rather than empty boxes and a warning
    per glyph."""
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    default = font_manager.findfont(font_manager.FontProperties())
    fonts = [default] + [f.fname for f in font_manager.fontManager.ttflist if f.fname != default]
    wanted = {ord(c) for c in text if not c.isspace()}
    covered: set[int] = set()
    for path in fonts:
        try:
            chars = set(FT2Font(path).get_charmap())
        except (OSError, RuntimeError):  # a font file matplotlib lists but cannot read
            continue
        if path == default:
            covered = chars
        if wanted <= chars and "Last Resort" not in font_manager.FontProperties(fname=path).get_name():
            return text, font_manager.FontProperties(fname=path).get_name()
    family = font_manager.FontProperties(fname=default).get_name()
    return "".join(c if c.isspace() or ord(c) in covered else f"U+{ord(c):04X}" for c in text), family


def save(fig: Any, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=PNG_DPI)
    _pyplot().close(fig)


def draw_and_save(path: Path, build: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """``build(*args)``'s figure, written to ``path``."""
    save(build(*args), path)


class Drawer(Protocol):
    """Where a report's figures are drawn: in this process (:data:`HERE`), or handed to processes
    beside it (:class:`dse.study.figure_workers.FigureWorkers`), which have written each by the
    time :meth:`finish` returns. ``build`` is a module-level function (a process beside this one
    finds it by name) of plain data, returning a matplotlib figure."""

    def draw(self, path: Path, build: Callable[..., Any], args: tuple[Any, ...]) -> None: ...

    def finish(self) -> None: ...


class _Here:
    def draw(self, path: Path, build: Callable[..., Any], args: tuple[Any, ...]) -> None:
        draw_and_save(path, build, args)

    def finish(self) -> None:
        pass


HERE: Drawer = _Here()


def _draw(
    drawer: Drawer, path: Path, caption: str, skipped: str, build: Callable[..., Any], *args: Any
) -> Figure:
    """Draw and save a figure unless there is a reason to skip it."""
    if skipped:
        return Figure(path.name, caption, skipped)
    drawer.draw(path, build, args)
    return Figure(path.name, caption)


PARETO_AXES = ("tokens_per_s_per_user", "tokens_per_s_per_gpu")


def pareto_png(
    path: Path, study: str, feasible: pl.DataFrame, pareto: pl.DataFrame, drawer: Drawer = HERE
) -> Figure:
    x, y = PARETO_AXES

    def points(df: pl.DataFrame) -> pl.DataFrame:
        if df.is_empty() or x not in df.columns or y not in df.columns:
            return pl.DataFrame()
        return df.drop_nulls([x, y])

    pts, front = points(feasible), points(pareto)
    keys = [c for c in ("p_decode_hardware", "p_topology") if c in pts.columns]
    pts = pts.select(*keys, x, y) if not pts.is_empty() else pts  # what the figure reads (sent whole)
    front = front.select(x, y) if not front.is_empty() else front
    return _draw(
        drawer,
        path,
        "Throughput per GPU against speed per user: every feasible trial, the frontier of each"
        " decode hardware and topology (lines), the study's Pareto front (rings)",
        "" if not pts.is_empty() else "no feasible trials with both speeds",
        pareto_figure,
        study,
        pts,
        front,
        keys,
    )


def pareto_figure(study: str, pts: pl.DataFrame, front: pl.DataFrame, keys: list[str]) -> Any:
    x, y = PARETO_AXES
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5.5))
    groups = pts.partition_by(keys, maintain_order=True, as_dict=True) if keys else {("all",): pts}
    markers = "osD^vP*Xh<>"
    for i, (key, g) in enumerate(groups.items()):
        color = plt.get_cmap("tab10")(i % 10)
        ax.scatter(
            g[x].to_numpy(),
            g[y].to_numpy(),
            s=22,
            alpha=0.45,
            marker=markers[i % len(markers)],
            color=color,
            label=", ".join(str(k) for k in key),
        )
        f = speed_front(g, x, y)  # the group's frontier: the most per GPU at each speed
        ax.plot(f[x].to_numpy(), f[y].to_numpy(), color=color, linewidth=1.6, alpha=0.9)
    if not front.is_empty():  # rings, not a line: the front is over the objectives, not these axes
        ax.scatter(
            front[x].to_numpy(),
            front[y].to_numpy(),
            s=110,
            facecolors="none",
            edgecolors="black",
            linewidths=1.4,
            label="Pareto front",
        )
    ax.set_xlabel("tokens/s per user (1 / mean TPOT)")
    ax.set_ylabel("tokens/s per GPU")
    title, family = drawable(f"{study}: {pts.height} feasible trials, the frontier of each (lines)")
    ax.set_title(title, fontfamily=family)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, title="decode hardware, topology", title_fontsize=7)
    fig.tight_layout()
    return fig


def stage_png(path: Path, best: BestDesign | None, drawer: Drawer = HERE) -> Figure:
    caption = (
        "Stage times of one step of each pool of the best design (a decode pool at its batch cap,"
        " a prefill pool one full forward)"
    )
    stage_ms = best.stage_ms if best is not None else {}
    skipped = "" if stage_ms else "no best design with a stage breakdown"
    return _draw(drawer, path, caption, skipped, stage_figure, stage_ms, best.trial if best else "-")


def stage_figure(stage_ms: dict[str, dict[str, float]], trial: int | str) -> Any:
    plt = _pyplot()
    labels = list(stage_ms)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(labels) + 2.5), 4.5))
    bottom = np.zeros(len(labels))
    for stage in stage_names(stage_ms):
        ms = np.array([stage_ms[p].get(stage, 0.0) for p in labels])
        ax.bar(labels, ms, bottom=bottom, label=stage)
        bottom += ms
    ax.set_ylabel("ms per step")
    ax.set_title(f"trial {trial}: one step per pool", fontsize=10)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def hbm_png(path: Path, feasible: pl.DataFrame, drawer: Drawer = HERE) -> Figure:
    values = floats_of(feasible, "hbm_peak_gb_per_gpu")
    values = values[np.isfinite(values)]
    skipped = "" if values.size else "no feasible trials with a peak HBM residency"
    return _draw(drawer, path, "Peak HBM residency of feasible designs", skipped, hbm_figure, values)


def hbm_figure(values: np.ndarray) -> Any:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    # equal values (every design at the same residency) get one bin a GB wide around them
    lo, hi = float(values.min()), float(values.max())
    span = (lo - 0.5, hi + 0.5) if hi - lo < 1.0 else (lo, hi)
    ax.hist(values, bins=min(30, max(5, values.size // 3)), range=span, color="tab:blue", alpha=0.8)
    ax.axvline(HBM_LINE_GB, color="tab:red", ls="--", label=f"{HBM_LINE_GB:g} GB")
    ax.set_xlabel("peak HBM residency, GB per GPU")
    ax.set_ylabel("feasible trials")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


TRAJECTORY_PANELS = (
    ("requests/s", (("arrival_rate_per_s", "arrivals"), ("completions_per_s", "completions"))),
    ("requests", (("prefill_queue_requests", "prefill queue"), ("buffer_requests", "decode buffer"))),
    ("sequences / instance", (("decode_batch_per_instance", "decode batch"),)),
)


def trajectory_png(path: Path, trial: int | None, sim: pl.DataFrame, drawer: Drawer = HERE) -> Figure:
    caption = f"Simulated trajectory of trial {trial}" if trial is not None else "Simulated trajectory"
    skipped = "" if not sim.is_empty() else "no simulated time series"
    return _draw(drawer, path, caption, skipped, trajectory_figure, trial, sim)


def trajectory_figure(trial: int | None, sim: pl.DataFrame) -> Any:
    plt = _pyplot()
    fig, axes = plt.subplots(len(TRAJECTORY_PANELS), 1, figsize=(9, 8), sharex=True)
    minutes = sim["t_s"].to_numpy() / 60.0
    for ax, (ylabel, series) in zip(axes, TRAJECTORY_PANELS, strict=True):
        for col, label in series:
            if col in sim.columns:
                ax.plot(minutes, sim[col].cast(pl.Float64).to_numpy(), label=label, lw=1.0)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1].set_xlabel("minutes")
    fig.suptitle(f"trial {trial}: fluid simulation", fontsize=10)
    fig.tight_layout()
    return fig
