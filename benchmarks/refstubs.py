"""Stand-ins for the packages the reference HRM/TRM dataset builders import but the comparisons do
not need (torch-free, so a builder timed in a child process carries no extra imports):

- `argdantic`: their command line only (`ArgParser().command` decorates at import time); the
  comparison scripts call their functions directly.
- `pydantic` (only when not installed): `BaseModel` with keyword construction, `float` coercion
  and `model_dump()` in field order, all that `dataset/common.py`'s `PuzzleDatasetMetadata` uses.
- `huggingface_hub` (only when not installed): `hf_hub_download`, which the scripts replace anyway.
"""

from __future__ import annotations

import sys
import types


def stub_argdantic() -> None:
    if "argdantic" not in sys.modules:
        stub = types.ModuleType("argdantic")

        class ArgParser:
            def command(self, *a, **k):
                return lambda f: f

        stub.ArgParser = ArgParser
        sys.modules["argdantic"] = stub


def stub_pydantic() -> None:
    try:
        import pydantic  # noqa: F401
    except ImportError:
        stub = types.ModuleType("pydantic")

        class BaseModel:
            def __init__(self, **values):
                fields = {}
                for klass in reversed(type(self).__mro__):
                    fields.update(getattr(klass, "__annotations__", {}))
                missing = [k for k in fields if k not in values]
                if missing:
                    raise TypeError(f"{type(self).__name__}: missing {missing}")
                for k, kind in fields.items():
                    v = values[k]
                    setattr(self, k, float(v) if kind is float and isinstance(v, int) else v)
                self._fields = list(fields)

            def model_dump(self) -> dict:
                return {k: getattr(self, k) for k in self._fields}

        stub.BaseModel = BaseModel
        sys.modules["pydantic"] = stub


def stub_huggingface_hub() -> None:
    try:
        import huggingface_hub  # noqa: F401
    except ImportError:
        stub = types.ModuleType("huggingface_hub")

        def hf_hub_download(repo_id, filename, repo_type=None, **kw):
            raise OSError("huggingface_hub stand-in: no downloads (the comparison passes local files)")

        stub.hf_hub_download = hf_hub_download
        sys.modules["huggingface_hub"] = stub
