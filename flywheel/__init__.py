"""Flywheel: an open data flywheel for training computer-use (GUI) agents."""

__version__ = "0.1.0"
#: Recorded on every row this code writes, for lineage.
PIPELINE_VERSION = f"flywheel-{__version__}"
