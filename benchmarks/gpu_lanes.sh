#!/usr/bin/env bash
# The second lease's run (issue 51): everything in about 9 minutes of one H200, four lanes at once.
# torch.compile is CPU work and the lent machine has 16 cores, so the lanes compile together while
# their timed steps take turns on the GPU (GPU_TURN_LOCK, benchmarks/gpuprof.py); the equivalence
# checks and the GPU tests hold the GPU alone the same way (flock on the same file).
#   lane hrm: gpu_levers.py HRM (default, nofused, optim, cgraphs, profile), then the HRM equivalence check
#   lane trm: gpu_levers.py TRM (default, optim, cgraphs, profile), then the TRM equivalence check
#   lane urm: gpu_levers.py URM (default, optim, profile), the URM equivalence check, then pytest -m gpu
#   lane gpt: looped GPT-2 small vs nanoGPT compiled (R = 1), bench_gpt R = 1, 3 (MFU), the memory sweep
# Each step runs under `timeout` capped by what is left of BUDGET_S; each lane logs to $OUT/lane_<id>.log.
#
#   OUT=/tmp/x bash benchmarks/gpu_lanes.sh     # references under .gpucarry/ (see gpu.sh for the wheels)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/out}
PY=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-540}
CARRY=${CARRY:-.gpucarry}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" WANDB_MODE=disabled PYTHONUNBUFFERED=1
export GPU_TURN_LOCK=/tmp/gpu.turn PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
: > "$GPU_TURN_LOCK"
START=$(date +%s)

if ! "$PY" -c "import omegaconf, hydra, pydantic" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi
echo "# hrm-deeploop GPU lanes, $(date -u), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), budget ${BUDGET_S} s"
"$PY" -c "import sys, torch, triton; print(f'# python {sys.version.split()[0]}, torch {torch.__version__}, triton {triton.__version__}')"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv,noheader
"$PY" -c "import torch; assert torch.cuda.is_available()" || { echo "# no CUDA GPU"; [ "${ALLOW_CPU:-0}" = 1 ] || exit 1; }

step() {  # step LANE NAME CAP CMD...: CMD under min(CAP, time left); one summary line in $OUT/summary
  local lane=$1 name=$2 cap=$3; shift 3
  local left=$(( BUDGET_S - ($(date +%s) - START) ))
  local t=$(( cap < left ? cap : left ))
  echo; echo "================ $name (timeout ${t} s, at $(( $(date +%s) - START )) s) ================"
  if [ "$t" -lt 20 ]; then echo "skipped: budget spent"; echo "$lane $name skipped" >> "$OUT/summary"; return; fi
  local t0=$(date +%s)
  timeout --kill-after=10 "$t" "$@"
  local rc=$? status=ok
  { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && status=timeout
  [ $rc -ne 0 ] && [ "$status" = ok ] && status="rc=$rc"
  printf '%-4s %-34s %-8s %4s s\n' "$lane" "$name" "$status" $(( $(date +%s) - t0 )) >> "$OUT/summary"
}
# hold the GPU alone (equivalence checks, GPU tests, the memory sweep): flock on the same file
ALONE=(flock "$GPU_TURN_LOCK"); command -v flock >/dev/null || { ALONE=(); echo "# no flock: steps run unlocked"; }
CHECK="--skip-speed --check-steps 2 --check-batch 8 --tol 1e-3 --device cuda --preset paper"

lane_hrm() {
  step hrm "HRM levers" 420 "$PY" benchmarks/gpu_levers.py --model hrm --reference "$CARRY/hrm-reference" \
    --device cuda --levers default nofused optim cgraphs --profile
  step hrm "HRM equivalence (strict)" 110 "${ALONE[@]}" "$PY" benchmarks/compare_reference_hrm.py \
    --reference "$CARRY/hrm-reference" $CHECK
}
lane_trm() {
  step trm "TRM levers" 400 "$PY" benchmarks/gpu_levers.py --model trm --reference "$CARRY/trm-reference" \
    --device cuda --levers default optim cgraphs --profile
  step trm "TRM equivalence (strict)" 110 "${ALONE[@]}" "$PY" benchmarks/compare_reference_trm.py \
    --reference "$CARRY/trm-reference" $CHECK --schemes baseline
}
lane_urm() {
  step urm "URM levers" 330 "$PY" benchmarks/gpu_levers.py --model urm --reference "$CARRY/urm-reference" \
    --device cuda --levers default optim --profile
  step urm "URM equivalence (strict)" 110 "${ALONE[@]}" "$PY" benchmarks/compare_reference_urm.py \
    --reference "$CARRY/urm-reference" $CHECK --schemes baseline
  step urm "pytest -m gpu" 120 "${ALONE[@]}" "$PY" -m pytest -m gpu -q -p no:cacheprovider $(grep -l "mark.gpu" tests/test_*.py)
}
lane_gpt() {
  step gpt "looped GPT vs nanoGPT, compiled" 170 "$PY" benchmarks/compare_nanogpt.py \
    --reference "$CARRY/nanogpt-reference" --preset gpt2 --device cuda --steps 20 --compile --loops 3
  step gpt "bench_gpt R=1,3 (MFU)" 200 "$PY" benchmarks/bench_gpt.py --preset paper --rounds 1 3 --skip-memory
  step gpt "bench_gpt memory sweep" 130 "${ALONE[@]}" "$PY" benchmarks/bench_gpt.py --preset paper --skip-throughput \
    --mem-rounds 1 3 5 7 --mem-budget-gb 120
}
for lane in hrm trm urm gpt; do
  ( "lane_$lane" > "$OUT/lane_$lane.log" 2>&1 ) &
done
wait
echo; echo "================ summary ($(( $(date +%s) - START )) s in all) ================"
sort "$OUT/summary" 2>/dev/null
for lane in hrm trm urm gpt; do
  echo; echo "################ lane $lane: tables ################"
  grep -E "^(#|lever|kind|variant|model|[a-z]+ +[0-9,.]+|default|nofused|optim|cgraphs|R=|ours|nanoGPT|all|matmul|attention|triton|copy|other)" \
    "$OUT/lane_$lane.log" | grep -v "^# .* done" | head -80
done
