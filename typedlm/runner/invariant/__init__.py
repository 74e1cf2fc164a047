"""Batch-invariant mode: ops whose per-row results do not depend on the batch shape (see :mod:`.ops`,
:mod:`.attention`), switched on per thread for a hooked model (:mod:`.mode`)."""
