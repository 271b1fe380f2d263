"""Read-only attributes that a wrapper shows from the object it wraps, one line each.

`n_past = Forwarded[int]("inner")` in a class body makes `obj.n_past` read
`obj.inner.n_past`, as a read-only property would: assigning it raises AttributeError.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Forwarded(Generic[T]):
    """The same-named attribute of the attribute `via` (a data descriptor: never shadowed)."""

    __slots__ = ("name", "via")

    def __init__(self, via: str) -> None:
        self.via = via
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: type | None = None) -> T:
        if obj is None:
            return self  # type: ignore[return-value]  # the class's own attribute
        return getattr(getattr(obj, self.via), self.name)

    def __set__(self, obj: Any, value: Any) -> None:
        raise AttributeError(f"{self.name} is read from {self.via}: it cannot be set")
