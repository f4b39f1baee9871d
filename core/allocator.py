"""glibc malloc settings for a long-lived process that allocates large buffers again and again (training steps,
routing chunks). Applied on import of `storage` and of `training`; the round engine hands the heap's free memory
back after each stage (`release`).

With the default dynamic mmap threshold, glibc gives large freed buffers back to the OS and maps them again on the
next allocation, so every step or chunk faults its buffers in afresh as kernel-zeroed pages; a fixed 32 MiB
threshold and a high trim threshold keep them in the heap. The same as starting Python with
MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296. Measured on 2 cores:
- training (the demo's 0.75M-parameter policy, copy warm-up steps of 48 sequences): 0.35-0.48 s a step in a process
  that had already ingested the cold start, against 0.18-0.19 s with these settings, the same as a fresh process;
- routing 1M episodes x 20 steps (`python -m bench routing`, numpy's per-step masks and gathers): 18.4 CPU-s and
  92,000 episodes/s without, 15.2 CPU-s and 113,000/s with (docs/validators.md).

The price of the high trim threshold: free memory is never handed back. When a training loop's batches had a new
length every step, every buffer had a new size, so the heap fragmented and grew: search practice's process held
4.3 GiB after 100 s, of which 1.35 GiB was live (malloc_trim showed it), and the demo peaked at 7.4 GiB. Trimming
inside the loops costs what the settings save (every 10 s of a loop: 5x the page faults, 130 s more system time,
20.2 minutes instead of 19.6, for a 5.6 GiB peak; docs/training.md), so the round engine trims only between stages
(`release`; run t: peak 6.7 GiB). What removed most of the fragmentation is steady shapes: batch lengths rounded up
to a multiple of 32 tokens (training.data.PAD_MULTIPLE), 2.9 GiB after the same 100 s and a demo peak of 4.9 GiB
(runs u and v).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_done = False
_libc: ctypes.CDLL | None = None


def _glibc() -> ctypes.CDLL | None:
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        except OSError:
            return None
    return _libc


def tune_allocator() -> bool:
    """Apply the settings once per process (Linux with glibc; elsewhere a no-op). Returns whether they apply."""
    global _done
    if _done or not sys.platform.startswith("linux"):
        return _done
    try:
        libc = _glibc()
        ok = (
            libc is not None
            and libc.mallopt(_M_MMAP_THRESHOLD, 32 * 2**20) == 1
            and libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1
        )
    except AttributeError:  # not glibc (musl has no mallopt); a libc that does not load is None above
        ok = False
    _done = ok
    return ok


def release() -> bool:
    """Hand the heap's free memory back to the OS (glibc's malloc_trim); whether anything was released."""
    libc = _glibc()
    try:
        return bool(libc.malloc_trim(0)) if libc is not None else False
    except AttributeError:  # not glibc
        return False
