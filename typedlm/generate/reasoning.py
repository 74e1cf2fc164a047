"""Reasoning models: a ``<think>…</think>`` block before the answer.

Family detection (:func:`typedlm.profile.detect_reasoning`): a chat template that mentions both markers and a tokenizer that
spells each marker as one token (Qwen3, DeepSeek-R1 and QwQ style). Other families add a
:class:`~typedlm.profile.ReasoningFormat` there.

Per request (:func:`prepare`): the rendered prompt decides the mode.

  * the generation prompt already closes the block (Qwen3 with ``enable_thinking: false`` renders
    ``<think>\\n\\n</think>\\n\\n``) -> no reasoning;
  * it leaves a block open (DeepSeek-R1 renders ``<think>\\n``) -> the output starts in reasoning;
  * otherwise typedlm appends ``<think>\\n`` to the prompt, so the output always starts in reasoning
    (a reasoning model would open the block itself; doing it for it makes the split exact).
  * a budget of 0 appends ``<think>\\n\\n</think>\\n\\n`` instead: no reasoning.

During decoding (:class:`ReasoningState`, one per sequence): the grammar, stop strings and the
answer's text start only after the end marker; once ``budget`` reasoning tokens were sampled the end
marker is forced (appended without sampling). The split of the output is by token index, so it does
not depend on whether the markers are "special" tokens.

``reasoning_effort`` maps to a budget: low 256, medium 1024, high 4096 tokens; ``max_reasoning_tokens``
wins when both are given.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..profile import ReasoningFormat

EFFORT_BUDGET = {"low": 256, "medium": 1024, "high": 4096}


def prepare(fmt: ReasoningFormat, prompt_text: str, budget: int | None) -> tuple[str, bool]:
    """(prompt text to encode, whether the output starts inside the reasoning block)."""
    if prompt_text.rstrip().endswith(fmt.end):
        return prompt_text, False
    if budget == 0:
        if prompt_text.rfind(fmt.start) > prompt_text.rfind(fmt.end):
            return prompt_text + f"\n{fmt.end}\n\n", False
        return prompt_text + f"{fmt.start}\n\n{fmt.end}\n\n", False
    if prompt_text.rfind(fmt.start) > prompt_text.rfind(fmt.end):
        return prompt_text, True
    return prompt_text + f"{fmt.start}\n", True


@dataclass
class ReasoningState:
    """Decode-time state of one row that starts inside a reasoning block."""

    end_ids: tuple[int, ...]
    budget: int | None = None  # reasoning tokens sampled before the end marker is forced
    active: bool = True
    tokens: int = 0  # tokens inside the block (the end marker excluded)
    ended_at: int | None = None  # output index just after the end marker
    _recent: list[int] = field(default_factory=list)

    def observe(self, token: int, index: int) -> None:
        """``token`` was appended at output position ``index`` while active."""
        self._recent = (self._recent + [token])[-len(self.end_ids):]
        if tuple(self._recent) == self.end_ids:
            self.active = False
            self.ended_at = index + 1
            self.tokens -= len(self.end_ids) - 1
        else:
            self.tokens += 1

    def forced(self) -> list[int]:
        """The end marker, once the budget is spent (else [])."""
        if self.active and self.budget is not None and self.tokens >= self.budget:
            return list(self.end_ids)
        return []

    def split(self, output_ids: list[int]) -> tuple[list[int], list[int]]:
        """(reasoning ids, answer ids) of the output; the marker belongs to neither."""
        if self.ended_at is None:
            return list(output_ids), []
        return list(output_ids[: self.ended_at - len(self.end_ids)]), list(output_ids[self.ended_at:])


class StreamSplit:
    """Stream side: which part of the output each emitted token belongs to ("reasoning" / "marker" /
    "content"), by the same token rule as :class:`ReasoningState`."""

    def __init__(self, end_ids: tuple[int, ...] | None):
        self.state = ReasoningState(end_ids) if end_ids else None
        self.index = 0

    def phase(self, token: int) -> str:
        st = self.state
        i, self.index = self.index, self.index + 1
        if st is None or not st.active:
            return "content"
        st.observe(token, i)
        return "reasoning" if st.active else "marker"
