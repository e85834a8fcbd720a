"""The one error type stages raise for bad input: a one-line message naming the file and the fix."""


class QgateError(Exception):
    """Bad input or configuration; the CLI prints the message on one line and exits with status 2."""
