# edgedp — every target creates/uses the local virtualenv .venv. `make test`, `lint` and
# `bench` install every extra; `make demo` only what the demo imports. Every install is
# pinned by constraints.txt (refresh it with `make constraints`).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install --quiet -c constraints.txt
ALL    := $(VENV)/.installed-all
DEMO   := $(VENV)/.installed-demo
CHECKED := edgedp edgedp_sim firmware_py edgedp_topologies edgedp_cli tests benchmarks scripts \
           experiments

.PHONY: demo test bench lint results constraints clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(ALL): pyproject.toml constraints.txt | $(PY)
	$(PIP) -e '.[all]'
	touch $(ALL) $(DEMO)

$(DEMO): pyproject.toml constraints.txt | $(PY)
	$(PIP) -e '.[demo]'
	touch $(DEMO)

demo: $(DEMO)
	$(VENV)/bin/edgedp demo --out demo-out

test: $(ALL)
	$(VENV)/bin/ruff check $(CHECKED)
	$(VENV)/bin/mypy
	$(PY) -m pytest -n 2 -q

bench: $(ALL)
	@for f in benchmarks/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

# every experiment again (or ONLY="NAME ...", STALE=1: those whose code changed, QUICK=1: the
# small versions CI compares with), then docs/RESULTS.md's tables from the outputs
results: $(ALL)
	$(PY) experiments/results.py run $(if $(QUICK),--quick) $(if $(STALE),--stale) $(ONLY)
	$(PY) experiments/results.py doc
	$(PY) experiments/results.py times

lint: $(ALL)
	$(VENV)/bin/ruff check $(CHECKED)
	$(VENV)/bin/mypy

# upgrade the venv to the newest versions pyproject.toml allows, then pin them
constraints: | $(PY)
	$(PY) -m pip install --quiet --upgrade --upgrade-strategy eager -e '.[all]'
	( echo "# Exact versions for make's installs (pip install -c constraints.txt ...)."; \
	  echo "# Refresh: make constraints (installs the newest allowed, then pins them)."; \
	  $(PY) -m pip freeze --all --exclude-editable | grep -v -i -E '^(pip|edgedp)[= @]' \
	) > constraints.txt
	touch $(ALL) $(DEMO)

clean:
	rm -rf $(VENV) demo-out build *.egg-info
