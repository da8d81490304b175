"""Errors meant for the user: the CLI prints them as one line, without a traceback."""


class Seq2OnnxError(Exception):
    """Bad input, a bad model folder, a bad option: the message names the problem and the fix."""


class ModelPackageError(Seq2OnnxError):
    """A model folder that cannot be loaded (missing file, bad checksum, unknown format...)."""
