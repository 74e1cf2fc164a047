"""Tool calling for /v1/chat/completions: prompt rendering, the grammar, and parsing calls back out.

Wire format of a call in the model's text (Hermes / Qwen2.5 / Qwen3 style; the format the chat
templates of those families render and train on):

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

Grammar (an xgrammar structural tag; each tool's ``parameters`` schema goes through the same
refusal/rewrite layer as ``response_format`` json_schema, inside ``Grammars``; a refused keyword is
a 400 for a ``strict`` tool, else relaxed like a non-strict json_schema: ``tool_format``):

  ============================  =====================================================================
  ``tool_choice``                output
  ============================  =====================================================================
  ``none``                      no call (no grammar from the tools; the tools are still shown)
  ``auto`` (default)            free text; once ``<tool_call>`` appears, a call of one of the tools
                                whose arguments match its schema (``triggered_tags``)
  ``required``                  one call (several, separated by a newline, when
                                ``parallel_tool_calls``) and nothing else (``tags_with_separator``)
  ``{"type": "function", …}``   exactly one call of the named tool
  ============================  =====================================================================

With ``response_format`` json_schema and ``auto``: either the calls or the JSON answer (``or``); with a
forced call, the calls alone.

Prompt: a template that mentions ``tools`` gets ``tools=[…]`` (OpenAI shape) and the history as is
(assistant ``tool_calls`` with ``arguments`` parsed into objects, ``tool`` messages). Otherwise the
fallback below: a system message listing the tools and the call format, assistant calls written out in
that format, and tool results as user messages wrapped in ``<tool_response>``.
"""

from __future__ import annotations

from dataclasses import dataclass
import json
import re
import uuid

from ...errors import GrammarCompileError
from ...generate.result import check_schema
from ...grammar.schema import prepare_relaxed, prepare_schema
from ...grammar.spec import Constraint, canonical_json, make_constraint
from ..errors import APIError
from ..structured import check_metaschema

TRIGGER = "<tool_call>"
END = "</tool_call>"

FALLBACK_PROMPT = (
    "You can call these tools (JSON Schema of each tool's arguments):\n{tools}\n\n"
    "To call a tool, answer with one line per call, exactly like this:\n"
    '<tool_call>\n{{"name": "<tool name>", "arguments": {{<arguments as JSON>}}}}\n</tool_call>'
)


def begin(name: str) -> str:
    return f'{TRIGGER}\n{{"name": {json.dumps(name)}, "arguments": '


END_TEXT = "}\n" + END


# -- prompt ----------------------------------------------------------------------------------------
def template_messages(body, template: str | None) -> tuple[list[dict], dict]:
    """(messages for the chat template, extra template kwargs) for a ChatRequest."""
    native = bool(template) and "tools" in template
    out: list[dict] = []
    for i, m in enumerate(body.messages):
        try:
            text = m.text()
        except ValueError as e:
            raise APIError(400, f"messages[{i}]: {e}", param=f"messages[{i}].content") from e
        role = "system" if m.role == "developer" else m.role
        if role == "tool" and not m.tool_call_id:
            raise APIError(400, f"messages[{i}]: a tool message needs 'tool_call_id'", param=f"messages[{i}]")
        calls = []
        for j, c in enumerate(m.tool_calls or []):
            if role != "assistant":
                raise APIError(400, f"messages[{i}]: only assistant messages carry tool_calls",
                               param=f"messages[{i}].tool_calls")
            try:
                args = json.loads(c.function.arguments)
            except ValueError as e:
                raise APIError(400, f"messages[{i}].tool_calls[{j}].function.arguments is not JSON: {e}",
                               param=f"messages[{i}].tool_calls[{j}].function.arguments") from e
            calls.append({"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": args}})
        if native:
            d = {"role": role, "content": text}
            if calls:
                d["tool_calls"] = calls
            if role == "tool":
                d["tool_call_id"] = m.tool_call_id
            if m.name:
                d["name"] = m.name
            if m.reasoning_content:
                d["reasoning_content"] = m.reasoning_content
            out.append(d)
        elif role == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{text}\n</tool_response>"})
        elif calls:
            written = "\n".join(begin(c["function"]["name"]) + canonical_json(c["function"]["arguments"]) + END_TEXT
                                for c in calls)
            out.append({"role": "assistant", "content": f"{text}\n{written}".strip()})
        else:
            out.append({"role": role, "content": text})
    kwargs: dict = {}
    if body.tools:
        if native:
            kwargs["tools"] = [t.model_dump(exclude_none=True) for t in body.tools]
        else:
            listing = "\n".join(canonical_json({"name": t.function.name, "description": t.function.description or "",
                                                "parameters": _params(t)}) for t in body.tools)
            prompt = FALLBACK_PROMPT.format(tools=listing)
            if out and out[0]["role"] == "system":
                out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{prompt}"}
            else:
                out.insert(0, {"role": "system", "content": prompt})
    return out, kwargs


