"""Errors raised on bad ARC input. Messages name the file, the task and the problem, on one line."""


class ArcDataError(ValueError):
    """Invalid ARC source data, dataset or option."""
