"""An incremental reader of the JSON a row emits, byte by byte: which unique arrays are open (at every
nesting level), the text of each one's current item, and the canonical values of its finished items.

:meth:`Cursor.feed` returns False at the byte that finishes an item equal to an earlier item of the
same unique array (JSON equality: ``1 == 1.0``, ``true != 1``, key order ignored). The grammar keeps
the text valid JSON, so the reader only tracks where values start and end. :meth:`Cursor.copy` is cheap
(frames copied, finished-item sets shared until written): the guard tries a token on a copy.
"""

from __future__ import annotations

import json
from fractions import Fraction

from .plan import Loc

WS = frozenset(b" \t\n\r")
NUMBER = frozenset(b"0123456789+-.eE")
LITERAL = {ord("t"): 4, ord("f"): 5, ord("n"): 4}


def canonical(v):
    """A hashable form equal exactly when JSON Schema calls two values equal."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return (type(v).__name__, v)
    if isinstance(v, (int, float)):
        return ("n", Fraction(v))
    if isinstance(v, list):
        return ("a", tuple(canonical(x) for x in v))
    return ("o", frozenset((k, canonical(x)) for k, x in v.items()))


class Frame:
    """An open array or object: its location, and for a unique array the finished items and the current one."""

    __slots__ = ("array", "loc", "unique", "seen", "texts", "shared", "cur", "count", "key")

    def __init__(self, array: bool, loc: Loc):
        self.array, self.loc, self.unique = array, loc, array and loc.unique
        self.seen: set = set()  # canonical values of finished items (unique arrays)
        self.texts: list[bytes] = []  # their texts, without whitespace between tokens (the look-ahead's)
        self.shared = False  # seen/texts belong to the frame this one was copied from
        self.cur: bytearray | None = None  # the current item's text so far (unique arrays)
        self.count = 0  # items finished
        self.key = None  # objects: the key whose value comes next

    def copy(self) -> "Frame":
        f = Frame.__new__(Frame)
        f.array, f.loc, f.unique, f.seen, f.texts = self.array, self.loc, self.unique, self.seen, self.texts
        f.shared, f.cur, f.count, f.key = True, None if self.cur is None else bytearray(self.cur), self.count, self.key
        return f

    def finish(self) -> bool:
        """The current item is complete: False when it equals an earlier one."""
        if self.unique:
            text = bytes(self.cur)
            value = canonical(json.loads(text))
            if value in self.seen:
                return False
            if self.shared:
                self.seen, self.texts, self.shared = set(self.seen), list(self.texts), False
            self.seen.add(value)
            self.texts.append(text)
            self.cur = None
        self.count += 1
        return True


class Cursor:
    """Where the row's JSON text stands: the open containers and the lexical mode."""

    __slots__ = ("stack", "mode", "root", "is_key", "keybuf", "left")

    def __init__(self, root: Loc):
        self.stack: list[Frame] = []
        self.mode = "value"  # value | str | esc | num | lit | after | key | colon | done
        self.root = root
        self.is_key = False
        self.keybuf = bytearray()
        self.left = 0  # letters of a literal still to come

    def copy(self) -> "Cursor":
        c = Cursor.__new__(Cursor)
        c.stack = [f.copy() for f in self.stack]
        c.mode, c.root, c.is_key, c.keybuf, c.left = self.mode, self.root, self.is_key, bytearray(self.keybuf), self.left
        return c

    def feed_bytes(self, data: bytes) -> bool:
        return all(self.feed(b) for b in data)

    def feed(self, b: int) -> bool:
        """Read one byte; False when it finishes an item equal to an earlier one of its unique array."""
        mode = self.mode
        if mode in ("str", "esc") or b not in WS:  # items are kept without whitespace between tokens
            for f in self.stack:
                if f.cur is not None:
                    f.cur.append(b)
        if mode == "str":
            if b == 0x5C:
                self.mode = "esc"
            elif b == 0x22:
                if self.is_key:
                    self.stack[-1].key = json.loads(b'"' + bytes(self.keybuf) + b'"')
                    self.mode = "colon"
                else:
                    return self._end()
            elif self.is_key:
                self.keybuf.append(b)
            return True
        if mode == "esc":
            if self.is_key:
                self.keybuf += b"\\" + bytes([b])
            self.mode = "str"
            return True
        if mode == "num":
            if b in NUMBER:
                return True
            self._drop_last(b)
            if not self._end():
                return False
            return self.feed(b)
        if mode == "lit":
            self.left -= 1
            return self._end() if self.left == 0 else True
        if b in WS:
            return True
        if mode == "value":
            return self._begin(b)
        if mode == "key":
            if b == 0x22:
                self.mode, self.is_key, self.keybuf = "str", True, bytearray()
                return True
            return self._close()
        if mode == "colon":
            self.mode = "value"
            return True
        if mode == "after":
            if b == 0x2C:
                self.mode = "value" if self.stack[-1].array else "key"
                return True
            return self._close()
        return True

    def _drop_last(self, b: int) -> None:
        """A number ends at the byte after it: that byte belongs to what follows, not to the item."""
        if b not in WS:
            for f in self.stack:
                if f.cur is not None:
                    del f.cur[-1]

    def _begin(self, b: int) -> bool:
        top = self.stack[-1] if self.stack else None
        if b == 0x5D and top is not None and top.array:  # "[]": the array closes before any item
            return self._close()
        loc = self.root if top is None else top.loc.item(top.count) if top.array else top.loc.child(top.key)
        if top is not None and top.unique:
            top.cur = bytearray([b])
        if b in (0x7B, 0x5B):
            self.stack.append(Frame(b == 0x5B, loc))
            self.mode = "value" if b == 0x5B else "key"
        elif b == 0x22:
            self.mode, self.is_key = "str", False
        elif b in LITERAL:
            self.mode, self.left = "lit", LITERAL[b] - 1
        else:
            self.mode = "num"
        return True

    def _close(self) -> bool:
        self.stack.pop()
        return self._end()

    def _end(self) -> bool:
        """A value is complete: its parent array's item (if unique: checked against the earlier ones)."""
        self.mode = "after" if self.stack else "done"
        top = self.stack[-1] if self.stack else None
        return top.finish() if top is not None and top.array else True

    def pending(self) -> list[Frame]:
        """The open unique arrays with finished items whose current item could still repeat one of them."""
        return [f for f in self.stack if f.unique and f.seen]

    def prefix_of_seen(self) -> bool:
        """Whether some open unique array's current item, as written so far, begins an earlier item's text
        (or has not begun: then any earlier item may follow)."""
        for f in self.stack:
            if f.unique and f.texts:
                if f.cur is None:
                    if f is self.stack[-1] and self.mode == "value":
                        return True
                    continue
                cur = bytes(f.cur)
                if any(t.startswith(cur) for t in f.texts):
                    return True
        return False

    def seen_next(self) -> set:
        """The bytes ``b`` such that an open item's text so far, then ``b``, begins an earlier item's text (the
        look-ahead tries them first)."""
        out = set()
        for f in self.stack:
            if f.unique and f.texts and f.cur is not None:
                cur = bytes(f.cur)
                n = len(cur)
                out.update(t[n] for t in f.texts if len(t) > n and t.startswith(cur))
        return out

    def key(self) -> tuple:
        """The state up to whitespace between tokens (what the guard's look-ahead depends on)."""
        return (self.mode, bytes(self.keybuf), self.left,
                tuple((f.count, None if f.cur is None else bytes(f.cur)) for f in self.stack))
