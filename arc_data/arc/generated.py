"""The public task generators' dumps as `build-arc` sources: `rearc:PATH`, `arcgen:PATH`, `barc:PATH`.

    rearc:PATH    RE-ARC (github.com/michaelhodel/re-arc, re_arc.zip unpacked; VARC ships the same
                  under raw_data/re_arc): PATH/tasks/<ARC-1 task id>.json (or PATH itself holding
                  them), each a JSON list of {"input": grid, "output": grid} generated for that task;
                  metadata.json beside tasks/ is not read.
    arcgen:PATH   ARC-GEN (github.com/google/ARC-GEN): PATH/<task id>.json, each a JSON list of
                  {"input", "output"} pairs (what its evaluation scripts read), or that list as
                  `arc_gen.py generate <id> N` prints it (Python's repr, single quotes), or a task
                  {"train": [...], "test": [...]} whose pairs are pooled, or a NeuroGolf task file,
                  whose "arc-gen" list alone is read.
    barc:PATH     BARC / ARC-Heavy (github.com/xu3kev/BARC, Hugging Face barc0/*): a JSONL file (or a
                  folder of *.jsonl), one generated problem a line: {"examples": [[input, output], ...],
                  "seeds": ["<ARC-1 id>.py", ...], "source": code, ...}; read one line at a time. BARC
                  indexes a grid grid[x][y] and stores it so: every grid is transposed into ARC's rows.

A *unit* is what one generator run made for one rule: a RE-ARC/ARC-GEN file, a BARC line. Its
pairs are shuffled by `np.random.Generator(PCG64([seed, crc32(unit)]))`, the first
`generated.examples` kept (0 = all), and cut into tasks of `generated.pairs_per_task` pairs, the
last `generated.test_pairs` of each its test pairs (a short last chunk without a demonstration is
dropped). Tasks are named `<kind>-<unit>-<k>` and remember the real ARC task(s) they imitate
(`Task.imitates`: the file's task id, a BARC problem's seed ids), so holding out a real task also
keeps its imitations out of the pretraining set (`tasksplit.split_tasks`). All of them are
training tasks (their test pairs go to `train`).

Clean RE-ARC/ARC-GEN files are read by a numba scanner (`pairscan`); anything else by `json` and
`sources.parse_grid`, whose errors name the file, the entry and the problem.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arc_data.arc.pairscan import scan_file
from arc_data.arc.sources import (
    EVAL_SUBSET,
    Pair,
    SourceInfo,
    Task,
    list_files,
    load_source,
    parse_grid,
    quick_grid,
)
from arc_data.arc.spill import Spill
from arc_data.arc.tasktable import TaskTable
from arc_data.errors import ArcError
from arc_data.files.jsonio import parse_json
from arc_data.format import MAX_SIDE

KINDS = ("rearc", "arcgen", "barc")
OVERSIZE = ("skip", "error")
_SEED_FILE = re.compile(r"^([0-9a-f]{8})(?:_[A-Za-z0-9]+)?(?:\.py)?$")  # BARC's seed names: <id>.py, <id>_variant.py
_UNPLAIN = re.compile(r"[^A-Za-z0-9_\-+=,@.]")


OWN_MAP = 1 << 18  # a unit buffer this large gets its own memory map


def _returnable(cells: np.ndarray) -> np.ndarray:
    """`cells` in memory given back to the system as soon as it is freed: a large buffer in its own
    anonymous map (malloc keeps freed blocks of its heap, so freeing the units while the plan packs
    their grids would not lower the peak); a small one as it is."""
    if cells.nbytes < OWN_MAP:
        return cells
    out = np.frombuffer(mmap.mmap(-1, cells.nbytes), np.uint8)
    out[:] = cells
    return out


class Packed:
    """One unit's grids in one buffer: grid g = cells[start[g]: start[g] + h*w] with (h, w) =
    hw[2g: 2g + 2]; pair i = grids (2i, 2i+1). Offsets and sides are plain lists: a task reads a few
    of them at a time, where numpy's per-call cost would dominate."""

    __slots__ = ("cells", "start", "hw")

    def __init__(self, cells: np.ndarray, shape: np.ndarray) -> None:
        sizes = shape[:, 0].astype(np.int64) * shape[:, 1]
        self.cells = _returnable(cells)
        self.start = (np.cumsum(sizes) - sizes).tolist()
        self.hw = shape.astype(np.int64).ravel().tolist()

    @classmethod
    def of(cls, pairs: list[Pair]) -> Packed:
        grids = [g for pair in pairs for g in pair]
        shape = np.array([g.shape for g in grids], np.int64).reshape(-1, 2)
        return cls(np.concatenate([g.ravel() for g in grids]) if grids else np.zeros(0, np.uint8), shape)

    def grid(self, g: int) -> np.ndarray:
        h, w, a = int(self.hw[2 * g]), int(self.hw[2 * g + 1]), int(self.start[g])
        return self.cells[a:a + h * w].reshape(h, w)

    @property
    def num_pairs(self) -> int:
        return len(self.start) // 2


