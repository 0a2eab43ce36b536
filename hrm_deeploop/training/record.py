"""The run record: which tasks a checkpoint was trained on, kept inside its run folder (and its
export), so that `ttt protocol=strict` can read it wherever the folder or its data now live.

`<run>/trained_tasks.json` (written atomically by the trainer skeleton when a run starts, once; a
resumed run keeps it):

    format       "hrm-deeploop/trained-tasks/1"
    data_dir     the dataset as the training command named it (for people; never followed again)
    identifiers_sha256   of its identifiers.json
    tasks        the base ARC task ids trained on, sorted (augmentation suffixes `_t<d>_<colours>`
                 stripped; generated tasks are not listed one by one, a build may hold millions)
    generated    generated task count by kind (`rearc`, `arcgen`, `barc`: arc_data/arc/generated.py)
    imitates     real ARC task id -> how many generated tasks imitate it (test answer included): the
                 build's manifest.json `imitated_tasks`, or for an older build the RE-ARC / ARC-GEN
                 tasks' names (`<kind>-<ARC id>-<k>`)
    unknown      null, or why part of the run's training cannot be told (a dataset without
                 identifiers.json, BARC tasks of a build that did not record what they imitate)
    init_from    null, or {"source": the init_from as given, "record": that run's record (nested,
                 so the chain travels with the folder), "unknown": why there is none (an official
                 checkpoint)}

A run written before this record existed is read from its config.yaml: its `data_dir` looked for as
given (relative to the working directory), then beside the run folder and each folder above it (as
`export` does), counting only a dataset whose identifiers.json the run recorded
(data_identity.json), and its `init_from` followed the same way. Torch-free.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import yaml

from arc_data import format as fmt
from arc_data.errors import DatasetError
from arc_data.files.jsonio import parse_json, read_json
from hrm_deeploop import hub
from hrm_deeploop.errors import UserError, os_error

RECORD = "trained_tasks.json"
FORMAT = "hrm-deeploop/trained-tasks/1"
IDENTITY_FILE = "data_identity.json"  # checkpoint.IDENTITY_FILE (torch-free here)
AUGMENTED = re.compile(r"^(.*)_t\d+_\d{10}$")  # <task>_t<dihedral>_<10 colour digits> (arc_data.originals)
GENERATED = re.compile(r"^(rearc|arcgen|barc)-(.+)-\d{4,}$")  # <kind>-<unit>-<k> (arc_data.arc.generated)
OWN_NAME_KINDS = ("rearc", "arcgen")  # a unit named after the ARC task it imitates
MAX_CHAIN = 64  # init_from links followed at most (a record nests its chain)


def base_task(name: str) -> str:
    """A puzzle name without its augmentation suffix."""
    m = AUGMENTED.match(name)
    return m.group(1) if m else name


# ---- a dataset ----------------------------------------------------------------------------------


def of_dataset(data_dir: Path) -> dict[str, Any]:
    """The record's task fields for a built dataset (its identifiers.json and manifest.json)."""
    path = data_dir / fmt.IDENTIFIERS_FILE
    try:
        raw = path.read_bytes() if path.is_file() else None
    except OSError as e:
        raw, why = None, f"'{path}' is unreadable ({os_error(e)})"
    else:
        why = f"the dataset '{data_dir}' has no {fmt.IDENTIFIERS_FILE}"
    if raw is None:
        return {"tasks": None, "generated": {}, "imitates": {}, "unknown": why}
    try:
        names = parse_json(raw, str(path))
    except DatasetError as e:
        return {"tasks": None, "generated": {}, "imitates": {}, "unknown": str(e)}
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return {"tasks": None, "generated": {}, "imitates": {}, "unknown": f"'{path}' is not a list of names"}
    tasks, generated, by_name = set(), {}, {}
    for base in {base_task(n) for n in names[1:]}:  # row 0 is the blank
        m = GENERATED.match(base)
        if m is None:
            tasks.add(base)
            continue
        generated[m.group(1)] = generated.get(m.group(1), 0) + 1
        if m.group(1) in OWN_NAME_KINDS:
            by_name[m.group(2)] = by_name.get(m.group(2), 0) + 1
    unknown = None
    recorded = _manifest_imitations(data_dir)
    if recorded is None and generated.get("barc"):
        unknown = (f"{generated['barc']} barc: task(s) in '{data_dir}' whose imitated ARC tasks its build did not "
                   "record (manifest.json has no imitated_tasks: rebuild it with build-arc)")
    return {"identifiers_sha256": hashlib.sha256(raw).hexdigest(), "tasks": sorted(tasks),
            "generated": dict(sorted(generated.items())), "imitates": dict(sorted((recorded or by_name).items())),
            "unknown": unknown}


