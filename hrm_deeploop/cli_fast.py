"""What the CLI skips to start and end quickly (issue 46: `build-arc` against HRM's builder).

- `selects_groups`: Hydra's group schemas (the model configs: 20-40 ms to import and convert) are
  registered only for a subcommand whose YAML picks a config group (`- model: hrm` in its
  defaults list); only then can a group's file, and so its schema, be composed.
- `exit_now`: a subcommand marked `exit_fast` in `cli.COMMANDS` ends its process without the
  interpreter's teardown (freeing every object of Hydra, numba and the data: 0.2-0.3 s of a 2 s
  `build-arc`) once it has returned, when `cli.main` is the process's entry (argv None: the
  console script, `python -m hrm_deeploop.cli`), never in-process. Its outputs are then closed,
  fsynced and published and its threads joined; atexit handlers still run and stdio is flushed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def selects_groups(config_file: Path) -> bool:
    """Whether a subcommand's YAML picks a config group (a `group: choice` entry in its defaults)."""
    import yaml

    data = yaml.safe_load(config_file.read_text()) or {}
    return any(isinstance(entry, dict) for entry in data.get("defaults") or [])


def exit_now(code: int) -> None:
    """End the process as `sys.exit(code)` would, less the interpreter's teardown of its objects:
    atexit handlers run, stdout and stderr are flushed, then `os._exit`."""
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: what sys.exit would have met too
            pass
    os._exit(code)
