# Quick start: `make train` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
CONFIG ?=
ARGS   ?=

LOCK   := requirements/lock.txt

.PHONY: install train test test-all lint bench clean lock morl-baselines morl-baselines-runs

install: $(STAMP)

# The tested set, exactly: every package pinned by requirements/lock.txt (README, "Dependencies"),
# then morl itself without resolving anything further (built with the locked setuptools, no
# build-isolation download), then pip's own consistency check.
# The lock pins torch==2.13.0: pip takes the CPU wheel where one lies in its find-links (no CUDA
# download on CPU machines); elsewhere the registry's build of that release.
# Each step says what it does; the build's own output (setuptools' banner) goes to a log shown
# only when the step fails.
$(STAMP): export PIP_DISABLE_PIP_VERSION_CHECK = 1
$(STAMP): pyproject.toml $(LOCK)
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "morl needs Python 3.11+, found " + sys.version.split()[0])'
	@test -x $(BIN)/python || { echo "make install: creating the virtual environment $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "make install: [1/4] pip 26.3 into $(VENV)"
	@$(BIN)/python -m pip install -q "pip==26.3"
	@echo "make install: [2/4] the locked dependencies of $(LOCK) (torch among them: a few minutes on a first install)"
	@$(BIN)/python -m pip install -q -r $(LOCK)
	@echo "make install: [3/4] morl itself, editable (log: $(VENV)/install-morl.log)"
	@$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e . > $(VENV)/install-morl.log 2>&1 \
	  || { cat $(VENV)/install-morl.log; exit 1; }
	@echo "make install: [4/4] pip check (are the installed packages consistent?)"
	@$(BIN)/python -m pip check > $(VENV)/pip-check.log 2>&1 || { cat $(VENV)/pip-check.log; exit 1; }
	@touch $(STAMP)
	@echo "make install: done; activate the environment with: source $(VENV)/bin/activate (then: morl --help)"

# MT10: the seeds' CAGrad recipe on a GPU; without one, the CPU recipe (mean, smaller networks with LayerNorm,
# evaluation every 5k steps, checkpoints every 10 min), saying so. CONFIG=... picks any config.
train: $(STAMP)
	@cfg="$(CONFIG)"; \
	if [ -z "$$cfg" ]; then \
	  if $(BIN)/python -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then cfg=configs/mt10_cagrad.yaml; \
	  else cfg=configs/mt10_cpu.yaml; \
	    echo "make train: no GPU here, so MT10 with the CPU recipe $$cfg (plain MT-SAC, smaller networks with LayerNorm, evaluation every 5k steps);"; \
	    echo "            the seeds' 2M-step recipe (days on a CPU): make train CONFIG=configs/mt10_cagrad.yaml"; fi; \
	fi; \
	$(BIN)/morl train $$cfg $(ARGS)

# Two tiers (docs/testing.md): `make test` is the fast tier, everything not marked `integration`;
# `make test-all` adds the integration tier (subprocesses, SIGTERM and resume, Flower, Ray,
# packaging, video, long learning checks, Meta-World episodes). Both fail when nothing is collected.
PYTEST = $(BIN)/python -m pytest -q
test: $(STAMP)
	$(PYTEST) -m "not integration" $(ARGS); rc=$$?; [ $$rc -eq 5 ] && echo "no tests collected" && exit 1; exit $$rc

test-all: $(STAMP)
	$(PYTEST) $(ARGS); rc=$$?; [ $$rc -eq 5 ] && echo "no tests collected" && exit 1; exit $$rc

# ruff's rules and exclusions: pyproject.toml, [tool.ruff].
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)
	$(BIN)/morl bench aggregators

