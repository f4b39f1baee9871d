"""Fixtures for the think-aloud tests: scripted bundles built once per test process."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.ingest_think_aloud import scripted


@pytest.fixture(scope="session")
def spoken_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scripted actor's session with its thoughts spoken by espeak-ng, as a .zip bundle."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (apt-get install -y espeak-ng)")
    return scripted.build(tmp_path_factory.mktemp("spoken") / "ta-scripted-1", archive="zip")


@pytest.fixture(scope="session")
def text_bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same actor with its thoughts as transcript.jsonl (no audio): a fast, valid folder bundle."""
    return scripted.build(tmp_path_factory.mktemp("text") / "ta-text-1", session_id="ta-text-1", speech=False)
