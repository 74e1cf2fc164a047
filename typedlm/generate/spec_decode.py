"""Jump-forward as speculative decoding, the grammar the drafter: draft, verify, accept in one place.

**Draft** (:class:`JumpForward`, after each sampled token): ``GrammarRow.jump_string()`` gives the text
the grammar forces next (e.g. ``": "`` after a property name, or a whole ``{"name": "`` prefix). The
draft is its canonical tokenization (the split a trained model most likely picks itself):

  1. re-tokenize ``text(last token) + forced`` and require that it starts with the last token
     unchanged (else the forced text would merge into it: no draft);
  2. keep only the tokens that end before the last pre-tokenizer chunk of that text (the last
     chunk may still merge with the free text that follows) and that decode to exactly a prefix
     of the forced text.

The scheduler feeds the draft after the sampled token in one multi-token forward (the runner's
``extend``), which gives the logits at every draft position.

**Verify and accept** (:func:`verify_drafts`, before the next sampling): each drafted row accepts the
longest prefix of its draft that it would itself have chosen at each position (``BatchSampler.verify``:
greedy = the masked argmax; sampling = accept with probability p(token), the exact rule for a
deterministic draft); accepted tokens are reported as forced; after a rejection the rejected token is
removed from the next draw's mask (``forbid``) and the KV forgets the rest (``truncate``). The matcher
only ever sees accepted tokens. Greedy output is therefore the output without jump-forward; a forward
is saved for every accepted draft token (``forced_tokens``). Logprobs are not computed for drafted
tokens, so a request asking for logprobs does not jump forward.
"""

from __future__ import annotations

from typing import Callable

START, MAX_DRAFT = 8, 64


class JumpForward:
    def __init__(self, engine):
        self.tokenizer = engine.tokenizer
        self.pre = engine.tokenizer.backend_tokenizer.pre_tokenizer
        self.stop_ids = engine.stop_ids
        self.calls = 0  # jump-string lookups (benchmarks)
        self.drafted = 0  # tokens drafted (fed for verification); the accepted ones are ``forced_tokens``
        self.limit = START  # draft length cap: adapts to how much of its drafts this row accepts

    def tokens(self, seq) -> list[int]:
        """Canonical tokens for the text the grammar forces after ``seq``'s last token ([] if none)."""
        if not seq.output_ids:
            return []
        self.calls += 1
        forced = seq.grammar.jump_string()
        if not forced:
            return []
        last = seq.output_ids[-1]
        prev = self.tokenizer.decode([last])
        text = prev + forced
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if not ids or ids[0] != last or self.tokenizer.decode(ids[:1]) != prev:
            return []
        limit = self._stable_chars(text)
        out, at = [], len(prev)
        for t in ids[1:]:
            piece = self.tokenizer.decode([t])
            if t in self.stop_ids or at + len(piece) > limit or not forced.startswith(piece, at - len(prev)):
                break
            out.append(t)
            at += len(piece)
        return out[: self.limit]

    def verified(self, accepted: int, drafted: int) -> None:
        """Feedback after a verification: a fully accepted draft doubles the cap, a rejection sets it
        to one more than the accepted prefix (rejected draft tokens cost compute on a compute-bound
        device: a model that spells forced text its own way is fed short drafts)."""
        self.limit = min(2 * self.limit, MAX_DRAFT) if accepted == drafted else max(1, accepted + 1)

    def _stable_chars(self, text: str) -> int:
        """Characters of ``text`` before its last pre-tokenizer chunk (tokens there cannot change)."""
        if self.pre is None:
            return 0
        chunks = self.pre.pre_tokenize_str(text)
        return chunks[-1][1][0] if len(chunks) >= 2 else 0


def verify_drafts(rows: list, sampler, emit: Callable[[object, int], None]) -> list[int]:
    """Verify every drafted row of ``rows`` (scheduler requests whose ``next_logits`` hold the logits at
    every draft position) and accept the confirmed prefix; ``emit(row, token)`` reports each accepted
    token. Leaves each row's ``next_logits`` at the position after its last accepted token and its draft
    empty; returns per row the number of drafted tokens the KV must forget."""
    drop = [0] * len(rows)
    for i, r in enumerate(rows):
        if not r.draft:
            continue
        seq, logits, draft = r.seq, r.next_logits, r.draft
        m = 0
        while m < len(draft) and not seq.finished and sampler.verify(logits[m], seq, r.slot, draft[m]):
            if seq.accept(draft[m], forced=True).emitted:
                emit(r, draft[m])
                sampler.saw(r.slot, seq, [draft[m]])
            m += 1
        if not seq.finished:
            if m < len(draft):
                drop[i] = len(draft) - m
                sampler.forbid(seq, draft[m])
            seq.settle()
        seq.jump.verified(m, len(draft))
        r.next_logits, r.draft = logits[m], []
    return drop