class PackedPairs(Sequence):
    """Some pairs of a `Packed` unit, by index: what a generated Task holds as `train` / `test`.
    Grids are made (as views) when read, so a task costs a few small objects, not two arrays a
    pair; a list of pairs is what `+` returns (`task.train + task.test`)."""

    __slots__ = ("unit", "idx")

    def __init__(self, unit: Packed, idx: tuple[int, ...] | range) -> None:
        self.unit, self.idx = unit, idx

    def __len__(self) -> int:
        return len(self.idx)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return PackedPairs(self.unit, self.idx[i])
        k = self.idx[i]
        return self.unit.grid(2 * k), self.unit.grid(2 * k + 1)

    def grid_shapes(self) -> list[tuple[int, int]]:
        """The (h, w) of each pair's input and output, in order (`plan.pack_grids`)."""
        hw = self.unit.hw
        return [(int(hw[4 * k + j]), int(hw[4 * k + j + 1])) for k in self.idx for j in (0, 2)]

    def copy_cells(self, cells: np.ndarray, offsets: np.ndarray) -> None:
        """Copy each grid's cells to cells[offsets[j]:] (`plan.pack_grids`), no grid objects made;
        then read them from there: the unit's own buffer is freed once no task needs it, so packing
        a source holds its grids about once, not twice (`cells` is never written again)."""
        unit = self.unit
        buf, start, hw = unit.cells, unit.start, unit.hw
        dst = offsets.tolist()
        new_hw = []
        j = 0
        for k in self.idx:
            for g in (2 * k, 2 * k + 1):
                h, w, a = int(hw[2 * g]), int(hw[2 * g + 1]), int(start[g])  # Python ints: never int16 sums
                cells[dst[j]:dst[j] + h * w] = buf[a:a + h * w]
                new_hw += (h, w)
                j += 1
        moved = Packed.__new__(Packed)
        moved.cells, moved.start, moved.hw = cells, dst, new_hw
        self.unit, self.idx = moved, tuple(range(len(self.idx)))

    def __add__(self, other) -> list[Pair]:
        return list(self) + list(other)

    def __radd__(self, other) -> list[Pair]:
        return list(other) + list(self)

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and len(other) == len(self) and all(
            a.shape == c.shape and b.shape == d.shape and (a == c).all() and (b == d).all()
            for (a, b), (c, d) in zip(self, other))

    def __repr__(self) -> str:
        return f"PackedPairs({len(self)} pairs)"


