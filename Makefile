# One command sets everything up and runs the job; the venv is rebuilt when the lock changes.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# The package's folders: adding or removing a module changes its folder, and the
# strict editable install below links files, so a new file needs a reinstall.
PACKAGE_DIRS := $(shell find faultbench datasets diagnosers realbugs -type d -not -name __pycache__)

.PHONY: run test lint runs report leaderboard traincheck calibrate paper bench clean

# Editable in setuptools' strict mode: a tree of links to the sources under build/, put on
# sys.path, so `import faultbench` finds a regular package there from any working
# directory (the default mode's import hook loses to a stray `faultbench/` folder in it).
$(STAMP): requirements.lock pyproject.toml Makefile $(PACKAGE_DIRS)
	test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
		--config-settings editable_mode=strict -e .
	touch $(STAMP)

run: $(STAMP)  ## the main job: score the reference rules on the held-out task
	$(BIN)/faultbench run --diagnoser rules --task synthetic

# loadfile: each test module runs on one worker, which builds its module fixtures once
# (a quick bench, the digits level runs); spread test by test, both workers built them.
test: $(STAMP)  ## the full test suite
	$(BIN)/python -m pytest -q -n auto --dist loadfile --durations=15

lint: $(STAMP)  ## ruff (lint + format check), mypy and the import contract (.importlinter)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

clean:
	rm -rf $(VENV) build *.egg-info faultbench/*.so

# A diagnosis stopped at its time limit is a measurement of the machine (counted wrong), so
# results/ gives the shipped diagnosers room: TheDeepChecker's probe takes up to a minute on
# a language run of a loaded 2-core machine.
REPORT_TIMEOUT := 600

# Trains what is missing, writes each shipped diagnoser's results/diagnosers/NAME.* (a file
# whose answers are unchanged is left as it was), then the leaderboard and the other tables.
report: $(STAMP)  ## regenerate results/ from the committed rates and levels (trains only what is missing)
	$(BIN)/faultbench report --timeout $(REPORT_TIMEOUT)
	$(BIN)/faultbench sweep --fault lr_too_high --diagnoser rules --task digits
	$(BIN)/faultbench pairs --diagnoser rules --task digits
	$(BIN)/faultbench runs export  # the sweep's and pairs' runs join the dataset (else: unchanged)

# The board's runs as data (results/runs/, docs/runs.md): train what neither the store nor
# the shipped dataset holds (from nothing: every run of the board), then export them all:
# the lite tier (shipped) and the full one (every step; results/runs-full/, not in git).
# RUNS_ARGS passes --workers and the like to the training.
RUNS_ARGS ?=
runs: $(STAMP)  ## train the board's missing runs and export results/runs/ (and runs-full/)
	$(BIN)/faultbench runs train $(RUNS_ARGS)
	$(BIN)/faultbench runs export --tier full
	$(BIN)/faultbench runs export --runs results/runs-full

leaderboard: $(STAMP)  ## assemble the leaderboard and its site from results/diagnosers/ (diagnoses nothing)
	$(BIN)/faultbench leaderboard

# TrainCheck traces each run again in its own interpreter (30-80 s a run): too slow for make
# report, so its result file comes from here, on the subset of the board it declares, and
# stands on the leaderboard with the date and code it was scored on. TRAINCHECK_ARGS narrows
# the board for a quick look into another folder (e.g. --task digits --grids classic --faults
# lr_too_high --cases none --results /tmp/tc); TRAINCHECK_RUN passes --workers and the like.
TRAINCHECK_ARGS ?=
TRAINCHECK_RUN ?=
traincheck: $(STAMP)  ## score TrainCheck into results/diagnosers/traincheck.* (hours), then the leaderboard
	$(BIN)/faultbench score --diagnoser traincheck --timeout $(REPORT_TIMEOUT) $(TRAINCHECK_ARGS) $(TRAINCHECK_RUN)
	$(BIN)/faultbench leaderboard $(TRAINCHECK_ARGS)

# The working rates and severity levels are versioned data (faultbench/faults/*.csv): measured
# here, when a task, a fault or the training code changes, and only read by make report.
calibrate: $(STAMP)  ## measure the family's working rates, then the severity levels
	$(BIN)/faultbench calibrate

paper: $(STAMP)  ## build the paper from paper/ and results/
	$(BIN)/faultbench paper

bench: $(STAMP)  ## the performance ratios
	$(BIN)/faultbench bench --results results
