"""Vocabulary priming: the words a session is likely to contain, as Whisper's initial prompt.

Why: the app's own vocabulary (product names, tab and button labels) is what a general ASR model gets wrong,
and it is known before ASR runs: the instruction, the app name and the element names on the session's screens
(`elements` in the manifest, from a text observation or accessibility data). Whisper conditions on its prompt
as if it were the preceding transcript, so names in it are spelled as the app spells them (ingest.asr passes it
as one earlier timestamped segment: see prompt_tokens).
"""

from __future__ import annotations

from collections.abc import Iterable

MAX_WORDS = 120  # Whisper keeps at most 223 prompt tokens; stay well under it
MAX_NAME_CHARS = 40


def vocabulary_prompt(instruction: str, app: str | None, names: Iterable[str] = ()) -> str | None:
    """'<app>. <instruction> <name>, <name>, ...' cut to MAX_WORDS words; None when there is nothing to say."""
    seen: set[str] = set()
    uniq = []
    for n in names:
        n = " ".join(str(n).split())
        if n and len(n) <= MAX_NAME_CHARS and n.lower() not in seen:
            seen.add(n.lower())
            uniq.append(n)
    parts = [p for p in (f"{app.strip()}." if app and app.strip() else "", " ".join(instruction.split())) if p]
    if uniq:
        parts.append(", ".join(uniq) + ".")
    words = " ".join(parts).split()
    return " ".join(words[:MAX_WORDS]) or None
