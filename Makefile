# Two commands do all set-up on a fresh clone: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The fixture `make run` diagnoses: a Tune sweep whose trial raised, with its driver output.
DEMO := fixtures/tune_trial_error

.PHONY: run test test-ray-compat test-under-load lint format fixtures fixtures-legacy docs docs-smoke bench bench-failing clean corpus

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Installs are stamped so repeated runs skip pip; a changed pyproject.toml re-installs.
$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@ $(VENV)/.installed-run

run: $(VENV)/.installed-run
	@echo "$$ ray-doctor inspect $(DEMO) --logs $(DEMO)/driver.log"
	@$(BIN)/ray-doctor inspect $(DEMO) --logs $(DEMO)/driver.log; code=$$?; \
	  echo "(exit code $$code: 1 means findings at or above --fail-on)"; [ $$code -le 1 ]

# The whole suite on the pinned Ray, then the Ray-facing tests on the older Ray CI also runs.
# Two workers: one runs the tests that start Ray, one after another (tests/conftest.py), the
# other everything else meanwhile.
test: $(VENV)/.installed-test lint
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup
	$(MAKE) test-ray-compat

# The tests that start Ray or follow a live sweep, with every core kept busy by a CPU hog:
# they assert outcomes and ordering, so they must pass on a loaded machine.
# `make test-under-load LOAD_TESTS=tests` runs the whole suite that way.
LOAD_TESTS ?= tests/smoke tests/test_watch.py
test-under-load: $(VENV)/.installed-test
	@hogs=""; for core in $$(seq $$(nproc)); do \
	  $(BIN)/python -c "while True: pass" & hogs="$$hogs $$!"; done; \
	  trap 'kill $$hogs' EXIT; \
	  echo "CPU hog on $$(nproc) cores (pids$$hogs)"; \
	  $(BIN)/python -m pytest -q $(LOAD_TESTS)

# The smoke tests and the other tests that start Ray (marker ray_compat), on an older Ray in a
# venv of its own: `make test-ray-compat` (Ray 2.40), `make test-ray-compat COMPAT_RAY=2.9.3`.
# The runtime extra accepts Ray >= 2.9; the main suite runs the 2.60 the test extra pins.
COMPAT_RAY ?= 2.40.0
COMPAT_VENV := .venv-ray$(COMPAT_RAY)
# Ray 2.9 imports pyarrow.PyExtensionType (gone in pyarrow 18), and `from pkg_resources import
# packaging` (gone in setuptools 69) and pkg_resources._vendor. torch 2.13's metadata asks for
# setuptools >= 77, which only its build helpers use, so the older setuptools goes in by a
# second pip call.
COMPAT_PINS_2.9.3 := "pyarrow<18"
# Ray 2.20's ray.data calls pyarrow.PyExtensionType.set_auto_load too.
COMPAT_PINS_2.20.0 := "pyarrow<18"
COMPAT_AFTER_2.9.3 := "setuptools<69"
$(COMPAT_VENV)/.installed: pyproject.toml
	rm -rf $(COMPAT_VENV)
	$(PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(COMPAT_VENV)/bin/python -m pip install --quiet -e ".[test-tools]" \
	  "ray[tune,train]==$(COMPAT_RAY)" torch==2.13.0 $(COMPAT_PINS_$(COMPAT_RAY))
	$(if $(COMPAT_AFTER_$(COMPAT_RAY)),$(COMPAT_VENV)/bin/python -m pip install --quiet \
	  $(COMPAT_AFTER_$(COMPAT_RAY)) 2>&1 | grep -v "which is incompatible" || true)
	touch $@

test-ray-compat: $(COMPAT_VENV)/.installed
	$(COMPAT_VENV)/bin/python -m pytest -q -m ray_compat tests/smoke tests/rules

lint: $(VENV)/.installed-test
	$(BIN)/ruff format --check ray_doctor tests bench docs fixtures/generate.py fixtures/checkpoints/generate.py fixtures/legacy/generate_legacy.py
	$(BIN)/ruff check ray_doctor tests bench docs fixtures/generate.py fixtures/checkpoints/generate.py fixtures/legacy/generate_legacy.py

format: $(VENV)/.installed-test
	$(BIN)/ruff format ray_doctor tests bench docs fixtures/generate.py fixtures/checkpoints/generate.py fixtures/legacy/generate_legacy.py
	$(BIN)/ruff check --fix ray_doctor tests bench docs fixtures/generate.py fixtures/checkpoints/generate.py fixtures/legacy/generate_legacy.py

# Re-create the committed fixtures with real Ray (minutes; needs the test extras).
fixtures: $(VENV)/.installed-test
	$(BIN)/python fixtures/generate.py

# Real error output from public trackers: cause found, headline right, `other` left unclaimed.
corpus: $(VENV)/.installed-run
	$(BIN)/python tests/corpus/measure.py

docs: $(VENV)/.installed-run
	$(BIN)/python docs/generate.py

$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[bench]"
	touch $@ $(VENV)/.installed-test $(VENV)/.installed-run

bench: $(VENV)/.installed-bench
	$(BIN)/python bench/bench_inspect.py

# Failing sweeps (10 % and 50 % errored) and a 200 MB session log; builds ~2 GB under bench/out.
bench-failing: $(VENV)/.installed-bench
	$(BIN)/python bench/bench_failing.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis bench/out

# Re-record the smoke rules' doc examples with real Ray runs (minutes), then regenerate docs.
docs-smoke: $(VENV)/.installed-test
	$(BIN)/python docs/generate.py --smoke
