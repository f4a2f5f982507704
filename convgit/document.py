"""A result that reads as its JSON document: the base of the typed results (convgit.results,
``StatusReport``). Here, apart from the results themselves, so that `status` loads none of
their dataclasses (start-up: docs/performance.md)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any, Iterator


class Document(Mapping):
    """A result that reads as its JSON document (a read-only mapping over ``to_json()``)."""

    @abstractmethod
    def to_json(self) -> dict:
        """The JSON document of this result (each result defines it)."""

    def __getitem__(self, key: str) -> Any:
        return self.to_json()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_json())

    def __len__(self) -> int:
        return len(self.to_json())


def with_warnings(doc: dict, warnings: list[str]) -> dict:
    """``doc`` with its ``warnings`` (the key only when there are some)."""
    if warnings:
        doc["warnings"] = list(warnings)
    return doc
