"""The model actor of a corpus job: loads its engine once, then one ``decide_many`` call per batch.

Output rows: ``key`` (the id as JSON text), ``record`` (the ``typedlm decide --output`` line, or ``""``),
``error`` (``""``, or why the row was not decided), and the batch's ``started`` / ``finished`` wall-clock times.
A batch the model refuses as a whole (say, one context too long) is decided row by row, so only the bad row is
reported."""

from __future__ import annotations

import json
import time

from ..errors import TypedLMError


class DecideActor:
    def __init__(self, schema, model: str, device: str, threads: int | None, options: dict):
        import torch

        from ..decide.api import check_options, plan_for
        from ..decide.plan import DEFAULT_SCORING
        from ..decide.prior import DEFAULT_PRIOR
        from ..engine import load_engine

        if threads:
            torch.set_num_threads(threads)
        self.engine = load_engine(model, device=device, progress=False)
        self.schema = schema
        self.options = options
        plan = plan_for(schema, self.engine, options.get("scoring", DEFAULT_SCORING),
                        options.get("allow_none_of_above", False))
        # a bundle made for another model / prompt / prior fails here, once, not on every row
        check_options(self.engine, plan, options.get("prior", DEFAULT_PRIOR), options.get("calibration"), 2)

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
        from ..decide.api import decide_many

        if not texts:
            return []
        try:
            return decide_many(self.schema, texts, engine=self.engine, **self.options)
        except TypedLMError as e:
            if len(texts) == 1:
                return [str(e)]
        return [got for t in texts for got in self._decide([t])]


def _line(key: str, decision) -> str:
    from ..decide.records import decision_line

    return decision_line(json.loads(key), decision)
