# The front door: `make run` and `make test` do all the set-up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: install run test lint bench bench-aic clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@# the checkout's folder on sys.path, so that a script run beside a clone named dse imports
	@# the package, not that folder as a namespace package (the editable install's finder comes last)
	@$(PY) -c "import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()['purelib'], 'dse-checkout.pth').write_text('$(CURDIR)\n')"
	@# bytecode once: where PYTHONDONTWRITEBYTECODE is set, every command would compile dse again
	@$(PY) -m compileall -q dse formulations
	@echo "compiling the numba kernels into their caches (once, about 20 s)"
	@$(VENV)/bin/dse simulate --hardware b200 --rate 2 --isl 1000 --osl 100 --returning-share 0.5 \
		--prefix 2000 --suffix 100 --think 1:60 --ttft 5 --tpot 0.1 --horizon 120 --warmup 0 >/dev/null
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/dse study run deepseek-v3-blackwell --out runs

# two groups side by side, one per core: the quick tests and the long end-to-end ones (marker e2e,
# see pyproject.toml); each prints pytest's output (with its eight slowest tests) and its wall time
# when it ends. Fails if either group fails; a group that selects no test (pytest exit 5) is not a
# failure.
test: $(STAMP)
	@out=$$(mktemp -d); start=$$(date +%s); \
	for g in quick e2e; do \
		if [ $$g = quick ]; then m="not e2e"; else m="e2e"; fi; \
		( s=$$(date +%s); $(PY) -m pytest -q -m "$$m" -p no:cacheprovider --durations=8 >$$out/$$g.log 2>&1; rc=$$?; \
		  echo "$$rc $$(( $$(date +%s) - s ))" >$$out/$$g.rc ) & \
	done; \
	wait; fail=0; \
	for g in quick e2e; do \
		if [ $$g = quick ]; then m="not e2e"; else m="e2e"; fi; \
		read rc secs <$$out/$$g.rc; \
		echo "== pytest -m '$$m'"; cat $$out/$$g.log; \
		echo "== pytest -m '$$m': exit $$rc, $$secs s"; \
		if [ $$rc -ne 0 ] && [ $$rc -ne 5 ]; then fail=1; fi; \
	done; \
	echo "== make test: $$(( $$(date +%s) - start )) s in all"; \
	rm -rf $$out; exit $$fail

lint: $(STAMP)
	$(VENV)/bin/ruff check dse formulations tests benchmarks
	$(VENV)/bin/mypy dse formulations
	$(VENV)/bin/lint-imports pyproject.toml

# every benchmark; figures to benchmarks/results/latest.{json,md} and the table in docs/benchmarks.md
bench: $(STAMP)
	$(PY) benchmarks/run_all.py

# the side-by-side with AIConfigurator (installs it into benchmarks/.aic-venv; about 7 minutes)
bench-aic: $(STAMP)
	$(PY) benchmarks/vs_aiconfigurator.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
