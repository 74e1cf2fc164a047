"""Scale-out on Ray (the ``typedlm[ray]`` extra; the rest of typedlm never imports ray): corpus decisions on Ray
Data (:func:`typedlm.scale.corpus.decide_dataset`), eval cases on the same actor pool, serving replicas on Ray
Serve."""

from .corpus import decide_dataset

__all__ = ["decide_dataset"]
