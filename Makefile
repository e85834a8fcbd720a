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

.PHONY: setup test repro gate report promote lint clean

setup: $(STAMP)  ## create .venv with the pinned requirements (idempotent)

$(STAMP): requirements.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# TORCH_INDEX_URL (CI sets PyTorch's CPU index): torch and torchvision from there, same pins
	if [ -n "$(TORCH_INDEX_URL)" ]; then $(BIN)/pip install --disable-pip-version-check -q \
		--index-url "$(TORCH_INDEX_URL)" $$(grep -E '^torch(vision)?==' requirements.txt); fi
	$(BIN)/pip install --disable-pip-version-check -q -r requirements.txt
	$(BIN)/opt_in_out --opt_out >/dev/null
	touch $(STAMP)

test: setup  ## unit, bad-input, pipeline and (beside ../shared/reference) reference tests; PYTEST_ARGS narrows
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The stages the gates read, and whatever they need: the demo's data and training run only when model.*
# points at the demo (they are upstream of export then), never for your own detector.
GATED_STAGES := export baseline quantize int8_eval benchmark divergence sensitivity autofix

repro: setup  ## run the DVC stages the gates need (with the default params: the embedded demo)
	$(BIN)/dvc repro $(DVC_REPRO_FLAGS) $(GATED_STAGES)

gate: repro  ## pipeline, then the gates (JUnit XML), the report and a verdict table; non-zero when a gate fails
	$(BIN)/python -m qgate.judge

report: setup  ## rewrite reports/report.md and report.html from the current metrics (no stage runs)
	$(BIN)/python -m qgate.report

promote: setup  ## register the INT8 model that passed every gate as a GTO version + stage (PROMOTE_FLAGS=--push)
	$(BIN)/python -m qgate.promote $(PROMOTE_FLAGS)

lint: setup  ## byte-compile, pyflakes, and the workflow files against GitHub's schema and zizmor
	$(BIN)/python -m compileall -q qgate stages gates tests benchmarks
	$(BIN)/python -m pyflakes qgate stages gates tests benchmarks
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
	$(BIN)/zizmor --offline .github/workflows

clean:  ## remove pipeline outputs (not the venv)
	rm -rf data/demo models metrics artifacts reports .cache