def _manifest_imitations(data_dir: Path) -> dict[str, int] | None:
    try:
        manifest = read_json(data_dir / fmt.MANIFEST_FILE, "build manifest")
    except DatasetError:
        return None
    found = manifest.get("imitated_tasks") if isinstance(manifest, dict) else None
    if isinstance(found, dict) and all(isinstance(k, str) and isinstance(v, int) for k, v in found.items()):
        return found
    return None


def find_data_dir(data_dir: str, run_dir: Path | None) -> Path | None:
    """A run's `data_dir` as export looks for it: as given, then beside the run folder and each
    folder above it; a candidate counts when it holds identifiers.json and, where the run recorded
    that file's sha256 (data_identity.json), the same bytes."""
    want = None
    if run_dir is not None and (run_dir / IDENTITY_FILE).is_file():
        try:
            ident = read_json(run_dir / IDENTITY_FILE, "dataset record")
            want = ((ident.get("files") or {}).get(".") or {}).get(fmt.IDENTIFIERS_FILE, {}).get("sha256")
        except (DatasetError, AttributeError):
            want = None
    p = Path(data_dir).expanduser()
    above = [] if run_dir is None else [run_dir.resolve(), *run_dir.resolve().parents]
    for c in [p] if p.is_absolute() else [p, *(folder / p for folder in above)]:
        ids = c / fmt.IDENTIFIERS_FILE
        try:
            if ids.is_file() and (want is None or hashlib.sha256(ids.read_bytes()).hexdigest() == want):
                return c
        except OSError:
            continue
    return None


# ---- a run --------------------------------------------------------------------------------------


def of_run(config: dict[str, Any], run_dir: Path | None = None, _chain: int = 0) -> dict[str, Any]:
    """The record of a run with this resolved config (its data found as `find_data_dir` does)."""
    data_dir = config.get("data_dir")
    rec: dict[str, Any] = {"format": FORMAT, "data_dir": None if data_dir is None else str(data_dir)}
    found = find_data_dir(str(data_dir), run_dir) if data_dir else None
    if found is not None:
        rec |= of_dataset(found)
    else:
        why = "the run names no data_dir" if not data_dir else \
            f"its data_dir '{data_dir}' is not found (looked as given and beside the run folder)"
        rec |= {"tasks": None, "generated": {}, "imitates": {}, "unknown": why}
    init_from = config.get("init_from")
    rec["init_from"] = None if not init_from else of_source(str(init_from), _chain + 1)
    return rec


