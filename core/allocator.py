"""glibc malloc settings for a long-lived process that allocates large buffers again and again (training steps,
routing chunks). Applied on import of `storage` and of `training`.

With the default dynamic mmap threshold, glibc gives large freed buffers back to the OS and maps them again on the
next allocation, so every step or chunk faults its buffers in afresh as kernel-zeroed pages; a fixed 32 MiB
threshold and a high trim threshold keep them in the heap. The same as starting Python with
MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296. Measured on 2 cores:
- training (the demo's 0.75M-parameter policy, copy warm-up steps of 48 sequences): 0.35-0.48 s a step in a process
  that had already ingested the cold start, against 0.18-0.19 s with these settings, the same as a fresh process;
- routing 1M episodes x 20 steps (`python -m bench routing`, numpy's per-step masks and gathers): 18.4 CPU-s and
  92,000 episodes/s without, 15.2 CPU-s and 113,000/s with (docs/validators.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_done = False


def tune_allocator() -> bool:
    """Apply the settings once per process (Linux with glibc; elsewhere a no-op). Returns whether they apply."""
    global _done
    if _done or not sys.platform.startswith("linux"):
        return _done
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(_M_MMAP_THRESHOLD, 32 * 2**20) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        ok = False
    _done = ok
    return ok
