# The front door: `make run` and `make test` do all the set-up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: install run test lint bench clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/dse study run deepseek-v3-blackwell --out runs

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check dse formulations tests benchmarks
	$(VENV)/bin/mypy dse formulations

bench: $(STAMP)
	$(PY) benchmarks/perf_speed.py
	$(PY) benchmarks/accuracy.py
	$(PY) benchmarks/milp_speed.py
	$(PY) benchmarks/sim_validation.py
	$(PY) benchmarks/study_speed.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
