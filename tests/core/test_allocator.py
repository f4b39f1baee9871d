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