# MORL-Baselines 1.3.0 in its own environment (.venv-mob) for docs/results.md's side by side with
# CAPQL: its pins (Pillow < 12, wandb) cannot join the lock. morl goes in without dependencies, for
# tools/morl_baselines_run.py's evaluation and metrics.
MOB := .venv-mob
morl-baselines: export PIP_DISABLE_PIP_VERSION_CHECK = 1
morl-baselines:
	@test -x $(MOB)/bin/python || $(PYTHON) -m venv $(MOB)
	$(MOB)/bin/python -m pip install -q -r requirements/morl_baselines.txt
	$(MOB)/bin/python -m pip install -q --no-deps --no-build-isolation -e . > $(MOB)/install-morl.log 2>&1 \
	  || { cat $(MOB)/install-morl.log; exit 1; }
	@echo "make morl-baselines: done; run: $(MOB)/bin/python tools/morl_baselines_run.py --help"

# docs/results/rl.md's MORL-Baselines side: CAPQL and linear-scalarisation SAC, seeds 0-2, on both
# tasks, one run at a time (~45 CPU-minutes each). A finished run is kept; an interrupted one starts over.
MOB_RUNS ?= runs/morl_baselines
morl-baselines-runs: morl-baselines
	@for env in mo-hopper-v5 mo-halfcheetah-v5; do for algo in capql linear_sac; do for seed in 0 1 2; do \
	  out=$(MOB_RUNS)/$$algo-$$env-s$$seed; test -f $$out/final_metrics.json && continue; rm -rf $$out; \
	  echo "make morl-baselines-runs: $$out"; \
	  OMP_NUM_THREADS=1 $(MOB)/bin/python tools/morl_baselines_run.py --algo $$algo --env $$env --seed $$seed \
	    --out $$out || exit 1; \
	done; done; done

clean:
	rm -rf $(VENV) runs .pytest_cache

# Refresh the lock from pyproject.toml with uv (README, "Dependencies"). Versions already locked are
# kept unless pyproject.toml or requirements/constraints.txt rules them out; UPGRADE=1 moves every
# package to its newest allowed release. uv runs from a throwaway venv, not from .venv. Resolved for
# CPython 3.11 on x86-64 Linux; TORCH_WHEELS must hold torch's CPU wheel (constraints.txt says why).
UV           := uv==0.12.24
LOCK_VENV    ?= $(or $(TMPDIR),/tmp)/morl-lock-uv
TORCH_WHEELS ?= /opt/wheels
LOCK_ARGS    ?=
lock:
	@test -x $(LOCK_VENV)/bin/uv || { $(PYTHON) -m venv $(LOCK_VENV) && $(LOCK_VENV)/bin/python -m pip install -q "$(UV)"; }
	cp $(LOCK) $(LOCK).new
	$(LOCK_VENV)/bin/uv pip compile pyproject.toml --extra all -c requirements/constraints.txt -o $(LOCK).new \
	    --find-links $(TORCH_WHEELS) --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
	    --custom-compile-command "make lock" --quiet $(if $(UPGRADE),--upgrade) $(LOCK_ARGS)
	@if grep -qiE '^(nvidia-|triton)' $(LOCK).new; then rm -f $(LOCK).new; \
	    echo "make lock: the resolver took torch's CUDA build; give TORCH_WHEELS=<folder with the CPU wheel>" >&2; exit 1; fi
	sed -i 's/^torch==\([^+ ]*\)+cpu$$/torch==\1/' $(LOCK).new
	mv $(LOCK).new $(LOCK)
	@git diff --stat -- $(LOCK) 2>/dev/null || true

# Mutation testing of the numerical core (docs/testing.md): `make mutate`, or one module with
# `make mutate MODULE=morl/solvers` (the modules and their fast tests: tools/mutate.py);
# MUTATE_SAMPLE=N runs N random mutants per module. Results accumulate in mutants/; the score
# table is printed at the end.
MODULE        ?=
MUTATE_JOBS   ?= 2
MUTATE_SAMPLE ?= 0
MUTMUT      := mutmut==3.8.1
.PHONY: mutate
mutate: $(STAMP)
	@$(BIN)/python -c 'import mutmut' 2>/dev/null || $(BIN)/python -m pip install -q "$(MUTMUT)"
	$(BIN)/python tools/mutate.py $(MODULE) --jobs $(MUTATE_JOBS) --sample $(MUTATE_SAMPLE)
	@$(BIN)/python tools/mutation_score.py $(MODULE)
