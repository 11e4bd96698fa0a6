# Two commands on a fresh machine:
#   make campaign   every CPU stage of the default campaign, end to end
#   make test       the test suite (what CI runs)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: campaign test lint bench clean

$(BIN)/.installed: pyproject.toml requirements/lock.txt
	$(PYTHON) -m venv $(VENV)
	@echo "installing the pinned environment into $(VENV) (log: $(VENV)/install.log)"
	@$(BIN)/python -m pip install --disable-pip-version-check -c requirements/lock.txt -e '.[test]' \
		> $(VENV)/install.log 2>&1 || (tail -30 $(VENV)/install.log; exit 1)
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
