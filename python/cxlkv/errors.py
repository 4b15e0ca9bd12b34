"""Exceptions raised for a failed cxlkv call, one per Status code (include/cxlkv/status.h).

The binding maps every non-OK Status to one of these in a single place
(``Raise`` in python/binding.cc); the message is the Status message.
"""


class Error(Exception):
    """Base class of every cxlkv error."""


class NotFoundError(Error, KeyError):
    """kNotFound: key absent, or the slot changed while it was being read (a miss)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class BusyError(Error):
    """kBusy: another participant holds what the call needs."""


class NoSpaceError(Error):
    """kNoSpace: region full, nothing evictable, or a table exhausted."""


class CorruptionError(Error):
    """kCorruption: region bytes failed validation (header, CRC32C, ...)."""


class InvalidArgumentError(Error, ValueError):
    """kInvalidArgument: the call can never succeed with these arguments."""


class IOError(Error, OSError):  # noqa: A001 - mirrors Status::kIOError
    """kIOError: the operating system or the CUDA driver refused."""


class UnsupportedError(Error):
    """kUnsupported: valid, but this build or layout cannot serve it."""


class LoadFailedError(Error):
    """A GPU load that the caller was promised failed for some blocks.

    ``failed`` lists (block index, code, message) for each failed block;
    ``prefix`` is the number of leading blocks that did load.
    """

    def __init__(self, message: str, failed: list[tuple[int, str, str]], prefix: int) -> None:
        super().__init__(message)
        self.failed = failed
        self.prefix = prefix
