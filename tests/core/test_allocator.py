"""core/allocator.py: importing `storage` or `training` tunes glibc malloc (routing and training steps fault their
buffers in afresh without it), once per process."""

import subprocess
import sys

import pytest


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
@pytest.mark.parametrize("package", ["storage", "training"])
def test_importing_the_package_tunes_malloc_once(package: str) -> None:
    code = (
        f"import {package}, core.allocator as a; "
        "assert a._done, 'not applied on import'; assert a.tune_allocator() is True; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-500:]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_release_hands_the_fragmented_heap_back() -> None:
    """What the high trim threshold keeps: 1 MiB blocks freed below one still in use (so trimming the heap's top
    cannot shrink it). `release` must give them back; the process's RSS falls by most of the 300 MiB."""
    code = """
import ctypes, core.allocator as a
assert a.tune_allocator()
libc = ctypes.CDLL("libc.so.6"); libc.malloc.restype = ctypes.c_void_p; libc.free.argtypes = [ctypes.c_void_p]
def rss(): return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024
blocks = [libc.malloc(2**20) for _ in range(300)]
for b in blocks: ctypes.memset(b, 1, 2**20)
for b in blocks[:-1]: libc.free(b)
held = rss(); ok = a.release(); after = rss()
print(held - after, ok)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-500:]
    freed, ok = out.stdout.split()
    assert ok == "True" and int(freed) > 250, out.stdout
