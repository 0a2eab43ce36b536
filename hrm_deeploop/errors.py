"""User-facing errors: the CLI prints these as one line and exits non-zero (no traceback)."""

import errno


class UserError(Exception):
    """Bad input, config or file. The message must name the file/field/step at fault."""


class ConfigError(UserError):
    """A config key is unknown, missing or of the wrong type."""


class TrainingDiverged(UserError):
    """A non-finite loss or gradient; the last good checkpoint is kept."""


def os_error(e: OSError) -> str:
    """An OSError as the words and the errno a user can look up: 'File too large (errno 27, EFBIG)'."""
    name = errno.errorcode.get(e.errno, "") if e.errno is not None else ""
    words = e.strerror or str(e)
    return f"{words} (errno {e.errno}, {name})" if name else words
