"""A run's checkpoint directory kept in memory, for tests whose cluster is a fake (the ``memory_buckets`` fixture in tests/conftest.py)."""

from __future__ import annotations


class MemoryStore:
    """A run's directory in an in-memory bucket (``workloads.runs.identity.Store``), for tests whose cluster is a fake."""

    def __init__(self, objects: dict[str, bytes], where: str) -> None:
        self.objects, self.where = objects, where

    def read(self, name: str) -> bytes | None:
        return self.objects.get(self.where + name)

    def write(self, name: str, data: bytes, *, create: bool) -> bool:
        if create and self.where + name in self.objects:
            return False
        self.objects[self.where + name] = data
        return True

    def has_any(self, prefix: str) -> bool:
        return any(k.startswith(self.where + prefix) for k in self.objects)

    def entries(self) -> list[str]:
        """The names directly in the directory (directories end in ``/``)."""
        out = set()
        for k in self.objects:
            if k.startswith(self.where):
                head, sep, _ = k[len(self.where) :].partition("/")
                out.add(head + sep)
        return sorted(out)
