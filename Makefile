# Two commands on a fresh machine:
#   make campaign   the seed campaign on real sglang servers on this CPU (toy model), end to end
#   make test       the test suite (what CI runs)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: campaign test lint bench clean profiles

SNAKEMAKE_PROFILES := $(or $(XDG_CONFIG_HOME),$(HOME)/.config)/snakemake

$(BIN)/.installed: pyproject.toml requirements/lock.txt
	$(PYTHON) -m venv $(VENV)
	@echo "installing the pinned environment into $(VENV) (log: $(VENV)/install.log)"
	@$(BIN)/python -m pip install --disable-pip-version-check -c requirements/lock.txt -e '.[test]' \
		> $(VENV)/install.log 2>&1 || (tail -30 $(VENV)/install.log; exit 1)
	@$(MAKE) --no-print-directory profiles
	touch $@

# `snakemake --profile rocm` (and cuda) as typed: Snakemake looks for profiles
# by name in $(SNAKEMAKE_PROFILES); link ours there, never over someone else's.
profiles:
	@mkdir -p $(SNAKEMAKE_PROFILES)
	@for p in rocm cuda; do \
		dest=$(SNAKEMAKE_PROFILES)/$$p; \
		if [ -e $$dest ] && [ "$$(readlink -f $$dest)" != "$(CURDIR)/profiles/$$p" ]; then \
			echo "$$dest exists and is not specrepro's; use --profile $(CURDIR)/profiles/$$p"; \
		else ln -sfn $(CURDIR)/profiles/$$p $$dest && echo "snakemake --profile $$p -> $$dest"; fi; \
	done

# GSM8K's test set (conf/config.yaml data.gsm8k): fetched from GitHub into .cache/datasets/ and held to its sha256
# where GitHub is reachable; else give a folder that holds gsm8k/test.jsonl, SPECREPRO_DATA_DIR=/data.  A copy beside
# this checkout (../shared/data, as in this project's workplace) is used when it is there, and the run says so.
SHARED_DATA := $(abspath $(CURDIR)/../shared/data)
ifneq ($(wildcard $(SHARED_DATA)/gsm8k/test.jsonl),)
export SPECREPRO_DATA_DIR ?= $(SHARED_DATA)
endif

# The seed campaign's arms on real sglang 0.5.20 servers on this CPU, with the toy model
# (conf/experiment/eagle_topk_cpu.yaml); `specrepro run --cpu-only` runs only the checks of the GPU campaign.
campaign: $(BIN)/.installed
	@echo "GSM8K: $(if $(SPECREPRO_DATA_DIR),$(SPECREPRO_DATA_DIR)/gsm8k/test.jsonl (SPECREPRO_DATA_DIR),fetched once into .cache/datasets/ (set SPECREPRO_DATA_DIR=FOLDER to read a local copy))"
	$(BIN)/specrepro run experiment=eagle_topk_cpu $(OVERRIDES)

# every layer of tests/budget.toml under pytest-xdist, then the time per layer, per group and the 15 slowest tests
test: $(BIN)/.installed
	$(BIN)/python tests/run_layers.py $(PYTEST_ARGS)

lint: $(BIN)/.installed
	$(BIN)/snakemake --lint --config overrides='[]'
	$(BIN)/snakefmt --check Snakefile workflow/rules

bench: $(BIN)/.installed
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf results .snakemake
