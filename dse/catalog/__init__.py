"""Hardware and model catalogs: data files validated at load into frozen dataclasses."""

from dse.catalog.hardware import Hardware
from dse.catalog.loader import Catalog, load_catalog
from dse.catalog.model import Model

__all__ = ["Catalog", "Hardware", "Model", "load_catalog"]
