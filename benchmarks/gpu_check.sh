#!/usr/bin/env bash
# GPU check, for a host with a CUDA device: a short workflow run on
# tests/data/gpu.yaml (device cuda; device, pinned-host and managed memory tiers; NVML energy; Kineto traces with
# CUDA kernels). Writes its logs, a digest of the results (benchmarks/gpu_digest.py) and two CUDA traces to OUTDIR
# (default gpu_check/) and ends with a SUMMARY line. On an H200 the whole workflow took 6 to 8 minutes, the GPU tests
# 15 to 30 s (docs/measurements.md).
# The workflow runs first, then the tests that need a GPU.
# Usage: bash benchmarks/gpu_check.sh [OUTDIR] [SNAKEMAKE_SECONDS] [TEST_SECONDS]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu_check}; limit=${2:-600}; test_limit=${3:-180}
mkdir -p "$out"
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv | tee "$out/host.txt"
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))" \
  | tee -a "$out/host.txt"

echo "== workflow on tests/data/gpu.yaml"
start=$(date +%s)
timeout "$limit" $PY -m snakemake --cores 4 --keep-going --configfile tests/data/gpu.yaml -- results/figures \
  > "$out/snakemake.log" 2>&1
run_rc=$?
echo "snakemake rc=$run_rc in $(( $(date +%s) - start )) s"; tail -n 25 "$out/snakemake.log"

tests_rc=skipped
if [ -z "${SKIP_TESTS:-}" ]; then  # SKIP_TESTS=1: the workflow only (e.g. resuming an interrupted check's results/)
  echo "== GPU tests"
  timeout "$test_limit" $PY -m pytest -q -p no:cacheprovider -rs tests/test_energy.py tests/test_placement.py \
    tests/test_timing.py tests/test_trace.py tests/test_insitu.py tests/test_training.py tests/test_coplace.py \
    2>&1 | tee "$out/pytest.log"
  tests_rc=${PIPESTATUS[0]}
fi

echo "== digest"
$PY benchmarks/gpu_digest.py results 2>&1 | tee "$out/digest.txt"
for m in inference training; do
  cp results/trace/tiny_dlrm/${m}_b8.json.gz "$out/cuda_trace_tiny_dlrm_${m}_b8.json.gz" 2>/dev/null
done
tar czf "$out/results.tar.gz" --exclude='*.json.gz' results logs 2>/dev/null
echo "SUMMARY tests_rc=$tests_rc snakemake_rc=$run_rc"
