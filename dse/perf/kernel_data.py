"""Where the measured kernel tables live, and reading them.

The tables are AIConfigurator's public per-GPU, per-engine kernel microbenchmarks, shipped as
Parquet in the ``aiconfigurator-core`` package (Apache-2.0, pinned in ``pyproject.toml``) under
``aiconfigurator_core/systems/data/<system>/<op>/<engine>/<version>/<table>.parquet``. dse depends
on the package for its data only: the folder is found with ``importlib.util.find_spec``, which
locates the package without running it (``importlib.resources.files`` would import it, and with it
its compiled extension and pandas), and each table is read with polars, once per process.

Latencies in these tables are milliseconds per kernel call (one layer).

A table that is missing or cannot be read is not an error for a prediction: the op falls back to
the datasheet path, and :func:`problems` keeps one line per such file for the output to show.
"""

from __future__ import annotations

import importlib.util
import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from dse.paths import KERNEL_TABLES_MODULE, kernel_tables_root

if TYPE_CHECKING:
    import polars as pl

PACKAGE = "aiconfigurator-core"
PACKAGE_MODULE = KERNEL_TABLES_MODULE

ENGINE_DIRS = {"trt": "trtllm", "sglang": "sglang", "vllm": "vllm"}
"""dse engine profile -> the engine folder of the tables (ATOM runs on AMD GPUs, which have none)."""

_problems: dict[str, str] = {}


def data_root() -> Path | None:
    """``.../aiconfigurator_core/systems/data``, or None when the package is not installed."""
    root = kernel_tables_root()
    if root is None:
        installed = importlib.util.find_spec(PACKAGE_MODULE) is not None
        why = "holds no kernel data folder" if installed else "is not installed"
        note("package", f"{PACKAGE} {why}: every op is priced from the datasheet")
    return root


def has_system(system: str, hardware: str) -> bool:
    """Whether the tables hold the GPU folder ``system`` that ``hardware``'s catalog entry names
    (``measured_kernels``); a folder they lack (a slip in the entry) is a line in :func:`problems`."""
    root = data_root()
    if root is None:
        return False
    if (root / system).is_dir():
        return True
    folders = ", ".join(sorted(d.name for d in root.iterdir() if d.is_dir()))
    note(
        f"system:{system}",
        f"hardware {hardware}: measured_kernels = {system!r} names no GPU folder of {PACKAGE}'s tables "
        f"(they have {folders}): its ops are priced from the datasheet",
    )
    return False


def note(key: str, message: str) -> None:
    _problems.setdefault(key, message)


def problems() -> list[str]:
    """One line per table that could not be used in this process (missing package, corrupt file)."""
    return list(_problems.values())


def version_key(version: str) -> tuple[tuple[int, ...], int, int]:
    """Sort key of an engine version such as ``0.5.12.post1`` or ``1.3.0rc20``: release numbers,
    then release candidates before the release, then post releases after it."""
    m = re.match(r"v?(\d+(?:\.\d+)*)(?:\.?rc(\d+))?(?:\.post(\d+))?", version)
    if not m:
        return ((0,), 0, 0)
    nums = tuple(int(x) for x in m.group(1).split("."))
    rc = int(m.group(2)) if m.group(2) is not None else 1_000_000
    post = int(m.group(3)) if m.group(3) is not None else 0
    return (nums, rc, post)


def image_version(image: str) -> str | None:
    """The engine version a container image names (``lmsysorg/sglang:v0.5.12-cu130`` -> 0.5.12,
    ``nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc14`` -> 1.3.0rc14); None for images that do not
    name the engine's own version (Dynamo's runtime images carry Dynamo's)."""
    m = re.search(r"sglang[^:]*:v?(\d+\.\d+\.\d+(?:\.post\d+)?)", image) or re.search(
        r"tensorrt-llm/release:(\d+\.\d+\.\d+(?:rc\d+)?(?:\.post\d+)?)", image
    )
    return m.group(1) if m else None


def preferred_versions(versions: list[str], wanted: str | None) -> list[str]:
    """``versions`` in the order to try them for an engine at version ``wanted``: the newest
    not newer than it first, then older ones, then newer ones from the oldest up; without a
    wanted version, newest first."""
    ordered = sorted(versions, key=version_key)
    if wanted is None:
        return ordered[::-1]
    older = [v for v in ordered if version_key(v) <= version_key(wanted)]
    newer = [v for v in ordered if version_key(v) > version_key(wanted)]
    return older[::-1] + newer


def table_versions(system: str, op: str, engine_dir: str, table: str) -> list[str]:
    """Versions of ``engine_dir`` that measured ``table`` for ``system``."""
    root = data_root()
    if root is None:
        return []
    folder = root / system / op / engine_dir
    if not folder.is_dir():
        return []
    return [d.name for d in folder.iterdir() if (d / f"{table}.parquet").is_file()]


@lru_cache(maxsize=64)
def read_table(system: str, op: str, engine_dir: str, version: str, table: str) -> pl.DataFrame | None:
    """One measured table, or None (with a line in :func:`problems`) if it cannot be read."""
    import polars as pl

    root = data_root()
    if root is None:
        return None
    path = root / system / op / engine_dir / version / f"{table}.parquet"
    try:
        return pl.read_parquet(path)
    except FileNotFoundError:
        note(str(path), f"{path}: missing; this op is priced from the datasheet")
    except Exception as e:  # a corrupt or truncated file: polars raises its own error kinds
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        note(
            str(path),
            f"{path}: not a readable Parquet table ({reason}); this op is priced from the datasheet",
        )
    return None
