"""typedlm: typed outputs from local language models.

The package root binds nothing but ``__version__``, so ``typedlm.generate`` and ``typedlm.decide`` are
always the subpackages (a function of the same name would shadow them). Import the entry points from
where they live::

    from typedlm.engine import load_engine
    from typedlm.generate import generate
    from typedlm.decide import decide, decide_many
"""

__version__ = "0.1.0"
