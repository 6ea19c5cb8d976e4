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
	$(VENV)/bin/dse catalog list hardware
	$(VENV)/bin/dse predict --model deepseek-v3 --hardware gb200 --framework trt --precision fp4 \
		--isl 8192 --osl 1024 --conc 256 --tp 8 --ep 8 --dp-attention
	$(VENV)/bin/dse predict --model deepseek-v3 --hardware b200 --framework trt --precision fp4 \
		--isl 8192 --osl 1024 --conc 256 --tp 8 --ep 8 --dp-attention

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

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
