"""The lake: Delta tables and a content-addressed object store, local or on S3."""

import os

import pyarrow as pa

from core.allocator import tune_allocator
from storage.delta import conform
from storage.errors import LakeError, SchemaError
from storage.lake import Lake, content_id

__all__ = ["Lake", "LakeError", "SchemaError", "conform", "content_id"]


def _use_jemalloc() -> None:
    """Arrow's buffers from jemalloc instead of its default mimalloc, unless ARROW_DEFAULT_MEMORY_POOL chooses.

    Why: this pipeline allocates and frees tens of large buffers per chunk (Parquet string columns, verdicts,
    converted blocks). mimalloc hands freed memory back to the OS at once, so each new buffer is faulted in again
    as fresh, kernel-zeroed (transparent huge) pages: a quarter to a third of routing's CPU in `perf`. jemalloc
    keeps freed pages for reuse (and returns them after a second idle): routing 1M episodes took 22.7-24.4 CPU-s
    with it against 26.9-31.2 without (docs/validators.md, "Speed"); a rollout ingest is no slower. Buffers
    allocated before the switch are freed by their own pool."""
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except (NotImplementedError, pa.ArrowNotImplementedError):  # a pyarrow built without jemalloc: keep its default
        pass


_use_jemalloc()
tune_allocator()  # glibc's side of the same: numpy's and Python's large buffers (core/allocator.py)
