"""The stage performance model: roofline, communication and calibrated efficiencies, vectorised
over candidate instances (pure functions over arrays; the runtime half; fitting lives in
:mod:`dse.calibration`)."""
