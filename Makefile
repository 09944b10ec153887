# edgedp — every target creates/uses the local virtualenv .venv with all extras installed.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test bench lint clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[all]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/edgedp demo --out demo-out

test: $(STAMP)
	$(VENV)/bin/ruff check edgedp sim firmware_py topologies edgedp_cli tests benchmarks scripts
	$(PY) -m pytest -n 2 -q

bench: $(STAMP)
	@for f in benchmarks/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

lint: $(STAMP)
	$(VENV)/bin/ruff check edgedp sim firmware_py topologies edgedp_cli tests benchmarks scripts

clean:
	rm -rf $(VENV) demo-out build *.egg-info
