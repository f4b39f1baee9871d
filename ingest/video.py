"""Screenshots from a screen video: the frame shown just before each action (PyAV).

Why seek per action instead of decoding the whole video: a two-minute 30 fps recording has thousands of frames
and a session has tens of actions; seeking to the keyframe before each time and decoding forward costs a few
GOPs per action, not the whole stream.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.errors import InputError


class VideoError(InputError):
    """Video input that cannot be used; `code` is the quarantine error_type."""


@dataclass(frozen=True)
class VideoInfo:
    width: int
    height: int
    duration_s: float
    fps: float


def _open(path: str | Path):  # noqa: ANN202
    import av

    try:
        c = av.open(str(path))
    except Exception as e:  # noqa: BLE001 - PyAV raises many types for broken files
        raise VideoError("video_undecodable", f"cannot open the video: {type(e).__name__}: {str(e)[:200]}") from None
    if not c.streams.video:
        c.close()
        raise VideoError("video_no_frames", "the video file has no video stream")
    return c


def probe(path: str | Path) -> VideoInfo:
    c = _open(path)
    try:
        s = c.streams.video[0]
        dur = float(s.duration * s.time_base) if s.duration else (c.duration or 0) / 1e6
        return VideoInfo(s.codec_context.width, s.codec_context.height, dur, float(s.average_rate or 0))
    finally:
        c.close()


def frames_before(path: str | Path, times: Sequence[float], lead_s: float = 0.05) -> list[bytes]:
    """PNG bytes of the last frame shown at or before t - lead_s, for each t (video seconds); raises VideoError."""
    c = _open(path)
    out: list[bytes] = []
    try:
        s = c.streams.video[0]
        s.thread_type = "AUTO"
        tb = float(s.time_base)
        for t in times:
            target = max(0.0, t - lead_s)
            c.seek(int(target / tb), stream=s, backward=True, any_frame=False)
            best = None
            try:
                for fr in c.decode(s):
                    ft = (fr.pts or 0) * tb
                    if best is not None and ft > target:
                        break
                    best = fr
                    if ft > target:  # the first frame after a seek is already past t: keep it (start of video)
                        break
            except Exception as e:  # noqa: BLE001
                raise VideoError("video_undecodable", f"decoding failed near {t:.2f} s: {type(e).__name__}") from None
            if best is None:
                raise VideoError("video_no_frames", f"the video has no frame at or before {t:.2f} s")
            buf = io.BytesIO()
            best.to_image().save(buf, format="PNG", compress_level=1)
            out.append(buf.getvalue())
    finally:
        c.close()
    return out
