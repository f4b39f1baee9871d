"""The lake: Delta tables and a content-addressed object store, local or on S3."""

from storage.delta import conform
from storage.errors import LakeError, SchemaError
from storage.lake import Lake, content_id

__all__ = ["Lake", "LakeError", "SchemaError", "conform", "content_id"]
