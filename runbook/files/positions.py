"""Where each value of a loaded YAML document was written: line and column by path.

The loader records them; the problem reports point at them. Both import this, not each other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

PathTuple = tuple[str | int, ...]


@dataclasses.dataclass(frozen=True)
class Position:
    line: int  # 1-based
    column: int  # 1-based

    def __str__(self) -> str:
        return f"{self.line}:{self.column}"



class Positions:
    """Where each path of the loaded data was written: its key, and the start of its value."""

    __slots__ = ("_keys", "_values")

    def __init__(
        self,
        keys: Mapping[PathTuple, Position] | None = None,
        values: Mapping[PathTuple, Position] | None = None,
    ):
        self._keys = dict(keys or {})
        self._values = dict(values or {})

    def key(self, path: PathTuple) -> Position | None:
        """Where the mapping key of this path is (None for list items and the document)."""
        return self._keys.get(tuple(path))

    def value(self, path: PathTuple) -> Position | None:
        """Where the value of this path starts."""
        return self._values.get(tuple(path))

    def nearest(self, path: PathTuple) -> tuple[PathTuple, Position | None]:
        """The path itself or its nearest ancestor that was written down, and where.

        A mapping entry answers with its key: that is where a reader's eye goes.
        """
        path = tuple(path)
        while True:
            found = self._keys.get(path) or self._values.get(path)
            if found is not None or not path:
                return path, found
            path = path[:-1]

    def paths(self) -> Iterator[PathTuple]:
        """Every path that has a value position, in document order."""
        return iter(self._values)

    def __contains__(self, path: object) -> bool:
        return isinstance(path, tuple) and (path in self._values or path in self._keys)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Positions({len(self._values)} values, {len(self._keys)} keys)"
