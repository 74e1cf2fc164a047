"""How a model talks: its chat template and, for reasoning models, the ``<think>`` markers.

Resolved once when an engine is built (:func:`chat_profile`, :func:`detect_reasoning`); the per-request
reasoning rules live in :mod:`typedlm.generate.reasoning`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChatProfile:
    """How chat messages become a prompt: the model's own template, or none (raw prompts only)."""

    template: str | None

    @property
    def has_template(self) -> bool:
        return bool(self.template)


@dataclass(frozen=True)
class ReasoningFormat:
    start: str
    end: str
    start_ids: tuple[int, ...]
    end_ids: tuple[int, ...]


def detect_reasoning(tokenizer, template: str | None) -> ReasoningFormat | None:
    """The reasoning markers of this model family, or None (not a reasoning model): a chat template that
    mentions both markers and a tokenizer that spells each marker as one token (Qwen3, DeepSeek-R1 and
    QwQ style). Other families add their markers here."""
    for start, end in (("<think>", "</think>"),):
        if not template or start not in template or end not in template:
            continue
        s = tokenizer.encode(start, add_special_tokens=False)
        e = tokenizer.encode(end, add_special_tokens=False)
        if len(s) == 1 and len(e) == 1:
            return ReasoningFormat(start, end, tuple(s), tuple(e))
    return None
