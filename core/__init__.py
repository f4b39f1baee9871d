"""The floor every layer stands on: version and lineage tag, record types, settings, console and errors."""

__version__ = "0.1.0"
#: Recorded on every row this code writes, for lineage.
PIPELINE_VERSION = f"flywheel-{__version__}"
