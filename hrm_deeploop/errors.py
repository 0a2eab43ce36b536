"""User-facing errors: the CLI prints these as one line and exits non-zero (no traceback)."""


class UserError(Exception):
    """Bad input, config or file. The message must name the file/field/step at fault."""


class ConfigError(UserError):
    """A config key is unknown, missing or of the wrong type."""


class TrainingDiverged(UserError):
    """A non-finite loss or gradient; the last good checkpoint is kept."""