def _params(tool) -> dict:
    p = tool.function.parameters
    return p if p is not None else {"type": "object", "properties": {}}


# -- grammar ---------------------------------------------------------------------------------------
def tool_choice_mode(body) -> tuple[str, str | None]:
    """("none" | "auto" | "required", named tool or None)."""
    tc = body.tool_choice
    if not body.tools:
        if tc not in (None, "none"):
            raise APIError(400, "tool_choice needs 'tools'", param="tool_choice")
        return "none", None
    if tc is None:
        return "auto", None
    if isinstance(tc, str):
        return tc, None
    name = tc.function.name
    if name not in {t.function.name for t in body.tools}:
        raise APIError(400, f"tool_choice names tool {name!r}, which is not in 'tools'", param="tool_choice")
    return "required", name


@dataclass
class Relaxed:
    """Tools whose schema was relaxed to a superset (non-strict tools with unenforceable keywords)."""

    places: list[dict]  # [{tool, keyword, pointer, action}]
    reasons: list[str]  # the refusal of each relaxed tool
    schemas: dict[str, dict]  # tool name -> its original parameters schema (the arguments are checked on it)

    def check(self, text: str) -> tuple[bool | None, list[str]]:
        """(all calls of relaxed tools valid for the original schema, or None when there is none; errors)."""
        valid, errors = None, []
        for call in parse_calls(text)[1]:
            if call.name in self.schemas:
                ok, errs = check_schema(call.arguments, self.schemas[call.name])
                valid = ok if valid is None else valid and ok
                errors += [f"{call.name}: {e}" for e in errs]
        return valid, errors


def tool_format(body, mode: str, named: str | None) -> tuple[dict | None, Relaxed | None]:
    """The structural-tag format for the calls (None: mode none) and what was relaxed. Each schema is
    checked here so a refusal names the tool (``tools[i].function.parameters`` + the keyword's
    pointer): a 400 for a ``strict`` tool; otherwise, like a non-strict ``json_schema``, the calls are
    generated under a superset (the tag is compiled lenient, :func:`combine`: each schema through the
    one relaxing pass, :func:`typedlm.grammar.schema.prepare_relaxed`, whose places are named here) and
    their arguments validated with jsonschema afterwards (``Relaxed``)."""
    if mode == "none":
        return None, None
    tags, relaxed = [], Relaxed([], [], {})
    for i, t in enumerate(body.tools):
        if named is not None and t.function.name != named:
            continue
        params = _params(t)
        check_metaschema(params, f"tools[{i}].function.parameters")
        try:
            prepare_schema(params)
        except GrammarCompileError as e:
            where = f"tools[{i}].function.parameters"
            param = where + (e.pointer if e.pointer not in (None, "/") else "")
            if t.function.strict or not e.keyword:
                raise APIError(400, f"{where}: {e}", param=param, code="grammar_compile_error") from e
            try:
                _, done = prepare_relaxed(params)
            except GrammarCompileError as r:
                raise APIError(400, f"{where}: {e} (and it cannot be relaxed: {r})", param=param,
                               code="grammar_compile_error") from e
            relaxed.places += [{"tool": t.function.name, **d} for d in done]
            relaxed.reasons.append(f"{where}: {e}")
            relaxed.schemas[t.function.name] = params
        tags.append({"type": "tag", "begin": begin(t.function.name),
                     "content": {"type": "json_schema", "json_schema": params}, "end": END_TEXT})
    one = not body.parallel_tool_calls or named is not None  # a named tool_choice: that one call (as vLLM, OpenAI)
    if mode == "auto":
        fmt = {"type": "triggered_tags", "triggers": [TRIGGER], "tags": tags, "stop_after_first": one}
    else:
        fmt = {"type": "tags_with_separator", "tags": tags, "separator": "\n", "at_least_one": True,
               "stop_after_first": one}
    return fmt, relaxed if relaxed.schemas else None