@dataclass
class GeneratedSourceConfig:
    """How `rearc:` / `arcgen:` / `barc:` sources are grouped into tasks (build-arc `generated.*`)."""

    pairs_per_task: int = 4  # pairs per task: demonstrations + test pairs
    test_pairs: int = 1  # the last this-many pairs of each task are its test pairs
    examples: int = 0  # pairs used per unit (a RE-ARC/ARC-GEN file, a BARC problem); 0 = all
    oversize: str = "skip"  # skip | error: a pair with a grid side over 30 (RE-ARC's e26a3af2 has 129, BARC some)

    def __post_init__(self) -> None:
        if not 1 <= self.test_pairs < self.pairs_per_task:
            raise ArcError(f"generated.pairs_per_task={self.pairs_per_task}, generated.test_pairs={self.test_pairs}: "
                           "need 1 <= test_pairs < pairs_per_task (a task needs a demonstration and a test pair)")
        if self.examples < 0:
            raise ArcError(f"generated.examples={self.examples}: must be >= 0 (0 = all)")
        if self.oversize not in OVERSIZE:
            raise ArcError(f"generated.oversize={self.oversize!r}: must be one of {', '.join(OVERSIZE)}")


def split_spec(spec: str) -> tuple[str, str] | None:
    """`kind:path` -> (kind, path) for a generated source, None for any other spec."""
    kind, sep, path = str(spec).partition(":")
    return (kind, path) if sep and kind in KINDS else None


def source_path(spec: str) -> str:
    """The path a spec reads (the part after `kind:` for a generated source)."""
    parts = split_spec(spec)
    return parts[1] if parts else spec


def loader(grouping: GeneratedSourceConfig, seed: int,
           spill: Spill | None = None) -> Callable[[str, str, bool], tuple[list[Task], SourceInfo]]:
    """`load_source`, extended with the generated kinds (what `load_sources(load=...)` takes);
    with `spill`, each generated unit's cells go to it as the unit is read."""
    def load(spec: str, eval_name: str = EVAL_SUBSET, require_outputs: bool = True) -> tuple[list[Task], SourceInfo]:
        parts = split_spec(spec)
        if parts is None:
            return load_source(spec, eval_name, require_outputs)
        return load_generated(spec, parts[0], parts[1], grouping, seed, spill)
    return load


# ---------------------------------------------------------------------------------------------
# units: (unit name, imitated ids, file, line (BARC; 0 for a file of pairs), pairs)


def _oversize(g: object) -> bool:
    return isinstance(g, list) and (len(g) > MAX_SIDE or any(isinstance(r, list) and len(r) > MAX_SIDE for r in g))


def _pairs_slow(entries: list, file: str, unit: str, oversize: str, skipped: list[str],
                no_bools: bool = False) -> list[Pair]:
    """Validated pairs from parsed entries ({"input", "output"} objects or [input, output] lists).
    `no_bools`: the JSON text held no `true`/`false`, so `quick_grid` may take the clean grids."""
    pairs: list[Pair] = []
    dropped = 0
    for i, e in enumerate(entries):
        if isinstance(e, dict) and "input" in e and "output" in e:
            raw = (e["input"], e["output"])
        elif isinstance(e, list) and len(e) == 2:
            raw = (e[0], e[1])
        else:
            raise ArcError(f"{file}: task {unit}: entry {i}: not an {{\"input\", \"output\"}} pair")
        if oversize == "skip" and (_oversize(raw[0]) or _oversize(raw[1])):
            dropped += 1
            continue
        a = quick_grid(raw[0]) if no_bools else None
        b = quick_grid(raw[1]) if no_bools else None
        pairs.append((a if a is not None else parse_grid(raw[0], file, unit, f"entry {i}.input"),
                      b if b is not None else parse_grid(raw[1], file, unit, f"entry {i}.output")))
    if dropped:
        skipped.append(f"{file}: task {unit}: {dropped} pair(s) with a side over {MAX_SIDE} skipped")
    return pairs


