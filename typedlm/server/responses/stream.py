"""The Responses event stream: the chat deltas of the one choice (:class:`~typedlm.server.chat.plan.ChatStream`)
turned into ``response.*`` events.

Order: ``response.created``, ``response.in_progress``; per output item ``response.output_item.added``,
its deltas (``response.reasoning_text.delta``, ``response.output_text.delta`` after a
``response.content_part.added``, ``response.function_call_arguments.delta``), its ``*.done`` events and
``response.output_item.done``; then ``response.completed`` (or ``response.incomplete`` /
``response.failed``) with the whole response, whose output items are the streamed ones (same ids).
Every event carries ``type`` and ``sequence_number``; the SSE ``event:`` line repeats the type.
"""

from __future__ import annotations

import json

from fastapi import Request

from ...generate.scheduler import DoneEvent, TokenEvent
from ..chat.plan import ChatStream
from ..streaming import sse
from ..wire import notice
from .protocol import (call_item, message_item, reasoning_item, response_object, responses_usage, status_of,
                       text_part)


class Events:
    """Builds the events; ``items`` are the finished output items."""

    def __init__(self):
        self.seq = 0
        self.items: list[dict] = []
        self.open: dict | None = None  # the item being streamed
        self.text = ""  # its text or arguments so far

    def event(self, kind: str, **fields) -> str:
        out = sse({"type": kind, "sequence_number": self.seq, **fields}, event=kind)
        self.seq += 1
        return out

    def delta(self, d: dict) -> list[str]:
        if d.get("reasoning_content"):
            return self._ensure("reasoning") + self._text_delta("response.reasoning_text.delta", d["reasoning_content"])
        if d.get("content"):
            return self._ensure("message") + self._text_delta("response.output_text.delta", d["content"])
        out = []
        for tc in d.get("tool_calls", ()):
            fn = tc.get("function", {})
            if "id" in tc:  # a new call
                out += self.close()
                out += self._add(call_item(tc["id"], fn["name"], "", "in_progress"))
            if fn.get("arguments"):
                out += self._text_delta("response.function_call_arguments.delta", fn["arguments"])
        return out

    def close(self, status: str = "completed") -> list[str]:
        """Finish the open item (``incomplete`` when the output was cut inside it)."""
        item, text = self.open, self.text
        if item is None:
            return []
        self.open, self.text = None, ""
        where = {"item_id": item["id"], "output_index": len(self.items)}
        out = []
        if item["type"] == "message":
            part = text_part(text)
            out += [self.event("response.output_text.done", **where, content_index=0, text=text, logprobs=[]),
                    self.event("response.content_part.done", **where, content_index=0, part=part)]
            item = {**item, "content": [part]}
        elif item["type"] == "reasoning":
            part = {"type": "reasoning_text", "text": text}
            out += [self.event("response.reasoning_text.done", **where, content_index=0, text=text),
                    self.event("response.content_part.done", **where, content_index=0, part=part)]
            item = {**item, "content": [part]}
        else:
            out.append(self.event("response.function_call_arguments.done", **where, name=item["name"],
                                  arguments=text))
            item = {**item, "arguments": text}
            status = "completed" if _is_json(text) else status  # cut after the call, not inside it
        if item["type"] != "reasoning":
            item["status"] = status
        self.items.append(item)
        return out + [self.event("response.output_item.done", output_index=where["output_index"], item=item)]

    def _ensure(self, kind: str) -> list[str]:
        if self.open is not None and self.open["type"] == kind:
            return []
        out = self.close()
        if kind == "message":
            item = {**message_item(""), "status": "in_progress", "content": []}
            return out + self._add(item) + [self.event("response.content_part.added", item_id=item["id"],
                                                       output_index=len(self.items), content_index=0,
                                                       part=text_part(""))]
        item = {**reasoning_item(""), "content": []}
        return out + self._add(item) + [self.event("response.content_part.added", item_id=item["id"],
                                                   output_index=len(self.items), content_index=0,
                                                   part={"type": "reasoning_text", "text": ""})]

    def _add(self, item: dict) -> list[str]:
        self.open, self.text = item, ""
        return [self.event("response.output_item.added", output_index=len(self.items), item=item)]

    def _text_delta(self, kind: str, text: str) -> list[str]:
        self.text += text
        extra = {"content_index": 0} if kind != "response.function_call_arguments.delta" else {}
        if kind == "response.output_text.delta":
            extra["logprobs"] = []
        return [self.event(kind, item_id=self.open["id"], output_index=len(self.items), delta=text, **extra)]


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


async def response_events(job, http: Request, plan, body, rid: str, created: int):
    ev_ = Events()
    snapshot = response_object(body, rid, created, status="in_progress", output=[], usage=None)
    row = ChatStream(job.state.engine, plan, job.reqs[0].seq)
    try:
        yield ev_.event("response.created", response=snapshot)
        yield ev_.event("response.in_progress", response=snapshot)
        while job.finished < job.n:
            _, ev = await job.next_event(http)
            if isinstance(ev, TokenEvent):
                for d in row.add(ev.token):
                    for out in ev_.delta(d):
                        yield out
            elif isinstance(ev, DoneEvent):
                deltas, _ = row.final_deltas(ev.result)
                for d in deltas:
                    for out in ev_.delta(d):
                        yield out
                status, incomplete, error = status_of(ev.result.finish_reason)
                for out in ev_.close("incomplete" if status == "incomplete" else "completed"):
                    yield out
        results = [r.result for r in job.reqs]
        final = response_object(body, rid, created, status=status, output=ev_.items, usage=responses_usage(results),
                                incomplete=incomplete, error=error)
        yield ev_.event(f"response.{status}", response={**final, **notice(job, results)})
    finally:
        if job.finished < job.n:
            job.cancel()
