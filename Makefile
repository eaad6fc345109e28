# tfscratch: the two commands a newcomer needs are `make lab` and `make test`.
# Everything runs in ./.venv, installed with the exact versions of constraints.txt, so the
# stored notebook outputs, your machine and CI agree.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Reinstall only when the dependencies change.
INSTALLED := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg
LAB_ARGS ?=

.PHONY: lab test test-package test-notebooks notebooks bench assignments lint clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "tfscratch needs Python 3.11 or newer (found " + sys.version.split()[0] + ")")'
	$(PYTHON) -m venv $(VENV)

$(INSTALLED): pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[lab,test,classroom,dev]'
	@touch $@

## lab: open JupyterLab on the course (make lab LAB_ARGS="--no-browser --port 8890")
lab: $(INSTALLED)
	$(BIN)/jupyter lab notebooks/ $(LAB_ARGS)

## test: ruff, the package tests, then every notebook under nbval
test: lint test-package test-notebooks

test-package: $(INSTALLED)
	$(BIN)/python -m pytest tests

test-notebooks: $(INSTALLED)
ifneq ($(NOTEBOOKS),)
	$(BIN)/python -m pytest $(NBVAL) $(NOTEBOOKS)
else
	@echo "no notebooks yet: nothing for nbval to run"
endif

## notebooks: re-execute every notebook in place (outputs stored for nbval to compare)
notebooks: $(INSTALLED)
	$(BIN)/python notebooks/execute.py $(NOTEBOOKS)

## bench: the speed tables of benchmarks/README.md
bench: $(INSTALLED)
	$(BIN)/python benchmarks/bench_training_step.py
	$(BIN)/python benchmarks/bench_generation.py
	$(BIN)/python benchmarks/bench_attention_scaling.py

## assignments: student versions of every notebook (nbgrader) in build/classroom/release/
CLASSROOM := build/classroom
assignments: $(INSTALLED)
	rm -rf $(CLASSROOM)/source $(CLASSROOM)/release
	@for nb in $(NOTEBOOKS); do \
		name=$$(basename $$nb .ipynb); mkdir -p $(CLASSROOM)/source/$$name && cp $$nb $(CLASSROOM)/source/$$name/; \
	done
	printf 'c = get_config()  # noqa: F821\nc.CourseDirectory.course_id = "tfscratch"\n' > $(CLASSROOM)/nbgrader_config.py
	# nbgrader starts alembic (the gradebook's migrations) from PATH, so the venv goes first.
	cd $(CLASSROOM) && PATH="$(abspath $(BIN)):$$PATH" $(abspath $(BIN))/nbgrader generate_assignment "*" --force --log-level=WARN
	@echo "student notebooks in $(CLASSROOM)/release/; see README.md, 'For instructors'"

lint: $(INSTALLED)
	$(BIN)/ruff check tfscratch tests benchmarks notebooks/execute.py notebooks/conftest.py
	$(BIN)/ruff format --check tfscratch tests benchmarks notebooks/execute.py notebooks/conftest.py

clean:
	rm -rf $(VENV) build .pytest_cache
