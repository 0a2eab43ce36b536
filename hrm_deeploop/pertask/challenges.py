"""The challenges file, read and validated whole (torch-free): a regular file under
`MAX_CHALLENGES_BYTES` (a FIFO or /dev/zero is named, never read), every task id a plain name
(`arc_data.files.names.check_task_name`, the one door from a name to a path), every task valid by
build-arc's own rules (`arc_data.arc.sources.parse_task`)."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from arc_data.errors import DatasetError
from arc_data.files.jsonio import parse_json
from arc_data.files.names import check_task_name, why_not_a_file
from hrm_deeploop.errors import UserError

MAX_CHALLENGES_BYTES = 256 << 20  # ARC-AGI-2's 1,000 training tasks are 40 MB; JSON in memory is ~10x its bytes


def read_challenges(path: str | os.PathLike) -> dict[str, dict]:
    """The challenges file, validated whole: task id -> {"train": [...], "test": [...]} as in the file."""
    p = Path(path)
    data = read_regular(p, "challenges", MAX_CHALLENGES_BYTES)
    with as_ours():
        tasks = parse_json(data, f"challenges={p}")
    if not isinstance(tasks, dict) or not tasks:
        raise UserError(f"challenges={p}: not an object of tasks, or no task in it")
    from arc_data.arc.sources import no_bools, parse_task  # lazy: numpy, only where a file is checked

    quick = no_bools(data)
    for tid, t in tasks.items():
        with as_ours():
            check_task_name(tid, f"challenges={p}")
            parse_task(t, f"challenges={p}", tid, require_outputs=False, quick=quick)
    return tasks


def read_regular(p: Path, key: str, most: int) -> bytes:
    """The bytes of a regular file of at most `most` bytes; anything else one line (a FIFO is
    opened non-blocking and named, never read; /dev/zero is no regular file)."""
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise UserError(f"{key}={p} {why_not_a_file(p)}" if e.errno != 13 else f"{key}={p}: cannot read it "
                        f"({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{key}={p} {why_not_a_file(p)}: give a JSON file")
        if st.st_size > most:
            raise UserError(f"{key}={p} is {st.st_size:,} bytes, more than the {most:,} a challenges file may be")
        try:
            data = f.read(most + 1)
        except OSError as e:
            raise UserError(f"{key}={p}: cannot read it ({e.strerror})") from None
    if len(data) > most:
        raise UserError(f"{key}={p} grew past {most:,} bytes while read")
    return data




@contextlib.contextmanager
def as_ours():
    """arc_data's one-line errors as ttt's (no task-room prefix on the line)."""
    try:
        yield
    except DatasetError as e:
        raise UserError(str(e)) from None
