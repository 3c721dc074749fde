"""Errors that map onto the CLI's documented exit codes.

0 pass, 1 a criterion failed, 2 usage error, 3 something named was not found, 4 bad input
(contract, card, params, embeddings, images), 5 infrastructure (registry unreachable).
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


class CriterionFailed(CompatError):
    exit_code = 1


class UsageError(CompatError):
    exit_code = 2


class NotFoundError(CompatError):
    exit_code = 3


class BadInputError(CompatError):
    exit_code = 4


class InfrastructureError(CompatError):
    exit_code = 5
