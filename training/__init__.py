"""The policy and its training jobs. Importing the package tunes glibc malloc for training (core/allocator.py:
without it a long-lived process such as the demo trained about 2x slower) and points torch.compile's kernel cache
at the machine's flywheel cache (training/compiled.py; it must be set before torch's compiler is first imported)."""

from core.allocator import tune_allocator
from training.compiled import kernel_cache

tune_allocator()
kernel_cache()
