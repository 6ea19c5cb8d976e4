"""Where the data the repository ships lives: catalogs, studies and the reference measurements.

The project reads no path outside its own checkout (``tests/test_standalone.py`` holds it to that).
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SHIPPED_HARDWARE = REPO_ROOT / "hardware_catalog"
SHIPPED_MODELS = REPO_ROOT / "model_catalog"
STUDIES_DIR = REPO_ROOT / "studies"
REFERENCE_DIR = REPO_ROOT / "reference"
"""Public measurements and specifications, vendored with their sources (``reference/README.md``)."""
MEASURED_RUNS = REFERENCE_DIR / "inferencex_calibration.csv"
PUBLISHED_POINTS = REFERENCE_DIR / "published_points.csv"
CALIBRATION_FILE = REPO_ROOT / "dse" / "perf" / "calibration.json"
"""The fitted performance parameters the engine ships; ``dse calibrate`` writes it."""
CALIBRATION_ENV = "DSE_CALIBRATION"
"""Environment variable naming another calibration file for every command to load and for
``dse calibrate`` to write (one fitted with ``--kernels measured``, say)."""


KERNEL_TABLES_MODULE = "aiconfigurator_core"
"""The package whose per-GPU kernel microbenchmarks price ops in the measured tier
(:mod:`dse.perf.kernel_data`), under ``systems/data/<GPU folder>``."""


def kernel_tables_root() -> Path | None:
    """``.../aiconfigurator_core/systems/data`` (one folder per GPU), found without importing the
    package; None when it is not installed or holds no such folder."""
    import importlib.util

    spec = importlib.util.find_spec(KERNEL_TABLES_MODULE)
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "systems" / "data"
    return root if root.is_dir() else None


def calibration_file() -> Path:
    """The calibration file the engine loads: ``$DSE_CALIBRATION`` if set, else the shipped one."""
    import os

    named = os.environ.get(CALIBRATION_ENV, "").strip()
    return Path(named) if named else CALIBRATION_FILE
