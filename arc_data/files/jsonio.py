"""The one JSON reader for users' files, and the JSON writer of the builders.

`parse_json` turns anything json cannot read (bad syntax, not UTF-8, an integer of more than 4300
digits, nesting deeper than the parser's recursion allows) into one DatasetError naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path

from arc_data.errors import DatasetError


def parse_json(data: str | bytes, where: str) -> object:
    """json.loads for a user's file: anything it cannot parse (bad syntax, not UTF-8, an integer of
    more than 4300 digits, nesting deeper than the parser's recursion allows) is one DatasetError
    "<where>: invalid JSON (...)"."""
    try:
        return json.loads(data)
    except json.JSONDecodeError as e:
        why = f"{e.msg}: line {e.lineno} column {e.colno}"
    except UnicodeDecodeError as e:
        why = f"not UTF-8 text ({e.reason} at byte {e.start})"
    except RecursionError:
        why = "nested too deeply"
    except ValueError as e:  # int() of more than sys.get_int_max_str_digits() digits
        why = "an integer too long to read" if "integer string conversion" in str(e) else str(e)
    raise DatasetError(f"{where}: invalid JSON ({why})")


def save_json(path: Path, obj: object, indent: int | None = 2) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=indent)
        f.write("\n")