def of_source(source: str, _chain: int = 0) -> dict[str, Any]:
    """{"source", "record", "unknown"} for an `init_from` (or a `ttt` checkpoint): a run folder, a
    step file in one, an exported folder (or its weights), hf://...; an official file is unknown."""
    if _chain > MAX_CHAIN:
        return {"source": source, "record": None, "unknown": f"more than {MAX_CHAIN} init_from links (a loop?)"}
    try:
        folder, why = _folder(source)
        if folder is None:
            return {"source": source, "record": None, "unknown": why}
        if (folder / RECORD).exists():
            return {"source": source, "record": read(folder / RECORD), "unknown": None}
        if hub.is_export(folder):  # an export made before the record existed: its identifiers.json
            meta = read_json(folder / hub.CONFIG, "exported config")
            config = meta.get("config") if isinstance(meta, dict) else None
            if not isinstance(config, dict):
                return {"source": source, "record": None, "unknown": f"'{folder / hub.CONFIG}' has no run config"}
            rec = of_run({**config, "data_dir": str(folder) if (folder / fmt.IDENTIFIERS_FILE).is_file() else None},
                         None, _chain)
            return {"source": source, "record": rec | {"data_dir": config.get("data_dir")}, "unknown": None}
        if (folder / "config.yaml").is_file():  # a run written before the record existed
            config = yaml.safe_load((folder / "config.yaml").read_text())
            if not isinstance(config, dict):
                return {"source": source, "record": None, "unknown": f"'{folder / 'config.yaml'}' is not a mapping"}
            return {"source": source, "record": of_run(config, folder, _chain), "unknown": None}
        return {"source": source, "record": None,
                "unknown": f"'{folder}' holds no {RECORD}, no config.yaml and is no export"}
    except (DatasetError, UserError, OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        return {"source": source, "record": None, "unknown": " ".join(str(e).split())[:300]}


def _folder(source: str) -> tuple[Path | None, str | None]:
    """The folder whose record tells what `source` trained on, or None and why."""
    p = hub.fetch(source) if hub.is_hub_ref(source) else Path(source).expanduser()
    if p.is_dir():
        return p, None
    if not p.exists():
        return None, f"'{p}' does not exist"
    if p.name == hub.WEIGHTS or p.parent.name == "checkpoints":
        return (p.parent if p.name == hub.WEIGHTS else p.parent.parent), None
    return None, (f"'{p}' is a checkpoint file with no run folder or export around it (an official checkpoint?): "
                  "what it was trained on is not recorded")


def read(path: Path) -> dict[str, Any]:
    """A record file, checked (`check`): one DatasetError / UserError line when it is not one."""
    rec = read_json(path, "run record")
    check(rec, str(path))
    return rec


def check(rec: Any, where: str, depth: int = 0) -> None:
    """A record's shape (a hand-edited or foreign file is one line, never a wrong verdict)."""
    def bad(what: str) -> UserError:
        return UserError(f"'{where}' is not a run record ({what})")

    if not isinstance(rec, dict) or rec.get("format") != FORMAT:
        raise bad(f"format {FORMAT} expected")
    if depth > MAX_CHAIN:
        raise bad(f"more than {MAX_CHAIN} init_from links")
    tasks, imitates, link = rec.get("tasks"), rec.get("imitates"), rec.get("init_from")
    if tasks is not None and not (isinstance(tasks, list) and all(isinstance(t, str) for t in tasks)):
        raise bad("'tasks' is not a list of names")
    if not isinstance(imitates, dict) or not all(isinstance(k, str) and isinstance(v, int) for k, v in imitates.items()):
        raise bad("'imitates' is not a mapping of task id to count")
    if tasks is None and not isinstance(rec.get("unknown"), str):
        raise bad("no 'tasks' and no 'unknown' saying why")
    if link is not None:
        if not isinstance(link, dict) or not isinstance(link.get("source"), str):
            raise bad("'init_from' is not a mapping with a source")
        if link.get("record") is None and not isinstance(link.get("unknown"), str):
            raise bad("'init_from' has no record and no 'unknown' saying why")
        if link.get("record") is not None:
            check(link["record"], where, depth + 1)


def flatten(entry: dict[str, Any]) -> tuple[set[str], dict[str, int], list[str]]:
    """Over a source (`of_source`'s entry) and every run it was initialised from: the base tasks
    trained on, the real ARC tasks imitated (id -> generated tasks), and why any part is unknown."""
    tasks: set[str] = set()
    imitates: dict[str, int] = {}
    unknown: list[str] = []
    while entry is not None:
        rec = entry.get("record")
        if rec is None:
            unknown.append(f"{entry['source']}: {entry['unknown']}")
            break
        tasks.update(rec.get("tasks") or ())
        for tid, n in rec["imitates"].items():
            imitates[tid] = imitates.get(tid, 0) + n
        if rec.get("unknown"):
            unknown.append(f"{entry['source']}: {rec['unknown']}")
        entry = rec.get("init_from")
    return tasks, imitates, unknown


def dumps(rec: dict[str, Any]) -> bytes:
    return (json.dumps(rec, indent=1) + "\n").encode()


def write_once(run_dir: Path, config: dict[str, Any]) -> None:
    """The trainer's call when a run starts: `<run>/trained_tasks.json` for a run with a data_dir,
    atomically; a run that already has one (a resume) keeps it."""
    from arc_data.files.atomic import atomic_file  # lazy: only the trainers write records

    path = Path(run_dir) / RECORD
    if not config.get("data_dir") or path.is_file():
        return
    data = dumps(of_run(config))
    try:
        with atomic_file(path) as f:
            f.write(data)
    except OSError as e:
        raise UserError(f"cannot write '{path}': {os_error(e)}") from None


def export_files(checkpoint: Path, config: dict[str, Any]) -> dict[str, bytes]:
    """What an export of `checkpoint` (a resolved step file) carries of its run record: file name ->
    bytes. The run's record as written (checked); for an older run, one made now from its config
    (paths as the run named them: the bytes do not depend on where export runs). A run without
    a data_dir (the looped GPT) carries none."""
    run_dir = hub.folder_of(checkpoint)
    if (run_dir / RECORD).exists():
        return {RECORD: dumps(read(run_dir / RECORD))}
    if not config.get("data_dir"):
        return {}
    return {RECORD: dumps(of_run(config, run_dir))}