def combine(calls: dict | None, mode: str, answer: Constraint | None, relaxed: bool = False) -> Constraint | None:
    """One constraint for tool calls and/or a response_format answer. A forced call (``required`` or a
    named tool) leaves no room for an answer in this turn: the calls alone (the answer's format applies
    to the turn that answers, as with OpenAI; openai-agents sends both on every turn). ``relaxed``: some
    tool's schema is relaxed (:func:`tool_format`), so the tag is compiled lenient; an answer schema
    beside it must still compile exactly (a 400 otherwise, as without relaxed tools)."""
    if calls is None:
        return answer
    if answer is None or mode != "auto":
        return make_constraint(structural_tag={"type": "structural_tag", "format": calls}, lenient=relaxed)
    if answer.kind not in ("json_schema", "json_object"):
        raise APIError(400, f"tools can be combined with response_format json_schema / json_object only, "
                            f"not {answer.kind}", param="tools")
    if relaxed and answer.kind == "json_schema":
        try:
            prepare_schema(answer.schema)
        except GrammarCompileError as e:
            raise APIError(400, f"tools: the answer's json_schema: {e}", param="response_format",
                           code="grammar_compile_error") from e
    calls = {**calls, "type": "tags_with_separator", "separator": "\n", "at_least_one": True}
    calls.pop("triggers", None)
    js = {"type": "json_schema", "json_schema": answer.schema}
    return make_constraint(structural_tag={"type": "structural_tag", "format": {"type": "or",
                                                                               "elements": [calls, js]}},
                           lenient=relaxed)


# -- parsing ---------------------------------------------------------------------------------------
_CALL = re.compile(re.escape(TRIGGER) + r"\s*(\{.*?\})\s*" + re.escape(END), re.S)
_HEAD = r'\{"name":\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments":\s*'  # a call object up to its arguments


