"""The model actor of a corpus job: loads its engine once, then one ``decide_many`` call per batch.

Output rows: ``key`` (the id as JSON text), ``record`` (the ``typedlm decide --output`` line, or ``""``),
``error`` (``""``, or why the row was not decided), and the batch's ``started`` / ``finished`` wall-clock times.
A batch the model refuses as a whole (say, one context too long) is decided row by row, so only the bad row is
reported."""

from __future__ import annotations

import json
import time

import torch

from ..decide.api import decide_many, prepare
from ..decide.records import decision_line
from ..engine import load_engine
from ..errors import TypedLMError


class DecideActor:
    def __init__(self, schema, model: str, device: str, threads: int | None, options):
        if threads:
            torch.set_num_threads(threads)
        self.engine = load_engine(model, device=device, progress=False)
        self.schema = schema
        self.options = options  # a DecideOptions
        # a bundle made for another model / prompt / prior fails here, once, not on every row (no forward runs)
        prepare(schema, ["probe"], options, engine=self.engine)  # prior="batch" was refused on the driver

    def __call__(self, batch: dict) -> dict:
        started = time.time()
        keys, texts, errors = list(batch["key"]), list(batch["context"]), list(batch["error"])
        records = [""] * len(keys)
        todo = [i for i, e in enumerate(errors) if not e]
        for i, got in zip(todo, self._decide([texts[i] for i in todo])):
            if isinstance(got, str):
                errors[i] = got
            else:
                records[i] = _line(keys[i], got)
        n, finished = len(keys), time.time()
        return {"key": keys, "record": records, "error": errors, "started": [started] * n, "finished": [finished] * n}

    def _decide(self, texts: list[str]) -> list:
        """A Decision per text, or the reason (str) it could not be decided."""
        if not texts:
            return []
        try:
            return decide_many(self.schema, texts, self.options, engine=self.engine)
        except TypedLMError as e:
            if len(texts) == 1:
                return [str(e)]
        return [got for t in texts for got in self._decide([t])]


def _line(key: str, decision) -> str:
    return decision_line(json.loads(key), decision)
