"""Parallel typed decisions: schema -> one prefill -> every candidate scored in batched passes."""

from .api import decide, decide_many, naive_generate, naive_json_schema, plan_for
from .plan import DEFAULT_SCORING, NONE_OF_ABOVE, SCORING_MODES, Plan, compile_plan, get_plan
from .result import TOLERANCE, Decision, FieldResult
from .schema import Choice, DecisionSchema, Field, SchemaError, lint

__all__ = ["Choice", "DEFAULT_SCORING", "Decision", "DecisionSchema", "Field", "FieldResult", "NONE_OF_ABOVE",
           "Plan", "SCORING_MODES", "SchemaError", "TOLERANCE", "compile_plan", "decide", "decide_many", "get_plan",
           "lint", "naive_generate", "naive_json_schema", "plan_for"]
