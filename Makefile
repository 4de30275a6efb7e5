# Two entry points (README quick start): `make run` and `make test`. Both create .venv on first use.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.opcost-installed

.PHONY: setup run test gpu-check lint report clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

run: setup  ## the main job on the default config
	$(BIN)/snakemake --cores 1 results/figures

test: setup  ## the test suite: two processes, then the tests that time a known construction alone on the machine
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not timing"
	$(BIN)/python -m pytest -q -m timing

GPU_CONFIG ?= tests/data/gpu.yaml
GPU_CHECK_ARGS ?=
gpu-check: setup  ## on a CUDA host: a short workflow run and the GPU tests, under results/gpu-check/ (benchmarks/gpu_check.sh)
	PYTHON=$(abspath $(BIN))/python bash benchmarks/gpu_check.sh --config $(GPU_CONFIG) $(GPU_CHECK_ARGS)

lint: setup
	$(BIN)/snakemake --lint

report: run
	$(BIN)/snakemake --report report.html

clean:
	rm -rf results logs .snakemake report.html
