"""Hard constraints of a decision: the vocabulary (``terms``), parsing and checking them (``parse``),
field dependencies (``depends``), the exact solver (``solve``) and the constraint step (``joint``)."""
