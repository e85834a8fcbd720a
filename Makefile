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

.PHONY: setup test repro lint clean

setup: $(STAMP)  ## create .venv with the pinned requirements (idempotent)

$(STAMP): requirements.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -r requirements.txt
	$(BIN)/opt_in_out --opt_out >/dev/null
	touch $(STAMP)

test: setup  ## unit, bad-input, pipeline and (beside ../shared/reference) reference tests
	$(BIN)/python -m pytest

repro: setup  ## run the DVC pipeline on the embedded demo
	$(BIN)/dvc repro

lint: setup
	$(BIN)/python -m compileall -q qgate stages gates tests benchmarks

clean:  ## remove pipeline outputs (not the venv)
	rm -rf data/demo models metrics artifacts reports .cache
