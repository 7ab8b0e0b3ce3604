#!/usr/bin/env bash
# The GPU check (issue 65 point 5): plans at scale run on this machine's CUDA devices, each measured step and peak
# memory beside the GPU model's (benchmarks/gpu_check.py says what runs). One prepared call of the device tool:
#
#   device run: bash scripts/gpu_check.sh          (carry: [".whl"]; results under $OUT, else experiments/gpu_check)
#
# The device image has torch, transformers, numpy, scipy, numba and cloudpickle but not gymnasium, which importing
# placement_env needs: before the call, on this machine, in the repository's root,
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_17_x86_64 -d .whl gymnasium==1.4.0 farama-notifications==0.0.6
# (the versions of .venv; `pip show gymnasium farama-notifications` says them). The Python part stops starting
# plans after GPU_CHECK_BUDGET_S seconds (default 420) and the whole after 540 s, inside a 10-minute call.
set -euo pipefail
cd "$(dirname "$0")/.."
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
out="${OUT:-experiments/gpu_check}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv > "$out/nvidia_smi.csv" || true
timeout 540 python3 benchmarks/gpu_check.py --out "$out" --budget-s "${GPU_CHECK_BUDGET_S:-420}" "$@" \
  2>&1 | tee "$out/gpu_check.log"
