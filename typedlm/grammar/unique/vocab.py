"""What the guard knows of a tokenizer's vocabulary, computed once per tokenizer: each token's bytes, the
token classes a mask is narrowed with (as mask words, a bit per id, so a mask is narrowed with one
array operation and only its non-zero words are unpacked, instead of token by token), the single-byte tokens the look-ahead walks with, and the
tokens by their text (the tokens that continue an earlier item's text)."""

from __future__ import annotations

import threading

import numpy as np

from .cursor import NUMBER, WS

class Vocab:
    """The bytes of every token id of one tokenizer (stop and special ids: none) and its token classes."""

    def __init__(self, info):
        special = set(info.special_token_ids) | set(info.stop_token_ids)
        decoded = list(info.decoded_vocab)
        self.size = info.vocab_size
        self.words = (self.size + 31) // 32
        self.bytes = [b"" if i in special or i >= len(decoded) else decoded[i] for i in range(self.size)]

        def cls(test) -> np.ndarray:  # the tokens passing ``test`` as mask words (a bit per id)
            bits = np.zeros(32 * self.words, dtype=bool)
            bits[: self.size] = [bool(t) and test(t) for t in self.bytes]
            return np.packbits(bits, bitorder="little").view(np.int32)

        def after_quote(t: bytes, chars: bytes) -> bool:
            return b'"' in t and any(c in chars for c in t.split(b'"', 1)[1])

        self.quote = cls(lambda t: b'"' in t)
        self.quote_open = cls(lambda t: after_quote(t, b"[,"))  # may close a string and begin an item after it
        self.quote_close = cls(lambda t: after_quote(t, b"]}"))  # may close a string and the container around it
        self.bracket_comma = cls(lambda t: b"[" in t or b"," in t)
        self.bracket = cls(lambda t: b"[" in t)
        self.blank = cls(lambda t: not t.strip(bytes(WS)))
        self.digits = cls(lambda t: all(b in NUMBER for b in t))  # in a number: only more of it
        self.byte_token: dict[int, int] = {}
        for i, t in enumerate(self.bytes):
            if len(t) == 1:
                self.byte_token.setdefault(t[0], i)
        self.byte_values = np.array(sorted(self.byte_token), dtype=np.int64)
        ids = np.array([self.byte_token[b] for b in self.byte_values], dtype=np.int64)
        self.byte_words, self.byte_bits = ids // 32, ids % 32
        self.byte_solid = np.array([b not in WS for b in self.byte_values.tolist()], dtype=bool)
        self.by_text: dict[bytes, list[int]] = {}
        for i, t in enumerate(self.bytes):
            if t:
                self.by_text.setdefault(t, []).append(i)
        self.heads = {t[:k] for t in self.by_text for k in range(1, len(t))}  # proper prefixes of tokens

    @staticmethod
    def ids(words: np.ndarray) -> list[int]:
        """The ids whose bit is set in ``words`` (only the non-zero words are unpacked)."""
        nz = np.flatnonzero(words)
        if not len(nz):
            return []
        bits = np.unpackbits(words[nz].view(np.uint8).reshape(-1, 4), axis=1, bitorder="little")
        row, bit = np.nonzero(bits)
        return (nz[row] * 32 + bit).tolist()

    @staticmethod
    def on(words: np.ndarray, i: int) -> bool:
        return bool((int(words[i >> 5]) >> (i & 31)) & 1)

    def bytes_allowed(self, words: np.ndarray, solid: bool = False) -> list[int]:
        """The bytes whose single-byte token the mask allows (``solid``: whitespace too only when nothing else)."""
        on = ((words[self.byte_words] >> self.byte_bits) & 1).astype(bool)
        if solid and (on & self.byte_solid).any():
            on &= self.byte_solid
        return self.byte_values[on].tolist()

    def prefixes(self, rest: bytes, words: np.ndarray) -> set:
        """The tokens the mask ``words`` allows whose text begins ``rest`` (each a prefix of it)."""
        out = set()
        for k in range(1, len(rest) + 1):
            head = rest[:k]
            out.update(i for i in self.by_text.get(head, ()) if self.on(words, i))
            if head not in self.heads:  # no longer token begins so
                break
        return out


_VOCABS: dict[int, tuple] = {}
_LOCK = threading.Lock()


def vocab_of(info) -> Vocab:
    """:class:`Vocab` once per tokenizer info (kept with it so its id stays its own)."""
    with _LOCK:
        if id(info) not in _VOCABS:
            _VOCABS[id(info)] = (info, Vocab(info))
        return _VOCABS[id(info)][1]
