"""/v1/chat/completions beyond plain text: tools, reasoning, and the message / delta shapes.

``plan(state, engine, body)`` resolves everything a chat request asks for into a :class:`ChatPlan`:
the constraint (tools, response_format, or both: :mod:`.tools`), how to render and encode the
prompt (tools in the template or the fallback prompt, ``chat_template_kwargs``, the reasoning block:
:mod:`typedlm.generate.reasoning`), and the ``build_sequence`` keywords (reasoning budget,
jump-forward). ``message(res)`` builds the response message; :class:`ChatStream` the stream deltas
of one choice, in the exact OpenAI chunk shape (``reasoning_content``, ``content``, ``tool_calls``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...generate.detokenize import StreamText
from ...generate.reasoning import EFFORT_BUDGET, StreamSplit, prepare
from ..errors import APIError
from ..generation import Degraded, Prompt, jump_forward, warning_header
from ..structured import Structured, resolve
from .tools import (ParsedCall, Relaxed, ToolStream, combine, parse_calls, template_messages, tool_choice_mode,
                    tool_format, unfinished_call_removed)

RESERVED_TEMPLATE_KWARGS = {"messages", "tools", "add_generation_prompt", "tokenize", "documents", "chat_template"}
EFFORTS = {"none": 0, "minimal": 64, **EFFORT_BUDGET}


@dataclass(frozen=True)
class ChatPlan:
    """Everything a chat request asks for, resolved once by :func:`plan` (nothing is filled in later)."""

    structured: Structured
    tool_mode: str  # none | auto | required
    messages: list[dict]
    template_kwargs: dict
    budget: int | None  # reasoning tokens
    jump_forward: bool
    include_reasoning: bool
    degraded: Degraded | None  # non-strict tools whose schemas were relaxed to a superset

    def encoder(self, engine):
        """``encode(instruction) -> Prompt`` for ``generation.submit``: the rendered prompt and the
        sequence keywords that depend on it (an open reasoning block)."""
        def encode(instruction: str | None) -> Prompt:
            text = engine.render_chat(_with_instruction(self.messages, instruction), **self.template_kwargs)
            thinking = False
            if engine.reasoning is not None:
                text, thinking = prepare(engine.reasoning, text, self.budget)
            return Prompt(engine.encode_text(text),
                          {"thinking": thinking, "reasoning_budget": self.budget, "jump_forward": self.jump_forward})

        return encode


def relaxed_tools(r: Relaxed | None) -> Degraded | None:
    """Relaxed tool schemas: the ``Warning: 199`` header and the response's ``typedlm`` field, as for a
    relaxed json_schema; ``schema_valid`` there checks each call's arguments on its tool's schema."""
    if r is None:
        return None
    places = "; ".join(f"{d['keyword']} at {d['pointer']} of tool {d['tool']}" for d in r.places)
    return Degraded(warning_header(f"relaxed {places}; the call arguments are validated with jsonschema "
                                   "(see typedlm.schema_valid)", "tool parameters partly enforced"),
                    {"degraded": "relaxed", "reason": "; ".join(r.reasons), "relaxed": r.places},
                    lambda res: r.check(res.text))


def plan(state, engine, body, logprobs) -> ChatPlan:
    mode, named = tool_choice_mode(body)
    answer = resolve(body)
    calls, relaxed = tool_format(body, mode, named)
    structured = answer
    if calls is not None:
        structured = Structured(combine(calls, mode, answer.constraint, relaxed is not None), "tools")
    messages, kwargs = template_messages(body, engine.chat.template)
    extra = body.chat_template_kwargs or {}
    clash = sorted(RESERVED_TEMPLATE_KWARGS & set(extra))
    if clash:
        raise APIError(400, f"chat_template_kwargs may not set {', '.join(clash)}", param="chat_template_kwargs")
    budget = None
    if body.max_reasoning_tokens is not None or body.reasoning_effort is not None:
        if engine.reasoning is None:
            field_ = "max_reasoning_tokens" if body.max_reasoning_tokens is not None else "reasoning_effort"
            raise APIError(400, f"{field_}: model '{body.model}' is not a reasoning model "
                                "(its chat template has no <think> block)", param=field_)
        budget = body.max_reasoning_tokens if body.max_reasoning_tokens is not None else EFFORTS[body.reasoning_effort]
    return ChatPlan(structured, mode, messages, {**kwargs, **extra}, budget,
                    jump_forward(state, body, logprobs), body.include_reasoning, relaxed_tools(relaxed))


def message(res, p: ChatPlan) -> tuple[dict, str]:
    """(assistant message, finish_reason) of one finished choice."""
    msg: dict = {"role": "assistant", "content": res.text}
    finish = res.finish_reason
    if p.tool_mode != "none":
        content, calls = parse_calls(res.text, cut=finish == "length")
        msg["content"] = content
        if calls:
            msg["tool_calls"] = [c.to_openai() for c in calls]
            if finish == "stop":
                finish = "tool_calls"
    if res.reasoning is not None and p.include_reasoning:
        msg["reasoning_content"] = res.reasoning
    return msg, finish


class ChatStream:
    """Deltas of one streamed choice."""

    def __init__(self, engine, p: ChatPlan, seq):
        self.split = StreamSplit(seq.reasoning.end_ids if seq.reasoning is not None else None)
        self.thought = StreamText(engine.tokenizer)
        self.answer = StreamText(engine.tokenizer, seq.params.stop)
        self.tools = ToolStream() if p.tool_mode != "none" else None
        self.p = p

    def add(self, token: int) -> list[dict]:
        phase = self.split.phase(token)
        if phase == "reasoning":
            text = self.thought.add(token)
            return [{"reasoning_content": text}] if text and self.p.include_reasoning else []
        if phase == "marker":
            return []
        return self._content(self.answer.add(token))

    def final_deltas(self, res) -> tuple[list[dict], str]:
        """The deltas still held back when the choice ends, and its finish_reason."""
        out = []
        if res.reasoning is not None and self.p.include_reasoning:
            rest = self.thought.finish(res.reasoning)
            if rest:
                out.append({"reasoning_content": rest})
        out += self._content(self.answer.finish(res.text))
        if self.tools is not None:
            out += self.tools.feed("") + self._flush_tools(cut=res.finish_reason == "length")
        finish = res.finish_reason
        if self.tools is not None and self.tools.calls and finish == "stop":
            finish = "tool_calls"
        return out, finish

    def _content(self, text: str) -> list[dict]:
        if not text:
            return []
        if self.tools is None:
            return [{"content": text}]
        return self.tools.feed(text)

    def _flush_tools(self, cut: bool) -> list[dict]:
        t = self.tools
        rest, t.buf = t.buf, ""
        rest = rest if t.in_call else unfinished_call_removed(rest, cut)
        if rest and not t.in_call and (rest.strip() or not t.calls):
            return [{"content": rest}]
        return []


def _with_instruction(messages: list[dict], instruction: str | None) -> list[dict]:
    if not instruction:
        return messages
    if messages and messages[0]["role"] == "system":
        first = {**messages[0], "content": f"{messages[0]['content']}\n\n{instruction}".strip()}
        return [first, *messages[1:]]
    return [{"role": "system", "content": instruction}, *messages]


__all__ = ["ChatPlan", "ChatStream", "ParsedCall", "message", "plan"]
