# Two commands on a fresh machine:
#   make campaign   every CPU stage of the default campaign, end to end
#   make test       the test suite (what CI runs)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: campaign test lint bench clean

$(BIN)/.installed: pyproject.toml requirements/lock.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements/lock.txt -e '.[test]'
	touch $@

campaign: $(BIN)/.installed
	$(BIN)/specrepro run --cpu-only $(OVERRIDES)

test: $(BIN)/.installed
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: $(BIN)/.installed
	$(BIN)/snakemake --lint --config overrides='[]'
	$(BIN)/snakefmt --check Snakefile workflow/rules

bench: $(BIN)/.installed
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf results .snakemake
