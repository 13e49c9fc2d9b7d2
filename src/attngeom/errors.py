"""Errors the user can fix: the CLI prints them as one line and exits 2."""


class InputError(Exception):
    """Bad input: a path, id, file or model that cannot be scored as given."""
