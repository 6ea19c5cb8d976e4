"""dse: design-space exploration for mixture-of-experts inference serving."""

__version__ = "0.1.0"
