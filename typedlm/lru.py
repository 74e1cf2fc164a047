"""A small thread-safe LRU map: ``get_or_build(key, build)``; the oldest entry goes past ``max_entries``."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable


class LRUCache:
    def __init__(self, max_entries: int):
        self.max_entries = max_entries
        self._items: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get_or_build(self, key, build: Callable[[], Any]):
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = build()
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)
        return value
