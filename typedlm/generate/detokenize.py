"""Incremental detokenization and stop strings, linear in the output length.

:class:`Detokenizer` turns ids into text one id at a time with ``tokenizers.decoders.DecodeStream``
(which holds back a partial UTF-8 character until its last byte arrives), and finds stop strings by
searching only the new text plus the ``len(longest stop) - 1`` characters before it. Nothing
re-decodes the whole output per step (that would be quadratic in the output length).

:class:`StreamText` (for SSE) adds the hold-back rule: a text delta never contains the beginning of
a possible stop string, and never anything at or after a stop string.

:func:`token_bytes` gives a token's raw bytes from the tokenizer's vocabulary (xgrammar's decoded
vocabulary), so a multi-byte character split over tokens reports its real bytes in ``logprobs``,
not the bytes of U+FFFD.
"""

from __future__ import annotations

from tokenizers.decoders import DecodeStream


class Detokenizer:
    def __init__(self, tokenizer, stop: tuple[str, ...] = ()):
        self._backend = tokenizer.backend_tokenizer
        self._stream = DecodeStream(skip_special_tokens=True)
        self.stop = tuple(stop)
        self._keep = max((len(s) for s in self.stop), default=1) - 1
        self._tail = ""  # the last ``_keep`` characters of the text
        self._pieces: list[str] = []
        self.length = 0  # characters of text so far
        self.stop_at: int | None = None  # character offset where the first stop string begins

    def add(self, token: int) -> str:
        """Feed one id; returns the text it completes ('' while a character is still partial)."""
        piece = self._stream.step(self._backend, int(token)) or ""
        if not piece:
            return ""
        if self.stop and self.stop_at is None:
            window = self._tail + piece
            base = self.length - len(self._tail)
            hits = [i for i in (window.find(s) for s in self.stop) if i >= 0]
            if hits:
                self.stop_at = base + min(hits)
            self._tail = window[len(window) - self._keep:] if self._keep else ""
        self._pieces.append(piece)
        self.length += len(piece)
        return piece

    @property
    def text(self) -> str:
        return "".join(self._pieces)


class StreamText:
    """Text deltas for a stream: no partial character, no possible stop-string start, nothing past a stop."""

    def __init__(self, tokenizer, stop: tuple[str, ...] = ()):
        self.detok = Detokenizer(tokenizer, stop)
        self.hold = self.detok._keep
        self.sent = 0  # characters already sent
        self._pending = ""  # received, not yet sent

    def add(self, token: int) -> str:
        if self.detok.stop_at is not None:
            return ""  # the row ends on the token that completed a stop string
        piece = self.detok.add(token)
        if not piece:
            return ""
        self._pending += piece  # starts at character offset ``self.sent``
        if self.detok.stop_at is not None:
            return self._emit(max(0, self.detok.stop_at - self.sent))
        return self._emit(max(0, len(self._pending) - self.hold))

    def finish(self, final_text: str) -> str:
        """The rest of ``final_text`` (the finalizer's text) not yet sent."""
        if len(final_text) <= self.sent:
            return ""
        rest = final_text[self.sent:]
        self.sent = len(final_text)
        self._pending = ""
        return rest

    def _emit(self, n: int) -> str:
        out, self._pending = self._pending[:n], self._pending[n:]
        self.sent += len(out)
        return out


def token_bytes(engine, token: int) -> bytes:
    """The raw bytes of one token (special tokens: their text)."""
    vocab = engine.grammars.tokenizer_info.decoded_vocab
    if 0 <= token < len(vocab) and vocab[token]:
        return bytes(vocab[token])
    return engine.tokenizer.convert_ids_to_tokens(int(token)).encode("utf-8")
