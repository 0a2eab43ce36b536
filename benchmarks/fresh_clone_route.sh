#!/usr/bin/env bash
# Measured in docs/unseen-tasks.md ("From a fresh clone"): bash benchmarks/fresh_clone_route.sh (writes under /tmp/route)
# A new user's route: a fresh clone, a fresh venv, the README's install, the first ten minutes, timed.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
rm -rf /tmp/route && mkdir -p /tmp/route && cd /tmp/route
T() { local t0=$(date +%s.%N); "$@"; local t1=$(date +%s.%N); printf "  -> %.1f s (load %s)\n" "$(echo "$t1 - $t0" | bc)" "$(cut -d' ' -f1 /proc/loadavg)"; }
START=$(date +%s.%N)
echo "== clone"; T git clone -q "$REPO" hrm-deeploop
cd hrm-deeploop
echo "== venv + install (README)"; T bash -c 'python3 -m venv /tmp/route/venv && . /tmp/route/venv/bin/activate && pip install -q -e . -c constraints-cpu.txt 2>&1 | grep -v "is ignored: it is neither" || true'
. /tmp/route/venv/bin/activate
which hrm-deeploop
mkdir -p /tmp/route/work && cd /tmp/route/work
export WANDB_MODE=disabled
echo "== build"; T hrm-deeploop build-arc sources=[arc1] holdout_pool=evaluation holdout_fraction=1.0 num_aug=8 output_dir=data/arc1-train holdout_dir=data/arc1-eval progress=false
echo "== pretrain"; T hrm-deeploop train experiment=hrm_pretrain_cpu data_dir=data/arc1-train output_dir=runs/hrm-pre train.max_steps=400
echo "== make-challenges"; T hrm-deeploop make-challenges source=data/arc1-eval output_dir=data/four tasks=[6ea4a07e,66e6c45b,be03b35f,e633a9e5]
echo "== ttt"; T hrm-deeploop ttt checkpoint=runs/hrm-pre challenges=data/four/arc-agi_evaluation_challenges.json output_dir=runs/ttt-first steps=25 batch=8 num_aug=8 workers=2 time_budget=3 solutions=data/four/arc-agi_evaluation_solutions.json
echo "== score"; T hrm-deeploop score submission=runs/ttt-first/submission.json solutions=data/four/arc-agi_evaluation_solutions.json
END=$(date +%s.%N)
printf "== whole route: %.1f s\n" "$(echo "$END - $START" | bc)"
