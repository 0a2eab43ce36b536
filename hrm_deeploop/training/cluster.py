"""The submitit settings of `study` and `ttt`, checked in one place (torch-free, submitit-free).

Both commands hand `submitit.*` to submitit's AutoExecutor, which checks little itself: an unknown
cluster is its ValueError traceback, a negative `timeout_min` is accepted and every job then fails
at the scheduler, and a partition with a newline becomes an extra `#SBATCH` line. So every setting
is checked here, when the command's config is built (`check_settings`, from each config's
`__post_init__`), and the cluster is resolved once, before anything is submitted (`resolve`): a
mistake is one line naming the key, exit 2, nothing written.
"""

from __future__ import annotations

import re
import shutil
from typing import Any

from hrm_deeploop.errors import UserError
from hrm_deeploop.typed_config import at_least, check, one_of, optional_at_least

CLUSTERS = ("auto", "slurm", "local", "debug")  # auto: SLURM where `sbatch` exists, else local processes
MAX_TIMEOUT_MIN = 366 * 24 * 60  # a year: past it, a time limit is a typo (SLURM's own cap is lower)
# what SLURM accepts in a partition, account, QOS or constraint name (constraints add & | ! [ ] * ( ))
SLURM_NAME = re.compile(r"[A-Za-z0-9_.,:+=@-]+")
SLURM_CONSTRAINT = re.compile(r"[A-Za-z0-9_.,:+=@&|!\[\]*()-]+")

INT_KEYS = ("timeout_min", "nodes", "gpus_per_node", "cpus_per_task", "mem_gb", "array_parallelism", "shards",
            "rdzv_port")


def check_settings(s: Any, where: str = "submitit.") -> None:
    """Check every submitit setting `s` has (a dataclass of `study` or `ttt`; the fields either
    lacks are skipped); raises ConfigError "submitit.KEY=VALUE: must be ..."."""
    for key in INT_KEYS:  # a float or a bool where submitit wants a count: refused by name
        v = getattr(s, key, None)
        check(v is None or (isinstance(v, int) and not isinstance(v, bool)), f"{where}{key}", v, "an integer")
    one_of(f"{where}cluster", s.cluster, CLUSTERS)
    at_least(f"{where}timeout_min", s.timeout_min, 1)
    check(s.timeout_min <= MAX_TIMEOUT_MIN, f"{where}timeout_min", s.timeout_min, f"<= {MAX_TIMEOUT_MIN} (a year)")
    for key, lo in (("nodes", 1), ("gpus_per_node", 0), ("array_parallelism", 1), ("shards", 1)):
        if hasattr(s, key):
            at_least(f"{where}{key}", getattr(s, key), lo)
    for key in ("cpus_per_task", "mem_gb"):
        optional_at_least(f"{where}{key}", getattr(s, key, None), 1)
    if hasattr(s, "rdzv_port"):
        check(1 <= s.rdzv_port <= 65535, f"{where}rdzv_port", s.rdzv_port, "a port number (1-65535)")
    for key in ("partition", "account", "qos", "constraint"):
        v = getattr(s, key, None)
        pattern = SLURM_CONSTRAINT if key == "constraint" else SLURM_NAME
        check(v is None or (isinstance(v, str) and pattern.fullmatch(v) is not None), f"{where}{key}", v,
              "null or a SLURM name (letters, digits, _ . , : + = @ -; no spaces or line breaks)")


def resolve(cluster: str, where: str = "submitit.cluster") -> str:
    """The executor `cluster` means on this machine: `auto` is SLURM where `sbatch` exists, else
    local processes; `slurm` without SLURM's commands is refused in one line (submitit's own
    RuntimeError comes as a traceback)."""
    one_of(where, cluster, CLUSTERS)
    has_slurm = shutil.which("sbatch") is not None and shutil.which("srun") is not None
    if cluster == "auto":
        return "slurm" if has_slurm else "local"
    if cluster == "slurm" and not has_slurm:
        raise UserError(f"{where}=slurm: no sbatch and srun on this machine (not a SLURM login node); "
                        f"use {where}=local (processes here) or auto")
    return cluster
