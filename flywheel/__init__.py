"""Flywheel: an open data flywheel for training computer-use (GUI) agents. This package is the roof: the CLI
(`flywheel.cli`) and the people-facing logic (`flywheel.people`); everything it uses lies below it."""

from core import PIPELINE_VERSION, __version__

__all__ = ["PIPELINE_VERSION", "__version__"]
