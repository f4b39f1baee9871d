"""AgentNet Tool recordings (OpenCUA's open-source recorder) as sessions, read in place without changing a file.

A recording folder holds metadata.json (OS, screen size, recorder clock offsets), task_name.json (the task),
events.jsonl (pynput events on the recorder's clock) and a screen video with its audio track. The session clock
starts at the video's start (`video_start_timestamp`); events are moved onto it. The recorder's own stop
shortcut, pressed just before OBS stops, is not a user action and is dropped (kept in meta). AgentNet Tool does
not record thinking aloud: the video's audio still goes through ASR (so speech, if any, is used), and without
speech every thought stays empty and flagged "no_speech".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ingest import safejson
from ingest.events import EventError, to_table
from ingest.formats.bundle import BundleManifest

VIDEO_SUFFIXES = (".mp4", ".mkv", ".mov", ".webm", ".avi", ".flv")
STOP_WINDOW_S = 2.0  # a last hotkey this close before OBS stops is the recorder's stop shortcut


def _read_json(p: Path) -> Any:
    from ingest.session import IngestError

    try:
        return safejson.loads(p.read_bytes(), p.name, p.name)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise IngestError("manifest_invalid_json", f"{p.name} is not JSON: {e}", p.name) from None


def convert_event(r: dict[str, Any]) -> dict[str, Any]:
    """One AgentNet Tool event -> our raw event (see ingest/formats/bundle.py)."""
    a, t, line = r.get("action"), r.get("time_stamp"), r.get("line")
    base = {"t": t, "line": line}
    if a == "move":
        return {**base, "type": "mouse_move", "x": r.get("x"), "y": r.get("y")}
    if a == "click":
        return {**base, "type": "mouse_down" if r.get("pressed") else "mouse_up", "x": r.get("x"), "y": r.get("y"),
                "button": r.get("button")}  # fmt: skip
    if a == "scroll":
        return {**base, "type": "wheel", "x": r.get("x"), "y": r.get("y"), "dx": r.get("dx"), "dy": r.get("dy")}
    if a in ("press", "release"):
        return {**base, "type": "key_down" if a == "press" else "key_up", "key": r.get("name") or r.get("pynput_key")}
    return {**base, "type": str(a)}  # unknown: validation names it


def read_agentnet(folder: Path, uri: str):  # noqa: ANN201 - returns ingest.session.SessionData
    from ingest.archives import folder_sha256
    from ingest.events import parse_jsonl
    from ingest.session import IngestError, SessionData

    meta = _read_json(folder / "metadata.json")
    task = _read_json(folder / "task_name.json") if (folder / "task_name.json").is_file() else {}
    if not isinstance(meta, dict) or "screen_width" not in meta or "screen_height" not in meta:
        raise IngestError("manifest_invalid", "metadata.json needs screen_width and screen_height", "metadata.json")
    instruction = (task.get("task_name") or "").strip() if isinstance(task, dict) else ""
    if not instruction:
        raise IngestError("manifest_invalid", "task_name.json holds no task_name", "task_name.json")
    videos = sorted(p for p in folder.iterdir() if p.suffix.lower() in VIDEO_SUFFIXES)
    if not videos:
        raise IngestError("no_screen", "the recording has no screen video")
    t0 = float(meta.get("video_start_timestamp") or 0.0)
    try:
        rows = parse_jsonl((folder / "events.jsonl").read_text(errors="replace"))
    except EventError:
        raise
    table = to_table([convert_event(r) for r in rows], offset=-t0)
    stops = (meta.get("obs_record_state_timings") or {}).get("OBS_WEBSOCKET_OUTPUT_STOPPING") or []
    drop_after = (float(stops[0]) - t0 - STOP_WINDOW_S) if stops else None
    sha = folder_sha256(folder)
    m = BundleManifest(
        session_id="agentnet-" + sha[:16],  # the upstream id embeds personal data; the content hash does not
        instruction=instruction,
        screen_width=int(meta["screen_width"]),
        screen_height=int(meta["screen_height"]),
        annotator_id=None,
        platform=" ".join(str(meta.get(k, "")) for k in ("system", "release")).strip() or None,
        clock_offsets={"events": -t0, "audio": 0.0, "video": 0.0},
        events="events.jsonl",
        audio=videos[0].name,  # the video's audio track
        video=videos[0].name,
        meta={k: meta.get(k) for k in ("system", "release", "version", "start_time", "stop_time", "scroll_direction")},
    )
    s = SessionData(uri, folder, "agentnet", m, table, sha, drop_after=drop_after)
    # the recorder logs physical pixels of the current display mode; a resolution change mid-session (as in the
    # real sample) moves presses beyond the starting screen size. Validate against the largest extent seen,
    # scale with the starting size (the video keeps its frame size), and report the change.
    import pyarrow.compute as pc

    xs, ys = pc.max(table.column("x")).as_py(), pc.max(table.column("y")).as_py()
    if (xs or 0) >= m.screen_width or (ys or 0) >= m.screen_height:
        s.problems.append("screen_size_changed_during_recording")
        s.validate_size = (max(m.screen_width, int(xs) + 1), max(m.screen_height, int(ys) + 1))
        s.meta["screen_recorded_at_start"] = [int(meta["screen_width"]), int(meta["screen_height"])]
    return s
