# tfscratch: the two commands a newcomer needs are `make lab` and `make test`.
# Everything runs in ./.venv, installed with the exact versions of constraints.txt, so the
# stored notebook outputs, your machine and CI agree.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
# nbval's options (the sanitizers and a plugin with its settings) live with the tests, so the
# notebooks/ folder a learner's Lab opens holds only the course.
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg \
	-p tests.nbval_plugin
LAB_ARGS ?=
# The folder `make lab` opens (the browser test points it at a copy of notebooks/).
LAB_DIR ?= notebooks
CLASSROOM := build/classroom

# What each kind of user gets installed, once per change of pyproject.toml or
# constraints.txt (a stamp file in the venv records it). Learners get JupyterLab and the
# package; the tests add the test and dev tools and nbgrader; instructors add nbgrader.
LEARNER_INSTALLED := $(VENV)/.installed-learner
DEV_INSTALLED := $(VENV)/.installed-dev
CLASSROOM_INSTALLED := $(VENV)/.installed-classroom
# pip shows what it downloads and installs (no --quiet): the first run takes a few minutes.
PIP_INSTALL := $(BIN)/python -m pip install --disable-pip-version-check -c constraints.txt

# JupyterLab refuses to run as root ("Running as root is not recommended"), which is what
# Docker containers and many cloud notebooks do: pass --allow-root there, and only there.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
# The learner's Lab hides nbgrader even when an instructor's command installed it in the
# venv: jupyter/learner/ disables its JupyterLab extension (labconfig/page_config.json), and
# the server extensions are switched off on the command line.
LEARNER_CONFIG := $(abspath jupyter/learner)
NO_NBGRADER_SERVER := --ServerApp.jpserver_extensions="{\
'nbgrader.server_extensions.formgrader': False, \
'nbgrader.server_extensions.assignment_list': False, \
'nbgrader.server_extensions.course_list': False, \
'nbgrader.server_extensions.validate_assignment': False}"

.PHONY: lab formgrader test test-package test-notebooks test-reruns test-grading test-browser test-binder \
	notebooks bench bench-memory assignments exercises lint clean

# The venv is ready when pip is in it. Python's venv module installs pip with ensurepip, which
# some systems ship apart (Debian and Ubuntu: python3-venv); without it `python3 -m venv`
# stops half-way and leaves a .venv with no pip, on which every later run would fail with
# "No module named pip". So the rule first checks that $(PYTHON) has ensurepip and says in one
# sentence what to install; a .venv without pip (a failed or interrupted run's) is removed and
# made again. A failed pip install leaves the venv and no stamp: the next run installs again.
VENV_READY := $(BIN)/pip
NO_VENV = { echo "==> $(PYTHON) cannot create a virtual environment with pip, so nothing was\
 installed: install Python's venv module (on Debian or Ubuntu: sudo apt install\
 python$$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv)\
 and run 'make $(or $(MAKECMDGOALS),lab)' again." >&2; rm -rf $(VENV); exit 1; }

$(VENV_READY):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "tfscratch needs Python 3.11 or newer (found " + sys.version.split()[0] + ")")'
	@$(PYTHON) -c 'import ensurepip, venv; ensurepip.version()' >/dev/null 2>&1 || $(NO_VENV)
	@if [ -e $(VENV) ]; then echo "==> $(VENV)/ has no pip (an earlier run stopped half-way): making it again"; \
		rm -rf $(VENV); fi
	@echo "==> Creating a virtual environment in $(VENV)/ (first run only)"
	@$(PYTHON) -m venv $(VENV) || $(NO_VENV)
	@test -x $@ || $(NO_VENV)

$(LEARNER_INSTALLED): pyproject.toml constraints.txt | $(VENV_READY)
	@echo "==> Installing tfscratch, JupyterLab and their dependencies into $(VENV)/ at the"
	@echo "    versions of constraints.txt (first run, or after they change: a few minutes)"
	$(PIP_INSTALL) -e '.[lab]'
	@touch $@

$(CLASSROOM_INSTALLED): pyproject.toml constraints.txt | $(VENV_READY)
	@echo "==> Installing the instructor's tools (nbgrader, the 'classroom' extra) into $(VENV)/"
	$(PIP_INSTALL) -e '.[lab,classroom]'
	@touch $@

$(DEV_INSTALLED): pyproject.toml constraints.txt | $(VENV_READY)
	@echo "==> Installing tfscratch with its test, dev, classroom and browser-test tools into $(VENV)/"
	$(PIP_INSTALL) -e '.[lab,test,classroom,dev,browser]'
	@touch $@ $(LEARNER_INSTALLED) $(CLASSROOM_INSTALLED)  # a superset of both

## lab: open JupyterLab on the course (make lab LAB_ARGS="--no-browser --port 8890")
lab: $(LEARNER_INSTALLED)
	@echo "==> Starting JupyterLab on $(LAB_DIR)/ (stop it with Ctrl-C, twice)"
	JUPYTER_CONFIG_PATH="$(LEARNER_CONFIG)$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
		$(BIN)/jupyter lab $(LAB_DIR) $(ALLOW_ROOT) $(NO_NBGRADER_SERVER) $(LAB_ARGS)

