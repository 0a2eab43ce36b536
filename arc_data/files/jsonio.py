"""The one JSON reader for users' files, and the JSON writer of the builders.

`parse_json` turns anything json cannot read (bad syntax, not UTF-8, an integer of more than 4300
digits, nesting deeper than the parser's recursion allows) into one DatasetError naming the file,
and refuses an object that holds a key twice (JSON allows it and json keeps the last one silently:
two tasks with one id in a challenges file would lose one). `read_json` reads a file first, only if
it is a regular file (a FIFO would block the reader).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from arc_data.errors import DatasetError
from arc_data.files.names import why_not_a_file


class _DuplicateKey(ValueError):
    pass


def _unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


def parse_json(data: str | bytes, where: str) -> object:
    """json.loads for a user's file: anything it cannot parse (bad syntax, not UTF-8, an integer of
    more than 4300 digits, nesting deeper than the parser's recursion allows) and a key that appears
    twice in one object are one DatasetError "<where>: invalid JSON (...)"."""
    try:
        return json.loads(data, object_pairs_hook=_unique)
    except _DuplicateKey as e:
        why = f"the key {str(e.args[0])[:200]!r} appears twice in one object; JSON readers keep only one of them"
    except json.JSONDecodeError as e:
        why = f"{e.msg}: line {e.lineno} column {e.colno}"
    except UnicodeDecodeError as e:
        why = f"not UTF-8 text ({e.reason} at byte {e.start})"
    except RecursionError:
        why = "nested too deeply"
    except ValueError as e:  # int() of more than sys.get_int_max_str_digits() digits
        why = "an integer too long to read" if "integer string conversion" in str(e) else str(e)
    raise DatasetError(f"{where}: invalid JSON ({why})")


def read_json(path: str | os.PathLike, what: str) -> object:
    """The JSON file `path` (`what` names it in errors: "solutions 'x.json': ..."): refused in one line
    unless it is a regular file that reads as JSON (`parse_json`)."""
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"{what} '{p}' {why_not_a_file(p)}")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise DatasetError(f"{what} '{p}': cannot read ({e.strerror})") from None
    return parse_json(data, f"{what} '{p}'")


def save_json(path: Path, obj: object, indent: int | None = 2) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=indent)
        f.write("\n")
