# Thin aliases that CI calls too. Every target runs offline (see qgate/offline.py for the why).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

export PATH := $(abspath $(BIN)):$(PATH)
export YOLO_OFFLINE := 1
export YOLO_AUTOINSTALL := False
export YOLO_CONFIG_DIR := $(abspath .cache/ultralytics)
export DVC_NO_ANALYTICS := 1
export MPLBACKEND := Agg

# the TORCH_INDEX_URL torch was last installed from
TORCH_INDEX := $(VENV)/.torch_index
PIP := $(BIN)/pip install --disable-pip-version-check -q

.DEFAULT_GOAL := help
.PHONY: help setup test test-fast inputs repro gate tune runtimes sample report view pull promote lint clean FORCE

help:  ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## /  make \1\t/' | expand -t 22

setup: $(STAMP)  ## create .venv with the pinned requirements (idempotent; TORCH_INDEX_URL: torch's index)
	@# .gitattributes' `merge=ours` (a fork keeps its own metrics, dvc.lock and params.yaml when merging upstream)
	@if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then git config merge.ours.driver true; fi

# Rewritten only when TORCH_INDEX_URL differs from the last install's, so that changing it re-installs torch
$(TORCH_INDEX): FORCE
	@mkdir -p $(VENV)
	@printf '%s\n' "$(TORCH_INDEX_URL)" | cmp -s - $@ || printf '%s\n' "$(TORCH_INDEX_URL)" > $@

$(STAMP): requirements.txt $(TORCH_INDEX)
	@# a Python outside pyproject.toml's requires-python is refused in one line, before anything installs
	test -x $(BIN)/python || { $(PYTHON) .ci/python_supported.py && $(PYTHON) -m venv $(VENV); }
	$(BIN)/python .ci/python_supported.py
	# torch + torchvision with the same pins from TORCH_INDEX_URL when set (CI: PyTorch's CPU index), else
	# from the default index; forced when the index changed (a CPU wheel and a CUDA one share a version)
	$(PIP) $(if $(filter $(TORCH_INDEX),$?),--force-reinstall --no-deps) \
		$(if $(TORCH_INDEX_URL),--index-url "$(TORCH_INDEX_URL)") $$(grep -E '^torch(vision)?==' requirements.txt)
	$(PIP) -r requirements.txt
	$(BIN)/opt_in_out --opt_out >/dev/null
	touch $(STAMP)

# Parallel lanes of `make test` (pytest-xdist; 0: one process). Tests sharing a file or the demo's pipeline share a
# lane (tests/conftest.py); two lanes fit the 2-vCPU machines CI runs on (docs/testing.md)
TEST_WORKERS ?= 2

test: setup  ## every test, as CI runs it, in TEST_WORKERS parallel lanes (docs/testing.md)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder $(PYTEST_ARGS)

test-fast: setup  ## the inner loop (minutes): no model built, no training, no pipeline run, no Ray (docs/testing.md)
	$(BIN)/python -m pytest -m "not slow and not cluster and not model" $(PYTEST_ARGS)

# The stages the gates read, and whatever they need: the demo's data and training run only when model.*
# points at the demo (they are upstream of export then), never for your own detector (qgate.gates.GATED_STAGES).
GATED_STAGES := export baseline quantize int8_eval robustness benchmark divergence sensitivity autofix

inputs: setup  ## the model and data the gated stages read: here, pulled from the DVC remote, or one line naming them
	$(BIN)/python -m qgate.inputs

repro: inputs  ## run the DVC stages the gates need (with the default params: the embedded demo)
	$(BIN)/dvc repro $(DVC_REPRO_FLAGS) $(GATED_STAGES)

gate: repro  ## pipeline, then the gates (JUnit XML), the report and a verdict table; non-zero when a gate fails
	$(BIN)/python -m qgate.judge

tune: inputs  ## search quantize settings for the fastest INT8 model that passes the gates (docs/tune.md); prints the block
	$(BIN)/dvc repro $(DVC_REPRO_FLAGS) tune/dvc.yaml
	@cat reports/tune_quantize.yaml

runtimes: inputs  ## judge the model on every runtime (OpenVINO, ONNX Runtime) and time them side by side (docs/runtimes.md)
	$(BIN)/dvc repro $(DVC_REPRO_FLAGS) runtimes/dvc.yaml
	@cat reports/runtimes.md

sample: repro  ## the README's verdict output and docs/sample/report.{html,png} (headless Chromium) from the metrics
	$(BIN)/python -m qgate.sample

report: setup  ## rewrite reports/report.md and report.html from the current metrics (no stage runs)
	$(BIN)/python -m qgate.report

# Model Explorer on 127.0.0.1 only, reading no file but the graph and its overlays (qgate/explorer_server.py); under
# CI (no browser) the overlay files are written and the command says how to open them
VIEW_PORT ?= 8080

view: setup  ## the graph in Model Explorer, divergence painted on it, at the worst layer (VIEW_PORT; Ctrl-C stops it)
	VIEW_PORT=$(VIEW_PORT) $(BIN)/python -m qgate.view $(if $(CI),--files-only)

pull: inputs  ## the gated stages' committed outputs, from the DVC remote (else the DVC cache): what promote registers
	if [ -n "$$($(BIN)/dvc remote list)" ]; then $(BIN)/dvc pull -q --with-deps $(GATED_STAGES); \
	else $(BIN)/dvc checkout -q --with-deps $(GATED_STAGES); fi

promote: setup  ## register the INT8 model that passed every gate as a GTO version + stage (PROMOTE_FLAGS=--push)
	$(BIN)/python -m qgate.promote $(PROMOTE_FLAGS)

lint: setup  ## byte-compile, pyflakes, and the workflow files against GitHub's schema and zizmor
	$(BIN)/python -m compileall -q qgate stages gates tests benchmarks
	$(BIN)/python -m pyflakes qgate stages gates tests benchmarks
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
	$(BIN)/zizmor --offline .github/workflows

clean: setup  ## delete untracked pipeline outputs (models, data and results git tracks stay; not the venv)
	$(BIN)/python -m qgate.clean