## formgrader: (instructors) JupyterLab on the course directory with nbgrader's formgrader
formgrader: $(CLASSROOM_INSTALLED)
	@test -f $(CLASSROOM)/nbgrader_config.py || $(MAKE) --no-print-directory assignments
	@echo "==> Starting JupyterLab on the course directory $(CLASSROOM)/ with nbgrader:"
	@echo "    menu Nbgrader > Formgrader (or /formgrader) grades, collects and gives feedback"
	cd $(CLASSROOM) && PATH="$(abspath $(BIN)):$$PATH" \
		$(abspath $(BIN))/jupyter lab $(ALLOW_ROOT) $(LAB_ARGS)

## test: ruff, the package tests, then every notebook under nbval
test: lint test-package test-notebooks

test-package: $(DEV_INSTALLED)
	$(BIN)/python -m pytest tests -m "not lab and not binder and not hub and not grading"

## test-grading: nbgrader's round trip (release, autograde, feedback) for the notebooks that
## train a model: the instructor's answers score full marks, an untouched copy 0 (minutes)
test-grading: $(DEV_INSTALLED)
	$(BIN)/python -m pytest tests/test_assignments.py -m grading

## test-browser: the course in JupyterLab in headless Chromium (apt: chromium chromium-driver),
## and `make lab` started as an unprivileged user; screenshots in build/browser/
test-browser: $(DEV_INSTALLED)
	$(BIN)/python -m pytest tests -m lab

## test-binder: binder/requirements.txt into a fresh venv as repo2docker does (downloads)
test-binder: $(DEV_INSTALLED)
	$(BIN)/python -m pytest tests -m binder

test-notebooks: $(DEV_INSTALLED)
ifneq ($(NOTEBOOKS),)
	$(BIN)/python -m pytest $(NBVAL) $(NOTEBOOKS)
else
	@echo "no notebooks yet: nothing for nbval to run"
endif

## test-reruns: nbval, then each notebook's exercises and unchecked-output cells (training,
## sampling, timing) run again in the same kernel, with the cell after each: every cell can be
## re-run (not yet part of `make test`: some notebooks still fail it)
test-reruns: $(DEV_INSTALLED)
	$(BIN)/python -m pytest $(NBVAL) --rerun-cells $(NOTEBOOKS)

## notebooks: re-execute every notebook in place (outputs stored for nbval to compare)
notebooks: $(DEV_INSTALLED)
	$(BIN)/python tests/execute_notebooks.py $(NOTEBOOKS)

## bench: the speed tables of benchmarks/README.md
bench: $(DEV_INSTALLED)
	$(BIN)/python benchmarks/bench_training_step.py
	$(BIN)/python benchmarks/bench_generation.py
	$(BIN)/python benchmarks/bench_attention_scaling.py

## bench-memory: each notebook's kernel memory (peak, after the last cell) under nbclient
bench-memory: $(DEV_INSTALLED)
	$(BIN)/python benchmarks/bench_memory.py

# Student versions: nbgrader's generate_assignment with the course's configuration
# (classroom/nbgrader_config.py), whose `student_version` opens each scaffold and drops the
# "Try it first" line, the same on the hub. It comes with classroom/tfscratch_exchange.py (the
# exchange's submit and collect, safe between students on a shared machine).
COURSE_CONFIG := classroom/nbgrader_config.py classroom/tfscratch_exchange.py

## assignments: student versions of every notebook (nbgrader) in build/classroom/release/
# nbgrader starts alembic (the gradebook's migrations) from PATH, so the venv goes first.
assignments: $(CLASSROOM_INSTALLED)
	rm -rf $(CLASSROOM)/source $(CLASSROOM)/release
	@for nb in $(NOTEBOOKS); do \
		name=$$(basename $$nb .ipynb); mkdir -p $(CLASSROOM)/source/$$name && cp $$nb $(CLASSROOM)/source/$$name/; \
	done
	cp $(COURSE_CONFIG) $(CLASSROOM)/
	cd $(CLASSROOM) && PATH="$(abspath $(BIN)):$$PATH" $(abspath $(BIN))/nbgrader generate_assignment "*" --force --log-level=WARN
	@echo "student notebooks in $(CLASSROOM)/release/; see README.md, 'For instructors'"

