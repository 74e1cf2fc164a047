"""Slot allocation: a row owns one slot (a batch index of every per-row buffer) for its life."""

from __future__ import annotations

import threading


class SlotPool:
    """Slots ``[0, capacity)``, handed out lowest first (so a decode range ``[0, top)`` stays compact)
    and taken back on release. Thread-safe: schedulers on several threads may share one pool."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._free = list(range(capacity))
        self._held: set[int] = set()
        self._lock = threading.Lock()

    @property
    def idle(self) -> bool:
        return not self._held

    @property
    def held(self) -> int:
        return len(self._held)

    @property
    def free(self) -> int:
        return len(self._free)

    def acquire(self) -> int:
        with self._lock:
            self._free.sort()
            slot = self._free.pop(0)
            self._held.add(slot)
            return slot

    def release(self, slot: int) -> bool:
        """Free ``slot``; False when it was not held (a second release is a no-op)."""
        with self._lock:
            if slot not in self._held:
                return False
            self._held.discard(slot)
            self._free.append(slot)
            return True


class SlotCache:
    """What every KV cache reports about its slots (``self.slots``: its :class:`SlotPool`)."""

    slots: SlotPool

    @property
    def idle(self) -> bool:
        return self.slots.idle

    @property
    def free_slots(self) -> int:
        return self.slots.free

    @property
    def size(self) -> int:
        """Slots held by rows."""
        return self.slots.held

    def note_cached(self, slot: int, n: int) -> None:
        """``n`` tokens of the slot's prompt came from the prefix cache (set at its prefill)."""
        self.__dict__.setdefault("_cached", {})[slot] = n

    def cached_tokens(self, slot: int) -> int:
        """Tokens of the slot's prompt read from the prefix cache (0: none, or a backend without one)."""
        return self.__dict__.get("_cached", {}).get(slot, 0)


class CompactingSlotCache(SlotCache):
    """A cache whose rows sit in ``order`` (the slot of each batch row) and are dropped lazily: ``release``
    marks the row (``_gone``), the next forward compacts every released row at once."""

    order: list[int]
    _gone: set[int]

    def acquire(self) -> int:
        return self.slots.acquire()

    def release(self, slot: int) -> None:
        if self.slots.release(slot) and slot in self.order:
            self._gone.add(slot)

    def capture(self, max_tokens: int | None = None) -> float:
        """Nothing to capture: dynamic shapes."""
        return 0.0
