"""Batch-invariant mode: ops whose per-row results do not depend on the batch shape — torch versions for any
device (:mod:`.ops`, :mod:`.attention`), Triton kernels on CUDA (:mod:`.triton_ops`, :mod:`.triton_attention`)
— switched on per thread for a hooked model (:mod:`.mode`, which also picks the kernel per device)."""
