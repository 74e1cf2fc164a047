"""Pieces of the OpenAI wire shapes shared by the chat, completions and responses serving objects:
usage, logprobs entries, the ``typedlm`` notice field."""

from __future__ import annotations

from ..generate.detokenize import token_bytes
from ..generate.scheduler import TokenEvent


def notice(job, results) -> dict:
    """``{"typedlm": {...}}`` when the constraint was degraded (relaxed superset grammar or free text)."""
    n = job.notice_for(results)
    return {"typedlm": n} if n else {}


def usage(results) -> dict:
    """OpenAI usage; ``completion_tokens_details.reasoning_tokens`` for reasoning models and typedlm's
    ``forced_tokens`` (appended without sampling: jump-forward, forced end of reasoning) when any;
    ``prompt_tokens_details.cached_tokens``: prompt tokens read from the prefix cache (as OpenAI and vLLM)."""
    prompt = results[0].prompt_tokens if results else 0
    completion = sum(r.completion_tokens for r in results)
    out = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
           "prompt_tokens_details": {"cached_tokens": results[0].cached_tokens if results else 0}}
    if any(r.reasoning is not None for r in results):
        out["completion_tokens_details"] = {"reasoning_tokens": sum(r.reasoning_tokens for r in results)}
    forced = sum(r.forced_tokens for r in results)
    if forced:
        out["forced_tokens"] = forced
    return out


def token_events(job, i: int) -> list[TokenEvent]:
    return job.events.get(i, [])


def token_lp(engine, token: int, logprob) -> dict:
    """One logprobs entry; ``bytes`` are the token's raw bytes (a token holding part of a multi-byte
    character reports those bytes, not U+FFFD's)."""
    return {"token": engine.tokenizer.decode([token]), "logprob": logprob, "bytes": list(token_bytes(engine, token))}


def chat_lp(engine, ev: TokenEvent) -> dict:
    return {**token_lp(engine, ev.token, ev.logprob),
            "top_logprobs": [token_lp(engine, tid, lp) for tid, lp in ev.top_logprobs]}


def completion_lp(engine, events: list[TokenEvent], offset: int = 0) -> dict:
    tokens, offsets = [], []
    for ev in events:
        tok = engine.tokenizer.decode([ev.token])
        tokens.append(tok)
        offsets.append(offset)
        offset += len(tok)
    return {"tokens": tokens, "token_logprobs": [ev.logprob for ev in events],
            "top_logprobs": [{engine.tokenizer.decode([t]): lp for t, lp in ev.top_logprobs} for ev in events],
            "text_offset": offsets}

