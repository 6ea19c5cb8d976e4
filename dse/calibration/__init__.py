"""Offline calibration tooling: fitting the performance model's efficiencies to measured runs
(:mod:`dse.calibration.fit`) and published stage-level points (:mod:`dse.calibration.published`).
``dse calibrate``, ``benchmarks/accuracy.py`` and the accuracy tests use it; the runtime model
(:mod:`dse.perf`) only reads the file it writes (``dse/perf/calibration.json``)."""