def _pair_file(path: Path, kind: str, grouping: GeneratedSourceConfig, digest, skipped: list[str]) -> Packed:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ArcError(f"{path}: task {path.stem}: cannot read ({e.strerror})") from None
    digest.update(path.name.encode() + b"\0" + hashlib.sha256(data).digest())
    if kind == "arcgen" and data.lstrip().startswith(b"[{'") and b'"' not in data:
        # `arc_gen.py generate <id> N > <id>.json` writes Python's repr of the list (print(examples)):
        # single-quoted keys, ints only, so the quotes are all there is to change to read it as JSON
        data = data.replace(b"'", b'"')
    fast = scan_file(data)
    if fast is not None:
        return Packed(*fast)
    obj = parse_json(data, f"{path}: task {path.stem}")
    if kind == "arcgen" and isinstance(obj, dict) and isinstance(obj.get("arc-gen"), list):
        obj = obj["arc-gen"]  # NeuroGolf's task files: the real task's train/test plus its ARC-GEN pairs
    elif kind == "arcgen" and isinstance(obj, dict) and isinstance(obj.get("train"), list):
        obj = obj["train"] + (obj["test"] if isinstance(obj.get("test"), list) else [])
    if not isinstance(obj, list) or not obj:
        raise ArcError(f"{path}: task {path.stem}: not a non-empty JSON list of {{\"input\", \"output\"}} pairs")
    return Packed.of(_pairs_slow(obj, str(path), path.stem, grouping.oversize, skipped,
                                 no_bools=b"true" not in data and b"false" not in data))


def _task_files(root: Path, kind: str, skipped: list[str]) -> list[Path]:
    folder = root / "tasks" if kind == "rearc" and (root / "tasks").is_dir() else root
    if not folder.is_dir():
        raise ArcError(f"{kind}:{root}: not a folder (expected the {kind} folder of <task id>.json files)")
    files = [p for p in list_files(folder, ".json", skipped) if p.name != "metadata.json"]
    if not files:
        raise ArcError(f"{kind}:{root}: no <task id>.json files in {folder}")
    return files


def _pair_units(root: Path, kind: str, grouping: GeneratedSourceConfig, digest,
                skipped: list[str]) -> Iterator[tuple[str, tuple[str, ...], str, int, Packed]]:
    for path in _task_files(root, kind, skipped):
        yield path.stem, (path.stem,), str(path), 0, _pair_file(path, kind, grouping, digest, skipped)


def _barc_units(root: Path, grouping: GeneratedSourceConfig, digest,
                skipped: list[str]) -> Iterator[tuple[str, tuple[str, ...], str, int, Packed]]:
    if root.is_dir():
        files = list_files(root, ".jsonl", skipped)
        if not files:
            raise ArcError(f"barc:{root}: no *.jsonl files in it")
    elif root.is_file():
        files = [root]
    elif root.exists() or root.is_symlink():
        raise ArcError(f"barc:{root}: not a regular file or a folder")
    else:
        raise ArcError(f"barc:{root}: no such file or folder")
    for path in files:
        stem = _UNPLAIN.sub("_", path.stem).lstrip(".") or "barc"
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for lineno, line in enumerate(f, 1):
                h.update(line)
                if not line.strip():
                    continue
                unit = f"{stem}-{lineno:06d}"
                where = f"{path}: line {lineno}"
                obj = parse_json(line, where)
                if not isinstance(obj, dict) or not isinstance(obj.get("examples"), list) or not obj["examples"]:
                    raise ArcError(f"{where}: not a generated problem (a JSON object with a non-empty 'examples' list)")
                seeds = obj.get("seeds") if isinstance(obj.get("seeds"), list) else []
                imitates = tuple(sorted({m[1] for s in seeds if isinstance(s, str) and (m := _SEED_FILE.match(s))}))
                pairs = _pairs_slow(obj["examples"], str(path), unit, grouping.oversize, skipped,
                                    no_bools=b"true" not in line and b"false" not in line)
                # BARC's grids are indexed grid[x][y] and written as such (`.tolist()`): ARC's rows are
                # their transpose (docs/generated-tasks.md, "BARC's orientation")
                yield unit, imitates, str(path), lineno, Packed.of([(a.T, b.T) for a, b in pairs])
        digest.update(path.name.encode() + b"\0" + h.digest())


