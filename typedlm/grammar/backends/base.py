"""The seam between the grammar layer and its engines: what a backend compiles, and what a compiled
grammar and one row's state in it offer. Everything above ``grammar/backends/`` sees only these.

Shape (after vLLM's ``StructuredOutputBackend`` / ``StructuredOutputGrammar``): a :class:`Backend`
compiles a constraint into a :class:`Compiled` grammar (immutable, cached, shared by rows); each row
gets a :class:`RowState` from it; rows of one engine fill their masks together through that engine's
:class:`MaskFiller` (``RowState.filler``). Every engine fills the same ``[B, ceil(V/32)]`` int32 bitmask
(:mod:`.masks`)."""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import torch

from ...errors import GrammarCompileError
from ..spec import Constraint


class NotForEngine(GrammarCompileError):
    """A backend does not read this constraint exactly (``keyword`` names what); ``auto`` tries the next."""


class MaskFiller(Protocol):
    """Fills the masks of many rows of one engine in one call."""

    def fill(self, states: Sequence["RowState"], bitmask: torch.Tensor, rows: Sequence[int]) -> None:
        """Row ``rows[i]`` of ``bitmask`` gets the mask of ``states[i]`` (an error state: an empty row)."""


class RowState(Protocol):
    """One row's position in a compiled grammar."""

    filler: MaskFiller
    stop_ids: tuple[int, ...]

    def fill_mask(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the tokens allowed next into row ``row`` of ``bitmask`` (none: an all-zero row)."""

    def accept(self, tokens: Sequence[int]) -> bool:
        """Advance over ``tokens``; False (state unusable) where one is not allowed."""

    def accept_text(self, text: str) -> bool:
        """Advance over ``text`` (the engine's own tokenization of it)."""

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` accepted tokens."""

    def is_terminated(self) -> bool:
        """A stop token was accepted (an engine may say so as soon as nothing but a stop can follow)."""

    def can_end(self) -> bool:
        """The text so far is a whole match (a stop token may come), or the row is terminated."""

    def jump_string(self) -> str:
        """The text the grammar forces next ("" when the next bytes are not fixed)."""

    @property
    def base(self) -> "RowState":
        """The engine's own state that ``filler`` fills (this one, or the one a wrapper state wraps)."""

    def restrict(self, bitmask: torch.Tensor, row: int) -> bool:
        """Narrow the mask ``filler`` wrote into row ``row`` for :attr:`base` (a wrapper's rule, such as
        the unique-array guard's); True if a token was cleared."""


class EngineState:
    """What an engine's own row state shares: it is its own :attr:`RowState.base` and narrows nothing."""

    @property
    def base(self) -> "EngineState":
        return self

    def restrict(self, bitmask: torch.Tensor, row: int) -> bool:
        return False


class Compiled(Protocol):
    """A compiled grammar: immutable, shared by every row that uses it."""

    engine: str  # the backend's name, for reports and tests; no code branches on it

    def new_state(self) -> RowState:
        """A row state at the grammar's start."""


class Backend(Protocol):
    """One grammar engine over one vocabulary."""

    name: str
    kinds: tuple[str, ...]  # the constraint kinds it compiles
    automata: bool  # it reads the core form with the automata our EBNF builds (schema.prepare_schema)

    def compile(self, c: Constraint, source: Any) -> Compiled:
        """Compile ``c`` whose prepared ``source`` is the core form (json_schema), the checked tag
        (structural_tag) or ``c.value``; :class:`NotForEngine` where this engine cannot read it exactly."""

    def flush(self) -> None:
        """Wait for the writes of compiled grammars to the disk cache still under way (none: returns)."""
