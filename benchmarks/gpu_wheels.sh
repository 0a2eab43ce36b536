#!/usr/bin/env bash
# Prepare .whl/ (git-ignored): the Python packages benchmarks/gpu.sh needs that the lent GPU
# machine's image lacks, for a machine with no network. Run it here (where pip reaches PyPI),
# then carry .whl with the run; gpu.sh installs from it into /tmp/site when a module is missing.
#
#   bash benchmarks/gpu_wheels.sh            # writes .whl/*.whl (about 3 MB)
#
# The image (see the device tool's KINDS.md) has Python 3.12, torch, triton, numpy, numba, tqdm,
# matplotlib, pillow, pyyaml and pytest, but not omegaconf / hydra-core (our configs) nor pydantic
# (the reference HRM's modules, for compare_reference_hrm.py). pydantic-core is compiled, so its
# wheel is fetched for CPython 3.12 on manylinux x86-64; the rest are pure Python (antlr4's 4.9.3
# exists only as an sdist, so `pip wheel` builds it here).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
mkdir -p .whl
"$PY" -m pip wheel -q --no-deps -w .whl omegaconf==2.3.0 hydra-core==1.3.2 antlr4-python3-runtime==4.9.3 \
  pydantic==2.11.7 annotated-types==0.7.0 typing-inspection==0.4.1
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl pydantic-core==2.33.2
ls -1 .whl
