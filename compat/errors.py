"""Errors that map onto the CLI's documented exit codes.

0 pass, 1 a criterion failed (a verdict, not an error: the gate returns it), 2 usage error,
3 something named was not found, 4 bad input (contract, card, params, embeddings, images),
5 infrastructure (registry unreachable; a disk full, over quota or read-only), 6 conflict (production moved to another version while
a promotion was being decided: re-run against it).
"""

from __future__ import annotations


class CompatError(Exception):
    """Base class: a one-line message meant for the user, and the exit code it maps to."""

    exit_code: int = 4

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(CompatError):
    exit_code = 2


class NotFoundError(CompatError):
    exit_code = 3


class BadInputError(CompatError):
    exit_code = 4


class InfrastructureError(CompatError):
    exit_code = 5


class StorageError(InfrastructureError):
    """A file could not be written: the disk is full (ENOSPC), the quota is spent (EDQUOT) or
    the file system is read-only (EROFS). The message names the path and the bytes needed;
    nothing half-written is left (:func:`compat.io.atomic_path`)."""


class ConflictError(CompatError):
    """Someone else changed what this command was about to change (compare-and-set lost)."""

    exit_code = 6


# Not an error: a command that ran correctly but did not do its job (``compat backfill`` with
# a psi refused when it was fitted: nothing upgraded, nothing written). Scripts that chain
# ``compat backfill ... && deploy`` must not deploy a file that was never written.
NOTHING_DONE = 7
