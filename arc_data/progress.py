"""What a builder shows and records about itself: its progress bars and the package version it
writes into every manifest."""

from __future__ import annotations

import sys
from pathlib import Path


def package_version(name: str = "hrm-deeploop") -> str:
    """The installed version of `name` (this package by default, read from pyproject.toml in a
    source checkout that is not installed); "unknown" when there is none."""
    try:
        from importlib.metadata import version  # lazy: `build-arc --help` skips it

        return version(name)
    except Exception:  # not installed (a source checkout): read pyproject.toml
        if name != "hrm-deeploop":
            return "unknown"
        try:
            import tomllib  # lazy: `build-arc --help` skips it

            pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
            return tomllib.loads(pyproject.read_text())["project"]["version"] + "+src"
        except (OSError, KeyError, ImportError, ValueError):
            return "unknown"


class _Quiet:
    """A disabled bar: a context manager whose `update` does nothing (tqdm itself is not imported)."""

    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: float = 1) -> None:
        return None


def progress_bar(enabled: bool, prefix: str):
    """A tqdm bar factory on stderr: `bar(total, desc, unit)`; a disabled bar is a no-op (`_Quiet`:
    `with`, `update`), for which tqdm (5-10 ms to import) is not imported."""
    if not enabled:
        return lambda total, desc, unit="it": _Quiet()
    from tqdm import tqdm  # lazy: keeps tqdm off `build-arc --help` and quiet runs

    return lambda total, desc, unit="it": tqdm(total=total, desc=f"{prefix} {desc}", unit=unit, unit_scale=True,
                                               file=sys.stderr, dynamic_ncols=True, disable=not enabled)