## exercises: blank copies of the notebooks (the answers taken out, as nbgrader's student
## versions) in build/exercises/, to work without the answers: make lab LAB_DIR=build/exercises
# A copy you already have is kept (your work is not overwritten): delete it for a fresh one.
# The copies are made from the notebooks as committed (git show HEAD:...), not from the ones
# your Lab may have changed in notebooks/ (a clone without git: from the files).
EXERCISES := build/exercises
exercises: $(CLASSROOM_INSTALLED)
	rm -rf $(EXERCISES)/.nbgrader && mkdir -p $(EXERCISES)/.nbgrader
	@for nb in $(NOTEBOOKS); do \
		name=$$(basename $$nb .ipynb); mkdir -p $(EXERCISES)/.nbgrader/source/$$name && \
		if git cat-file -e HEAD:./$$nb 2>/dev/null; then \
			git show HEAD:./$$nb > $(EXERCISES)/.nbgrader/source/$$name/$$name.ipynb; \
		else cp $$nb $(EXERCISES)/.nbgrader/source/$$name/; fi; \
	done
	cp $(COURSE_CONFIG) $(EXERCISES)/.nbgrader/
	cd $(EXERCISES)/.nbgrader && PATH="$(abspath $(BIN)):$$PATH" \
		$(abspath $(BIN))/nbgrader generate_assignment "*" --force --log-level=WARN
	@for nb in $(NOTEBOOKS); do \
		name=$$(basename $$nb .ipynb); \
		if [ -e $(EXERCISES)/$$name.ipynb ]; then echo "kept your $(EXERCISES)/$$name.ipynb"; \
		else cp $(EXERCISES)/.nbgrader/release/$$name/$$name.ipynb $(EXERCISES)/; fi; \
	done
	rm -rf $(EXERCISES)/.nbgrader
	@echo "blank notebooks in $(EXERCISES)/: open them with make lab LAB_DIR=$(EXERCISES)"

## hub: (instructors, as root) a JupyterHub on this machine to try the class: local accounts,
## nbgrader's exchange, the Assignments tab for students and the formgrader for the instructor
## (make hub HUB_PORT=8000 HUB_INSTRUCTOR=tfs-instructor HUB_STUDENTS="tfs-student1 tfs-student2")
# The users' environment is a venv of its own, made with a Python every account can run (the
# one that made .venv may live in root's private home, e.g. pyenv's), and holds the package
# itself, not a link to this clone. HUB must be a folder every account can read
# (classroom/hub.py checks, and says so); HUB_STATE holds the exchange, the users'
# configuration and the hub's database. README.md, "Teach this course", says what it does.
HUB ?= build/hub
HUB_VENV = $(HUB)/venv
HUB_STATE ?= $(HUB)/state
HUB_PYTHON ?= $(firstword $(wildcard /usr/local/bin/python3 /usr/bin/python3) $(PYTHON))
HUB_IP ?= 127.0.0.1
HUB_PORT ?= 8000
HUB_INSTRUCTOR ?= tfs-instructor
HUB_STUDENTS ?= tfs-student1 tfs-student2
HUB_INSTALLED = $(HUB_VENV)/.installed-hub
CONFIGURABLE_HTTP_PROXY := configurable-http-proxy@5.3.0
HUB_PROXY = $(HUB)/node_modules/.bin/configurable-http-proxy
HUB_NEEDS_ROOT = @test "$$(id -u)" = 0 || { echo "==> make hub creates local accounts and starts\
 each user's server as that account, which only root may do: run it as root (sudo make hub)." >&2;\
 exit 1; }

.PHONY: hub test-hub

$(HUB_INSTALLED): pyproject.toml constraints.txt $(wildcard tfscratch/*.py tfscratch/*/*.py tfscratch/assets/*)
	$(HUB_NEEDS_ROOT)
	@echo "==> Installing the users' environment of the hub into $(HUB_VENV)/ with $(HUB_PYTHON)"
	@test -x $(HUB_VENV)/bin/pip || $(HUB_PYTHON) -m venv $(HUB_VENV)
	@# from a copy of the package, so that nothing in this clone is built (and owned) by root
	src=$$(mktemp -d) && cp -r pyproject.toml README.md tfscratch "$$src" && \
		$(HUB_VENV)/bin/python -m pip install --disable-pip-version-check -c constraints.txt \
		"$$src[lab,classroom,hub]"; status=$$?; rm -rf "$$src"; exit $$status
	@touch $@

$(HUB_PROXY):
	$(HUB_NEEDS_ROOT)
	@echo "==> Installing JupyterHub's proxy ($(CONFIGURABLE_HTTP_PROXY)) from npm into $(HUB)/"
	npm install --prefix $(HUB) --no-audit --no-fund $(CONFIGURABLE_HTTP_PROXY)

hub: $(HUB_INSTALLED) $(HUB_PROXY)
	$(HUB_NEEDS_ROOT)
	$(HUB_VENV)/bin/python classroom/hub.py --venv $(HUB_VENV) --proxy $(HUB_PROXY) \
		--state $(HUB_STATE) --ip $(HUB_IP) --port $(HUB_PORT) \
		--instructor $(HUB_INSTRUCTOR) --students "$(HUB_STUDENTS)"

## test-hub: (root) one assignment through `make hub`'s exchange, with real accounts, and Chromium
test-hub: $(DEV_INSTALLED)
	$(BIN)/python -m pytest tests -m hub

lint: $(DEV_INSTALLED)
	$(BIN)/ruff check tfscratch tests benchmarks classroom jupyter
	$(BIN)/ruff format --check tfscratch tests benchmarks classroom jupyter

clean:
	rm -rf $(VENV) build .pytest_cache
