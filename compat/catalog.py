"""Build things by name (timm-style): a catalog maps names to factories.

An unknown name raises an error listing the known ones, so a typo in params.yaml or on the
command line tells the user what they could have written: ``UsageError`` (exit 2) for a name given
on the command line or in code, ``BadInputError`` (exit 4) naming the file and field when the
caller says where the name was read (``where="params.yaml: train.v2.method"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from compat.errors import BadInputError, UsageError

T = TypeVar("T")


class Catalog(Generic[T]):
    """A named collection of factories of one kind (backbones, heads, losses, protocols)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._factories: dict[str, Callable[..., T]] = {}

    def register(self, name: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
        def decorator(factory: Callable[..., T]) -> Callable[..., T]:
            if name in self._factories:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._factories[name] = factory
            return factory

        return decorator

    def names(self) -> list[str]:
        return sorted(self._factories)

    def __contains__(self, name: object) -> bool:
        return name in self._factories

    def get(self, name: str, where: str | None = None) -> Callable[..., T]:
        """The factory of ``name``; ``where`` (``file: dotted.field``) makes an unknown name a
        BadInputError about that file instead of a UsageError."""
        try:
            return self._factories[name]
        except (KeyError, TypeError):  # TypeError: an unhashable value read from a file
            message = f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}"
            if where is not None:
                raise BadInputError(f"{where}: {message}") from None
            raise UsageError(message) from None

    def create(self, name: str, *args: Any, **kwargs: Any) -> T:
        return self.get(name)(*args, **kwargs)