# ---------------------------------------------------------------------------------------------
# grouping


def unit_order(kind: str, unit: str, num_pairs: int, grouping: GeneratedSourceConfig, seed: int) -> np.ndarray:
    """The unit's pairs in their grouped order: a seeded shuffle, the first `examples`."""
    rng = np.random.Generator(np.random.PCG64([seed, zlib.crc32(f"{kind}:{unit}".encode())]))
    order = rng.permutation(num_pairs)
    return order[:grouping.examples] if grouping.examples else order


def group_unit(kind: str, unit: str, imitates: tuple[str, ...], file: str, spec: str, pairs: Packed,
               grouping: GeneratedSourceConfig, seed: int) -> tuple[list[Task], int]:
    """One unit's pairs -> (tasks, pairs left over): `unit_order`, cut into chunks of
    `pairs_per_task` (a last chunk of test_pairs or fewer is left over)."""
    order = unit_order(kind, unit, pairs.num_pairs, grouping, seed)
    k, n_test = grouping.pairs_per_task, grouping.test_pairs
    tasks, left = [], 0
    for j, lo in enumerate(range(0, len(order), k)):
        chunk = tuple(order[lo:lo + k].tolist())
        if len(chunk) <= n_test:
            left += len(chunk)
            continue
        tasks.append(Task(f"{kind}-{unit}-{j:04d}", spec, file, kind, False, PackedPairs(pairs, chunk[:-n_test]),
                          PackedPairs(pairs, chunk[-n_test:]), imitates=imitates))
    return tasks, left


def load_generated(spec: str, kind: str, path: str, grouping: GeneratedSourceConfig,
                   seed: int, spill: Spill | None = None) -> tuple[list[Task] | TaskTable, SourceInfo]:
    """One generated source's tasks: a list of `Task`, or with `spill` a `TaskTable` (each unit's
    kept pairs go to the spill as it is read, nothing per task but a few integers in memory)."""
    root = Path(os.path.expanduser(path))
    if not path:
        raise ArcError(f"{spec}: give a path after '{kind}:'")
    digest = hashlib.sha256()
    skipped: list[str] = []
    units = _barc_units(root, grouping, digest, skipped) if kind == "barc" else \
        _pair_units(root, kind, grouping, digest, skipped)
    table = None if spill is None else TaskTable(spec, kind, spill, grouping.pairs_per_task, grouping.test_pairs)
    tasks: list[Task] = []
    left = 0
    for unit, imitates, file, line, pairs in units:
        if table is not None:
            hw = np.asarray(pairs.hw, np.int64).reshape(-1, 2)
            left += table.add_unit(unit, imitates, file, line, pairs.cells, np.asarray(pairs.start, np.int64), hw,
                                   unit_order(kind, unit, pairs.num_pairs, grouping, seed))
            continue
        made, n_left = group_unit(kind, unit, imitates, f"{file}: line {line}" if line else file, spec, pairs,
                                  grouping, seed)
        tasks += made
        left += n_left
    if left:
        skipped.append(f"{spec}: {left} pair(s) left over at the end of units (a chunk of test_pairs or fewer), not used")
    made = table.finish() if table is not None else tasks
    if not len(made):
        over = [n for n in skipped if n.endswith(f"with a side over {MAX_SIDE} skipped")]
        why = (f" after {len(over)} unit(s) lost pairs with a side over {MAX_SIDE} (generated.oversize=skip), "
               f"e.g. {over[0]}") if over else ""
        raise ArcError(f"{spec}: no task made (every unit had fewer than generated.test_pairs + 1 pairs{why})")
    info = SourceInfo(spec, kind, str(root), digest.hexdigest(), len(made), 0, skipped)
    return made, info
