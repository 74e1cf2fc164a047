"""The scheduler's step: four phases in a few lines, its order (serial or overlapped) chosen once at construction,
and both orders give the same greedy rows."""

import ast
import inspect
import textwrap

from typedlm.config import resolve
from typedlm.generate import SamplingParams, build_sequence
from typedlm.generate.scheduler import Scheduler, run_batch
from typedlm.grammar import make_constraint
from typedlm.testing import tiny_engine


def test_step_is_short_and_its_order_is_chosen_at_construction(tiny):
    fn = ast.parse(textwrap.dedent(inspect.getsource(Scheduler.step))).body[0]
    body = fn.body[1:] if isinstance(fn.body[0], ast.Expr) else fn.body  # without the docstring
    assert fn.end_lineno - fn.lineno + 1 <= 12 and len(body) <= 3
    assert not any(isinstance(n, ast.If) and "device_feed" in ast.unparse(n.test) for n in ast.walk(fn))
    assert Scheduler(tiny, max_batch=2)._advance.__name__ == "_overlapped"
    serial = tiny_engine(settings=resolve({"overlap_schedule": False}, env={}))
    assert Scheduler(serial, max_batch=2)._advance.__name__ == "_serial"


def test_serial_and_overlapped_orders_give_the_same_rows(tiny):
    serial = tiny_engine(settings=resolve({"overlap_schedule": False}, env={}))
    json_c = make_constraint(json_schema={"type": "object", "properties": {"a": {"type": "integer"}},
                                          "required": ["a"]})

    def run(engine):
        seqs = [build_sequence(engine, engine.encode_prompt(prompt=p), SamplingParams(max_tokens=12, temperature=0), c)
                for p, c in (("one", None), ("two two", json_c), ("three", None))]
        return [(r.token_ids, r.finish_reason) for r in run_batch(engine, seqs, max_batch=2)]

    assert run(serial) == run(tiny)