@dataclass
class ParsedCall:
    name: str
    arguments: str  # JSON text

    def to_openai(self, index: int | None = None) -> dict:
        d = {"id": new_call_id(), "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        return d if index is None else {"index": index, **d}


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_calls(text: str, cut: bool = False) -> tuple[str | None, list[ParsedCall]]:
    """(content outside the calls or None, the calls). A block that is not a call object stays text;
    an unclosed call (the output ended inside it) is dropped, and so is a trailing partial
    ``<tool_call>`` when the output was ``cut`` (``finish_reason`` length): no markup reaches content."""
    calls, rest, at = [], [], 0
    for m in _CALL.finditer(text):
        call = _call(m.group(1))
        if call is None:
            continue
        rest.append(text[at:m.start()])
        at = m.end()
        calls.append(call)
    rest.append(unfinished_call_removed(text[at:], cut))
    content = "".join(rest)
    if calls or content != text:
        return content.strip() or None, calls
    return text, calls


def unfinished_call_removed(tail: str, cut: bool) -> str:
    """``tail`` (text after the last complete call) without an unclosed call or, when ``cut``, a
    trailing proper prefix of ``<tool_call>``."""
    i = tail.find(TRIGGER)
    if i >= 0:
        return tail[:i]
    return tail[: len(tail) - _partial_suffix(tail, TRIGGER)] if cut else tail


def _call(obj_text: str) -> ParsedCall | None:
    """The call in a ``{"name": ..., "arguments": {...}}`` object, its ``arguments`` as the model wrote
    them (the text a stream delivers, :class:`ToolStream`); re-serialized only when the object is not
    written name first."""
    try:
        obj = json.loads(obj_text)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not isinstance(obj.get("arguments"), dict):
        return None
    head = re.match(_HEAD, obj_text)
    raw = obj_text[head.end():-1] if head else None
    if raw is None or _loads(raw) != obj["arguments"]:
        raw = json.dumps(obj["arguments"], ensure_ascii=False)
    return ParsedCall(obj["name"], raw)


def _loads(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


class ToolStream:
    """Stream side: content text in, OpenAI ``delta`` dicts out. Content before a call streams as
    ``content``; a call streams as one ``tool_calls`` delta with id, type and name, then ``arguments``
    fragments (what the official client's stream helpers accumulate)."""

    def __init__(self):
        self.buf = ""  # text not yet classified
        self.in_call = False
        self.header_sent = False
        self.index = -1  # index of the current / last call
        self.args_sent = 0

    @property
    def calls(self) -> int:
        return self.index + 1

    def feed(self, text: str) -> list[dict]:
        self.buf += text
        out: list[dict] = []
        while True:
            if not self.in_call:
                i = self.buf.find(TRIGGER)
                if i < 0:
                    keep = _partial_suffix(self.buf, TRIGGER)
                    emit, self.buf = self.buf[: len(self.buf) - keep], self.buf[len(self.buf) - keep:]
                    if emit and (emit.strip() or not self.calls):
                        out.append({"content": emit})
                    return out
                if self.buf[:i] and (self.buf[:i].strip() or not self.calls):
                    out.append({"content": self.buf[:i]})
                self.buf, self.in_call, self.header_sent, self.args_sent = self.buf[i:], True, False, 0
                self.index += 1
            m = re.match(re.escape(TRIGGER) + r"\s*" + _HEAD + r"(?=\S)", self.buf)  # args from their first char
            if m and not self.header_sent:
                out.append({"tool_calls": [{"index": self.index, "id": new_call_id(), "type": "function",
                                            "function": {"name": json.loads(m.group(1)), "arguments": ""}}]})
                self.header_sent = True
                self.head_len = m.end()
            end = self.buf.find(END)
            if not self.header_sent:
                if end < 0:
                    return out
                call = _call(self.buf[len(TRIGGER):end].strip())  # not the grammar's shape: parse whole
                if call is not None:
                    out.append({"tool_calls": [call.to_openai(self.index)]})
                self.buf, self.in_call = self.buf[end + len(END):], False
                continue
            exact = self.buf.find(END_TEXT, self.head_len)  # the grammar's end: cannot occur inside JSON
            if exact >= 0:
                body, end = self.buf[self.head_len:exact], exact + len(END_TEXT) - len(END)
            elif end >= 0:  # not the grammar's spacing (unconstrained text): strip the object's brace
                body = self.buf[self.head_len:end].rstrip()
                body = body[:-1] if body.endswith("}") else body
            else:
                body = self.buf[self.head_len:]
                body = body[: len(body) - _partial_suffix(body, END_TEXT)]
            if len(body) > self.args_sent:
                out.append({"tool_calls": [{"index": self.index, "function": {"arguments": body[self.args_sent:]}}]})
                self.args_sent = len(body)
            if end < 0:
                return out
            self.buf, self.in_call = self.buf[end + len(END):], False


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0
