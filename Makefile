# Quick start: `make train` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
CONFIG ?= configs/mt10_cagrad.yaml
ARGS   ?=

.PHONY: install train test test-slow bench clean

install: $(STAMP)

# torch==2.13.0 first: it resolves to the local CPU wheel where one is provided (no CUDA
# download on CPU machines); elsewhere pip takes whatever torch the registry serves.
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "morl needs Python 3.11+, found " + sys.version.split()[0])'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "torch==2.13.0" || $(BIN)/python -m pip install -q torch
	$(BIN)/python -m pip install -q -e ".[all]"
	@touch $(STAMP)

train: $(STAMP)
	$(BIN)/morl train $(CONFIG) $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(ARGS); rc=$$?; [ $$rc -eq 5 ] && echo "no tests collected" && exit 1; exit $$rc

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow $(ARGS)

bench: $(STAMP)
	$(BIN)/morl bench aggregators

clean:
	rm -rf $(VENV) runs .pytest_cache

# Mutation testing of the numerical core (docs/testing.md): `make mutate`, or one module with
# `make mutate MODULE=morl/solvers` (a folder or a .py file under morl/ or agents/).
# Results accumulate in mutants/; the score table is printed at the end.
MODULE      ?=
MUTATE_JOBS ?= 2
MUTMUT      := mutmut==3.8.1
.PHONY: mutate
mutate: $(STAMP)
	@$(BIN)/python -c 'import mutmut' 2>/dev/null || $(BIN)/python -m pip install -q "$(MUTMUT)"
	OMP_NUM_THREADS=1 $(BIN)/mutmut run --max-children $(MUTATE_JOBS) $(if $(MODULE),"$(subst /,.,$(basename $(MODULE:/=))).*")
	@$(BIN)/python tools/mutation_score.py $(MODULE)
