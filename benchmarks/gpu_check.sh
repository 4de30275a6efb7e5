#!/usr/bin/env bash
# GPU check, for a host with a CUDA device (`make gpu-check`): a short workflow run on tests/data/gpu.yaml (device
# cuda; device, pinned-host and managed memory tiers; NVML energy; Kineto traces with CUDA kernels), then the tests
# that need a GPU, a digest of the results (benchmarks/gpu_digest.py) and two CUDA traces. On an H200 the workflow
# took 6 to 8 minutes, the GPU tests 15 to 30 s (benchmarks/records/measurements.md). Ends with a SUMMARY line.
#
# Everything it writes is under OUTDIR (default results/gpu-check): the workflow runs there (OUTDIR/results,
# OUTDIR/logs, OUTDIR/.snakemake: never the study in ./results), beside the check's own logs (host.txt, snakemake.log,
# pytest.log, digest.txt), the traces and results.tar.gz. Run again with the same OUTDIR, the workflow resumes.
# First it installs what the config needs: the `nvml` extra (`pip install -e '.[nvml]'`) where the config's energy
# meter is nvml, or auto on a CUDA device, and pynvml does not import.
#
# Usage: bash benchmarks/gpu_check.sh [--dry-run] [--config FILE] [OUTDIR] [SNAKEMAKE_SECONDS] [TEST_SECONDS]
#   --config FILE  the workflow's config (default tests/data/gpu.yaml; e.g. config/gpu.yaml, the full GPU study)
#   --dry-run      print what it would run, one `+ command` line each, and run nothing (works without a GPU)
#   SKIP_TESTS=1   the workflow and digest only (e.g. resuming an interrupted check); PYTHON: the interpreter
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dry=; config=tests/data/gpu.yaml; pos=()
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) dry=1 ;;
    --config) config=${2:?--config needs a file}; shift ;;
    --config=*) config=${1#--config=} ;;
    -h|--help) sed -n '2,/^set /p' "$0" | sed '$d'; exit 0 ;;
    -*) echo "gpu_check.sh: unknown option $1" >&2; exit 2 ;;
    *) pos+=("$1") ;;
  esac
  shift
done
out=${pos[0]:-results/gpu-check}; limit=${pos[1]:-600}; test_limit=${pos[2]:-180}
[ -f "$config" ] || { echo "gpu_check.sh: no config file $config" >&2; exit 2; }
config=$(realpath "$config")
out=$(realpath -m "$out")
[ -n "$dry" ] || mkdir -p "$out"
PY=${PYTHON:-python3}
export PYTHONPATH="$root/src:$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

say() { echo "+ $*"; }  # the command about to run (all that --dry-run does)

# What the config needs: NVML where it names the nvml meter, or auto (the default) on a CUDA device.
needs=$($PY - "$config" <<'EOF'
import sys

import yaml

cfg = yaml.safe_load(open(sys.argv[1])) or {}
meter = (cfg.get("energy") or {}).get("meter", "auto")
print("nvml" if meter == "nvml" or (meter == "auto" and str(cfg.get("device", "cpu")).startswith("cuda")) else "")
EOF
) || { echo "gpu_check.sh: cannot read $config" >&2; exit 2; }
if [ "$needs" = nvml ]; then
  if $PY -c "import pynvml" 2>/dev/null; then
    echo "== nvml: pynvml imports, nothing to install"
  else
    echo "== nvml: the config's energy meter needs the nvml extra"
    say "$PY" -m pip install -q -e "$root[nvml]"
    [ -n "$dry" ] || $PY -m pip install -q -e "$root[nvml]" || { echo "gpu_check.sh: installing nvml failed" >&2; exit 1; }
  fi
fi

smk=("$PY" -m snakemake -s "$root/Snakefile" --directory "$out" --cores 4 --keep-going --configfile "$config" --
     results/figures)
tests=(tests/test_energy.py tests/test_placement.py tests/test_timing.py tests/test_trace.py tests/test_insitu.py
       tests/test_training.py tests/test_coplace.py)
if [ -n "$dry" ]; then
  echo "== dry run: config $config, everything under $out"
  say nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv ">" "$out/host.txt"
  say timeout "$limit" "${smk[@]}" ">" "$out/snakemake.log"
  [ -n "${SKIP_TESTS:-}" ] || say timeout "$test_limit" "$PY" -m pytest -q -p no:cacheprovider -rs "${tests[@]}" \
    ">" "$out/pytest.log"
  say "$PY" benchmarks/gpu_digest.py "$out/results" ">" "$out/digest.txt"
  say tar czf "$out/results.tar.gz" -C "$out" --exclude='*.json.gz' results logs
  exit 0
fi

nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv | tee "$out/host.txt"
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))" \
  | tee -a "$out/host.txt"

echo "== workflow on $config, in $out"
start=$(date +%s)
timeout "$limit" "${smk[@]}" > "$out/snakemake.log" 2>&1
run_rc=$?
echo "snakemake rc=$run_rc in $(( $(date +%s) - start )) s"; tail -n 25 "$out/snakemake.log"

tests_rc=skipped
if [ -z "${SKIP_TESTS:-}" ]; then
  echo "== GPU tests"
  timeout "$test_limit" $PY -m pytest -q -p no:cacheprovider -rs "${tests[@]}" 2>&1 | tee "$out/pytest.log"
  tests_rc=${PIPESTATUS[0]}
fi

echo "== digest"
$PY benchmarks/gpu_digest.py "$out/results" 2>&1 | tee "$out/digest.txt"
for m in inference training; do
  cp "$out/results/trace/tiny_dlrm/${m}_b8.json.gz" "$out/cuda_trace_tiny_dlrm_${m}_b8.json.gz" 2>/dev/null
done
tar czf "$out/results.tar.gz" -C "$out" --exclude='*.json.gz' results logs 2>/dev/null
echo "SUMMARY tests_rc=$tests_rc snakemake_rc=$run_rc"
