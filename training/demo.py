"""The demo's scripted people: the cold start's demonstrator data, written as the files people would hand in.

`write_cold_start` plays the environment backend's scripted demonstrators (expert, novice, interactive, and expert
think-aloud sessions with speech) and writes their rollout files, annotation session and think-aloud bundles into
the landing area, with screenshots in the lake's object store. Round 0's intake then lands them through the real
readers like any upload (flows/stages.py); in later rounds the backend's scripted annotator plays the people of the
annotate stage. Nothing here knows about rounds or Prefect.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

#: Marks a landing area whose cold-start files are complete (dot-entries are not uploads: intake skips them).
COLD_START_DONE = ".cold-start-done"


@dataclass(frozen=True)
class ColdStart:
    """Sizes of the demo's cold start, chosen for 2 CPU cores (docs/training.md)."""

    expert_tasks: int = 140  # expert rollouts (cycling over every family and level)
    novice_tasks: int = 35  # novice rollouts (some fail: they land in CT)
    interactive_tasks: int = 14  # tasks annotated interactively (novice proposes, expert accepts or overrides)
    think_aloud: int = 2  # spoken think-aloud sessions (espeak-ng when installed) -> ASR -> aligned steps

    @classmethod
    def quick(cls) -> ColdStart:
        return cls(expert_tasks=35, novice_tasks=7, interactive_tasks=4, think_aloud=1)


def landing_for(lake_uri: str) -> Path:
    """Where the demo writes its input files: next to a local lake, or a local folder for an S3 lake."""
    if "://" in lake_uri:
        import tempfile

        return Path(tempfile.gettempdir()) / "flywheel-demo-landing"
    return Path(str(lake_uri).rstrip("/") + "-landing")


#: Names the lake a demo landing area belongs to (its episodes table's Delta id; a dot-entry, so not an upload).
LANDING_OWNER = ".lake-id"


def claim_landing(landing: Path, lake_id: str, lake_started: bool) -> Path | None:
    """Make `landing` the landing area of lake `lake_id`; return where a stale one was moved, if one was.

    The landing area outlives its lake when only the lake's folder is removed. A new lake of the same name would then
    land all of it in round 0: the earlier run's later rounds too, and files whose screenshots are in the removed
    lake's object store (a `make demo` after `rm -rf lake-demo` began with 2,207 episodes instead of 191). So a landing
    area marked for another lake, or unmarked beside a lake whose round 0 has not started, is moved aside (renamed,
    never deleted); an unmarked one beside a lake that has started is its own (written before the mark existed)."""
    marker = landing / LANDING_OWNER
    owner = marker.read_text(encoding="utf-8").strip() if marker.is_file() else None
    moved = None
    stale = owner != lake_id and (owner is not None or not lake_started)
    if stale and landing.is_dir() and any(landing.iterdir()):
        stem = f"{landing.name}.{(owner or 'unmarked')[:8]}-{time.strftime('%Y%m%d-%H%M%S')}"
        moved = landing.with_name(stem)
        k = 1
        while moved.exists():
            k += 1
            moved = landing.with_name(f"{stem}-{k}")
        landing.rename(moved)
    landing.mkdir(parents=True, exist_ok=True)
    if owner != lake_id:
        marker.write_text(lake_id + "\n", encoding="utf-8")
    return moved


# ------------------------------------------------------------------------------------------ cold start
def _store_shots(lake, pngs: list[bytes | None]) -> list[tuple[str | None, str | None]]:  # noqa: ANN001
    from storage.objects import sha256_hex

    return [(lake.objects.put_object(p, ".png"), sha256_hex(p)) if p else (None, None) for p in pngs]


def write_rollouts_with_shots(lake, attempts: list, path: Path, policy_version: str, **app: str) -> int:  # noqa: ANN001
    """Demonstrator attempts -> a rollout file whose steps reference their screenshots in the object store.
    `app`: app= and platform= of the backend (default the sandbox's)."""
    from ingest.formats.rollouts import write_rollouts
    from sandbox.export import to_rollout

    out = []
    for a in attempts:
        r = to_rollout(a, policy_version, **app)
        refs = _store_shots(lake, [s.screenshot for s in a.steps])
        out.append(
            replace(
                r, steps=tuple(replace(s, screenshot_uri=u, screenshot_sha256=h) for s, (u, h) in zip(r.steps, refs))
            )
        )
    return write_rollouts(path, out)


def write_annotations_with_shots(lake, attempts: list, path: Path, **app: str) -> Path:  # noqa: ANN001
    """Interactive sessions -> an annotation session file whose steps reference the screenshots the tool saw."""
    from ingest.formats.annotations import write_annotation_session
    from sandbox.export import write_annotations

    write_annotations(attempts, path, **app)
    doc = json.loads(path.read_text(encoding="utf-8"))
    for ep, a in zip(doc["episodes"], attempts):
        for st, (u, h) in zip(ep["steps"], _store_shots(lake, [s.screenshot for s in a.steps])):
            st["screenshot_uri"], st["screenshot_sha256"] = u, h
    return write_annotation_session(path, doc)


def write_cold_start(lake, landing: Path, backend, cold: ColdStart = ColdStart(), seed: int = 0,  # noqa: ANN001
                     say: Any = None) -> dict[str, int]:  # fmt: skip
    """Demonstrator data for round 0 as upload files in `landing` (rollouts/cold-start-*.jsonl,
    annotations/cold-start.json, think-aloud/<bundle>), played by the backend's scripted demonstrators. Written
    once: a landing area already holding a complete cold start is left as it is."""
    from sandbox.export import write_think_aloud

    if (landing / COLD_START_DONE).is_file():
        return {}
    app = {"app": backend.app, "platform": backend.platform}
    n_all = cold.expert_tasks + cold.novice_tasks + cold.interactive_tasks + cold.think_aloud
    tasks = backend.demo_tasks(n_all, seed)
    a = cold.expert_tasks
    b = a + cold.novice_tasks
    c = b + cold.interactive_tasks
    tell = say or (lambda what: None)
    (landing / "rollouts").mkdir(parents=True, exist_ok=True)
    (landing / "annotations").mkdir(parents=True, exist_ok=True)
    tell("expert and novice rollouts")
    out = {
        "expert": write_rollouts_with_shots(lake, backend.demonstrate(tasks[:a], "expert"),
                                            landing / "rollouts" / "cold-start-expert.jsonl", "expert-demonstrator", **app),
        "novice": write_rollouts_with_shots(lake, backend.demonstrate(tasks[a:b], "novice"),
                                            landing / "rollouts" / "cold-start-novice.jsonl", "novice-demonstrator", **app),
    }  # fmt: skip
    tell("interactive annotation sessions")
    inter = backend.demonstrate(tasks[b:c], "interactive")
    write_annotations_with_shots(lake, inter, landing / "annotations" / "cold-start.json", **app)
    out["interactive"] = len(inter)
    if cold.think_aloud:
        tell("think-aloud bundles (speech)")
        bundles = landing / "think-aloud"
        atts = backend.demonstrate(tasks[c:], "expert")
        for att in atts:
            write_think_aloud(att, bundles, speech=True, **app)
        out["think_aloud"] = len(atts)
    (landing / COLD_START_DONE).write_text(json.dumps(out) + "\n")
    return out
