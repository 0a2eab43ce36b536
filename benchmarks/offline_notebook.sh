#!/usr/bin/env bash
# The offline-notebook workflow of docs/unseen-tasks.md, measured with no network:
#   1. wheels: `pip wheel` of this checkout and every dependency, on a machine with a package index;
#   2. without network (`unshare -rn`: a user namespace with only a downed loopback, so name
#      resolution fails), a fresh venv installs from the wheels alone (--no-index, no pip config),
#      then runs build-arc (unlabelled), train init_from (time budget), evaluate, and, when a
#      solutions file is given, score.
#
#   bash benchmarks/offline_notebook.sh WORK PRETRAINED_RUN CHALLENGES [SOLUTIONS] [BUDGET_MIN]
#
# WORK is a scratch folder (wheels/, venv/, data/, runs/, out/ go there); PRETRAINED_RUN a run
# folder (config.yaml + checkpoints/step_N.pt); CHALLENGES a Kaggle *_challenges.json without
# solutions. Each step prints its wall time and peak RSS (GNU time).
set -euo pipefail
WORK=$(realpath -m "$1"); PRE=$(realpath "$2"); CHAL=$(realpath "$3"); SOL=${4:+$(realpath "$4")}; BUDGET=${5:-2}
REPO=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$WORK"
T() { /usr/bin/time -f "  -> %e s wall, %M KB peak RSS" "$@"; }
echo "== wheels (with the package index)"
T python3 -m pip wheel -q -w "$WORK/wheels" "$REPO" -c "$REPO/constraints-cpu.txt" 2> >(grep -v "is ignored: it is neither" >&2)
echo "  $(ls "$WORK/wheels" | wc -l) wheels, $(du -sh "$WORK/wheels" | cut -f1)"
cat > "$WORK/offline.sh" <<INNER
set -euo pipefail
T() { /usr/bin/time -f "  -> %e s wall, %M KB peak RSS" "\$@"; }
export PIP_CONFIG_FILE=/dev/null WANDB_MODE=disabled OMP_NUM_THREADS=\${OMP_NUM_THREADS:-1}
unset PYTHONPATH
cd "$WORK"
if python3 -c "import socket; socket.create_connection(('pypi.org', 443), timeout=3)" 2>/dev/null; then
  echo "the network is reachable: not an offline measurement" >&2; exit 1
fi
echo "== offline: no route to pypi.org"
rm -rf venv data runs out
T python3 -m venv venv
T venv/bin/pip install -q --no-index --find-links wheels hrm-deeploop
echo "  venv: \$(du -sh venv | cut -f1)"
export PATH="$WORK/venv/bin:\$PATH"
T hrm-deeploop build-arc sources=[$CHAL] test_labels=optional num_aug=8 seed=0 output_dir=data/test progress=false
T hrm-deeploop train init_from=$PRE data_dir=data/test output_dir=runs/adapt adapt.trains=all \\
  train.max_steps=12500 train.time_budget=$BUDGET train.global_batch_size=8 optim.lr=1e-3 optim.warmup_steps=5 \\
  train.epochs_per_iter=4 checkpoint.every=0 logger=none device=cpu train.progress=false
T hrm-deeploop evaluate checkpoint=runs/adapt data_dir=data/test challenges=$CHAL output_dir=out device=cpu progress=false
if [ -n "$SOL" ]; then T hrm-deeploop score submission=out/submission.json solutions=$SOL quiet=true; fi
INNER
unshare -rn bash "$WORK/offline.sh"
