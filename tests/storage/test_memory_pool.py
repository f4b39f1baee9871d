"""Importing `storage` makes jemalloc Arrow's memory pool (freed buffers reused instead of faulted in afresh), unless
ARROW_DEFAULT_MEMORY_POOL chooses one."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

_SHOW = "import storage, pyarrow as pa; print(pa.default_memory_pool().backend_name)"


def _backend(env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-c", _SHOW], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_storage_selects_jemalloc_unless_told_otherwise() -> None:
    try:
        pa.jemalloc_memory_pool()
    except (NotImplementedError, pa.ArrowNotImplementedError):
        pytest.skip("this pyarrow is built without jemalloc")
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    assert _backend(env) == "jemalloc"
    assert _backend({**env, "ARROW_DEFAULT_MEMORY_POOL": "system"}) == "system"
