"""What the index knows about one file: its definitions and imports (plain data, msgpack-able)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# Lines are 0-based and inclusive at both ends; -1 means "none".


@dataclass(frozen=True, slots=True)
class Definition:
    name: str
    kind: str  # function, method, class, struct, interface, trait, impl, enum, type, constant
    qualname: str  # Outer.inner for members
    start_line: int  # first line of the definition (decorators included)
    end_line: int
    sig_end_line: int  # last line of the header (before the body)
    doc_start: int  # docstring (Python) or leading comment (others)
    doc_end: int
    parent: int  # index of the enclosing definition in FileSymbols.definitions, or -1
    signature: str  # header text, whitespace-collapsed
    idents: tuple[str, ...]  # identifiers used in the definition (sorted, own name excluded)

    def to_wire(self) -> list[Any]:
        return [
            self.name,
            self.kind,
            self.qualname,
            self.start_line,
            self.end_line,
            self.sig_end_line,
            self.doc_start,
            self.doc_end,
            self.parent,
            self.signature,
            list(self.idents),
        ]

    @classmethod
    def from_wire(cls, row: list[Any]) -> Definition:
        return cls(*row[:10], tuple(row[10]))  # type: ignore[call-arg]

    @property
    def first_line(self) -> int:
        """Where the snippet starts: a leading comment counts as part of the definition."""
        if 0 <= self.doc_start < self.start_line:
            return self.doc_start
        return self.start_line


@dataclass(frozen=True, slots=True)
class Import:
    """One name bound by an import statement, as written (resolved later against the workspace)."""

    module: str  # "os.path", ".util", "./util", "fmt", "crate::util", "util.h"
    name: str | None  # imported name; None = the module itself; "*" = everything
    alias: str | None  # the local name the code uses (None for C includes and `import *`)
    line: int

    def to_wire(self) -> list[Any]:
        return [self.module, self.name, self.alias, self.line]

    @classmethod
    def from_wire(cls, row: list[Any]) -> Import:
        return cls(*row)


@dataclass(frozen=True, slots=True)
class FileSymbols:
    path: str  # relative to the workspace root, '/' separated
    language: str
    digest: str  # content hash
    size: int
    mtime_ns: int
    definitions: tuple[Definition, ...]
    imports: tuple[Import, ...]
    # Lookups derived from `definitions` on first use: they live and die with the outline, so
    # they need no key and no eviction (ranking and stubs ask them on every keystroke).
    _by_name: dict[str, list[int]] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _members: dict[int, list[Definition]] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _words: frozenset[str] | None = field(default=None, init=False, repr=False, compare=False)

    def to_wire(self) -> list[Any]:
        return [
            self.language,
            self.digest,
            self.size,
            self.mtime_ns,
            [d.to_wire() for d in self.definitions],
            [i.to_wire() for i in self.imports],
        ]

    @classmethod
    def from_wire(cls, path: str, row: list[Any]) -> FileSymbols:
        return cls(
            path,
            row[0],
            row[1],
            row[2],
            row[3],
            tuple(Definition.from_wire(d) for d in row[4]),
            tuple(Import.from_wire(i) for i in row[5]),
        )

    def enclosing(self, line: int) -> list[Definition]:
        """Definitions containing `line`, outermost first."""
        return [d for d in self.definitions if d.start_line <= line <= d.end_line]

    def indices_named(self, name: str) -> Sequence[int]:
        """Indices of the definitions called `name`, in source order."""
        table = self._by_name
        if table is None:
            table = {}
            for i, d in enumerate(self.definitions):
                table.setdefault(d.name, []).append(i)
            object.__setattr__(self, "_by_name", table)  # derived, so the outline stays frozen
        return table.get(name, ())

    def words(self) -> frozenset[str]:
        """The names the file defines and the identifiers its definitions use."""
        words = self._words
        if words is None:
            words = frozenset(word for d in self.definitions for word in (d.name, *d.idents))
            object.__setattr__(self, "_words", words)  # derived, so the outline stays frozen
        return words

    def members(self, index: int) -> Sequence[Definition]:
        """The definitions directly inside definition `index` (a class's methods), in order."""
        table = self._members
        if table is None:
            table = {}
            for d in self.definitions:
                if d.parent >= 0:
                    table.setdefault(d.parent, []).append(d)
            object.__setattr__(self, "_members", table)  # derived, so the outline stays frozen
        return table.get(index, ())
