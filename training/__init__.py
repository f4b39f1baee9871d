"""The policy and its training jobs. Importing the package tunes glibc malloc for training (core/allocator.py:
without it a long-lived process such as the demo trained about 2x slower)."""

from core.allocator import tune_allocator

tune_allocator()
