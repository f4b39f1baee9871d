"""The think-aloud fidelity corpus: sessions of our own, synthesised at run time (nothing large is committed).

Made with espeak-ng (voices, speeds, German and French) and sox (noise), through the project's own bundle
builder: English scripts in several voices and speeds, numbers, product names (with and without priming),
long pauses, a keystroke run split by speech, other-language speech, two speakers on two channels (and the
same speakers mixed to mono), silence and noise. `measure()` ingests every session and returns the figures
with their counts; `python -m tests.ingest_think_aloud.corpus [--quick]` prints them (docs/think-aloud.md).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from rapidfuzz.distance import Levenshtein

from ingest.formats.bundle import (
    BundleManifest,
    ScriptedStep,
    build_think_aloud_bundle,
    click_events,
    drag_events,
    hotkey_events,
    scroll_events,
    type_events,
)
from tests.ingest_think_aloud import scripted

VOICES = ("en-us", "en-gb", "en-us+f3")
SPEEDS = (140, 180)

#: (thought, events, expected action or None)
NUMBERS = [
    ("Set the width to 250 pixels.", click_events(100, 120)),
    ("I type 42 in the quantity box.", type_events("42")),
    ("Page 3 of 12 has the summary table.", scroll_events(640, 500, "down", 3)),
    ("Change the year to 2026 and keep the rest.", click_events(300, 200)),
    ("Move the row 5 places down.", drag_events(200, 300, 200, 420)),
    ("The total should be 1800 dollars.", click_events(500, 700)),
]  # fmt: skip

NAMES = ("Zorblax", "Quillmate", "Frobnitz", "Tabula")
NAME_STEPS = [
    ("I open Quillmate from the sidebar.", click_events(40, 300)),
    ("Now the Frobnitz panel shows the layers.", click_events(900, 200)),
    ("I click the Zorblax logo to go home.", click_events(20, 20)),
    ("The Tabula view lists every draft.", click_events(400, 100)),
    ("Then I open Quillmate again to check the draft.", click_events(40, 300)),
]  # fmt: skip

GERMAN = [
    ("Jetzt klicke ich auf den Knopf oben rechts.", click_events(1200, 30)),
    ("Ich schreibe den neuen Titel in das Feld.", click_events(400, 200)),
    ("Danach speichere ich die Datei mit der Tastatur.", hotkey_events("ctrl", "s")),
]  # fmt: skip
FRENCH = [
    ("Maintenant je clique sur le bouton en haut.", click_events(1200, 30)),
    ("Ensuite je choisis le deuxième onglet de la fenêtre.", click_events(300, 60)),
    ("Je ferme la boîte de dialogue avec la croix.", click_events(900, 150)),
]  # fmt: skip

#: a thought said after typing and before Enter belongs to the Enter (the issue's case)
SPLIT_TYPE = [
    ("I type the new title of the report.", type_events("Quarterly report"), "type(content='Quarterly report')"),
    ("Press enter to confirm the title.", hotkey_events("enter"), "hotkey(key='enter')"),
    ("Then I click the save button.", click_events(60, 20), "click(point='<point>60 20</point>')"),
]  # fmt: skip

#: two speakers at once: the annotator (channel 0) and a supervisor (channel 1)
ASIDES = [
    "Remember the deadline is on Friday.",
    "That menu moved in the last update.",
    "Good, the title looks right now.",
    "Keep going, you are doing fine.",
    "Check the summary numbers after this.",
    "The second column is the right one.",
    "Use a darker color for the chart.",
]


@dataclass(frozen=True)
class Case:
    """One corpus session: how to build it and what each step should say ("" = no thought, flagged)."""

    name: str
    #: english | names | other_language | mixed_language | two_channel | per_channel | one_of_two | mono_mix |
    #: silent | split
    kind: str
    steps: tuple[ScriptedStep, ...]
    expected: tuple[str, ...]  # the thought each step should land with
    voice: str = "en-us"
    wpm: int = 150
    channels: int = 1
    app: str = "writer"
    elements: tuple[str, ...] = ()
    instruction: str = "Fix the report, save it and recolor the chart."
    noise: bool = False  # replace the audio with pink noise of the same length (sox)
    remix: int | None = None  # keep only this channel of the (two-channel) audio, as a mono file (sox)
    priming: bool = True
    expected_actions: tuple[str, ...] = ()
    languages: tuple[str, ...] = ()  # the language of each step's speech (non-English cases)


def _steps(script: Sequence[tuple[str, Any]], **kw: Any) -> tuple[ScriptedStep, ...]:
    return tuple(ScriptedStep(t, ev, scripted.screen_png(f"step {i}"), **kw) for i, (t, ev, *_) in enumerate(script))


def cases(quick: bool = False) -> list[Case]:
    """The corpus; quick: one voice and speed of each kind (what the tests run)."""
    en = [(t, ev) for t, ev, _ in scripted.SCRIPT]
    voices, speeds = (VOICES[:1], SPEEDS[:1]) if quick else (VOICES, SPEEDS)
    out: list[Case] = []
    for v in voices:
        for w in speeds:
            tag = f"{v.replace('+', '-')}-{w}"
            out.append(Case(f"en-{tag}", "english", _steps(en), tuple(t for t, _ in en), v, w))
            out.append(Case(f"numbers-{tag}", "english", _steps(NUMBERS), tuple(t for t, _ in NUMBERS), v, w))
    out.append(Case("pauses", "english", tuple(replace(s, pause_s=6.0) for s in _steps(en[:4])),
                    tuple(t for t, _ in en[:4])))  # fmt: skip
    out.append(Case("split-type", "split", _steps(SPLIT_TYPE), tuple(t for t, *_ in SPLIT_TYPE),
                    expected_actions=tuple(a for *_, a in SPLIT_TYPE)))  # fmt: skip
    for primed in (True, False):
        out.append(Case(f"names-{'primed' if primed else 'plain'}", "names", _steps(NAME_STEPS),
                        tuple(t for t, _ in NAME_STEPS), app="Zorblax Studio",
                        elements=("Quillmate", "Frobnitz panel", "Tabula view", "Save draft", "Layers"),
                        instruction="Open Quillmate and check the latest draft in the Tabula view.",
                        priming=primed))  # fmt: skip
    out.append(Case("german", "other_language", _steps(GERMAN, voice="de"), ("",) * 3, languages=("de",) * 3))
    out.append(Case("french", "other_language", _steps(FRENCH, voice="fr"), ("",) * 3, languages=("fr",) * 3))
    png = scripted.screen_png("screen")
    mixed = [ScriptedStep(*en[0], png), ScriptedStep(*GERMAN[0], png, voice="de"), ScriptedStep(*en[2], png),
             ScriptedStep(*FRENCH[1], png, voice="fr"), ScriptedStep(*en[3], png)]  # fmt: skip
    out.append(Case("mixed-language", "mixed_language", tuple(mixed),
                    (en[0][0], "", en[2][0], "", en[3][0]), languages=("en", "de", "en", "fr", "en")))  # fmt: skip
    duo = tuple(ScriptedStep(t, ev, png, channel=0, aside=a) for (t, ev), a in zip(en, ASIDES))
    out.append(Case("two-channel", "two_channel", duo, tuple(t for t, _ in en), channels=2))
    out.append(Case("mono-mix", "mono_mix", duo, tuple(t for t, _ in en), channels=1))
    for ch in (0, 1):  # each channel of the two-channel recording, on its own: the per-channel WER, same audio
        out.append(Case(f"two-channel-{ch}", "one_of_two", duo, tuple(t for t, _ in en), channels=2, remix=ch))
    out.append(Case("channel-0-alone", "per_channel", tuple(replace(s, aside="") for s in duo),
                    tuple(t for t, _ in en)))  # fmt: skip
    out.append(Case("channel-1-alone", "per_channel",
                    tuple(ScriptedStep(a, s.events, png, voice="en-gb") for s, a in zip(duo, ASIDES)), tuple(ASIDES)))  # fmt: skip
    silent = tuple(ScriptedStep("", ev, png, pause_s=3.0) for _, ev in en)
    out.append(Case("silent", "silent", silent, ("",) * len(en)))
    out.append(Case("noise", "silent", silent, ("",) * len(en), noise=True))
    return out


def build(case: Case, root: Path) -> Path:
    m = BundleManifest(session_id=f"corpus-{case.name}", instruction=case.instruction, screen_width=scripted.W,
                       screen_height=scripted.H, app=case.app, elements=case.elements)  # fmt: skip
    b = build_think_aloud_bundle(root / case.name, m, case.steps, voice=case.voice, wpm=case.wpm,
                                 channels=case.channels, speech=True)  # fmt: skip
    if case.noise:
        wav = b / "audio.wav"
        secs = subprocess.run(["soxi", "-D", str(wav)], capture_output=True, text=True, check=True).stdout.strip()
        subprocess.run(["sox", "-n", "-r", "16000", "-c", "1", "-b", "16", str(wav), "synth", secs, "pinknoise",
                        "vol", "0.3"], check=True)  # fmt: skip
    if case.remix is not None:
        wav = b / "audio.wav"
        both = wav.with_name("both.wav")
        wav.rename(both)
        subprocess.run(["sox", str(both), str(wav), "remix", str(case.remix + 1)], check=True)
        both.unlink()
    return b


# --- measuring ------------------------------------------------------------------------------------------------


def words(s: str) -> list[str]:
    """Lower-case words; "1,800" and "1800" are one word (number formatting is not a recognition error)."""
    return re.findall(r"[a-z0-9']+", re.sub(r"(?<=\d),(?=\d{3})", "", s.lower()))


@lru_cache(maxsize=1)
def _normaliser() -> Callable[[str], str]:
    from whisper.normalizers import EnglishTextNormalizer

    return EnglishTextNormalizer()


def normalised_words(s: str) -> list[str]:
    """Words after Whisper's English text normaliser (the one Whisper's published WER uses), for a second WER
    figure: it also takes contractions, spelling and money ("1800 dollars" = "$1,800") as written alike."""
    return _normaliser()(s).split()


def edits(ref: str, hyp: str, split: Callable[[str], list[str]] = words) -> tuple[int, int]:
    """(word edits, reference words): WER = edits / words, summed over a corpus before dividing."""
    r = split(ref)
    return Levenshtein.distance(r, split(hyp)), len(r)


def on_right_action(expected: Sequence[str], i: int, thought: str) -> bool:
    """Whether step i's thought is its own: empty where nothing was said, else closer (by word edits per word) to
    this step's script than to either neighbour's. Recognition errors do not move a thought to another action."""
    if not expected[i] or not thought:
        return not expected[i] and not thought

    def dist(j: int) -> float:
        e, n = edits(expected[j], thought)
        return e / max(1, n) if expected[j] else float("inf")

    near = [j for j in (i - 1, i + 1) if 0 <= j < len(expected)]
    return all(dist(i) < dist(j) for j in near)


def recall(expected: str, thought: str) -> float:
    """Share of the expected words found in the thought (a thought may also hold the other speaker's words)."""
    got = words(thought)
    exp = words(expected)
    return sum(1 for w in exp if w in got) / max(1, len(exp))


@dataclass
class Result:
    case: Case
    steps: list[dict[str, Any]]
    session: dict[str, Any]
    transcript: list[dict[str, Any]]
    timings: dict[str, float] = field(default_factory=dict)


def ingest(case: Case, bundle: Path, lake_root: Path) -> Result:
    from ingest.asr import AsrConfig
    from ingest.think_aloud import IngestOptions, process_input
    from storage.lake import Lake

    opts = IngestOptions(asr=AsrConfig(priming=case.priming))
    o = process_input(bundle, Lake.open(lake_root / case.name, create=True), 0, opts)
    if o.quarantined:
        raise RuntimeError(f"{case.name} was quarantined: {o.quarantined[0].message}")
    ep = o.episodes[0]
    steps = [{"action": s.action, "thought": s.thought, "raw": s.raw_thought, "flag": s.thought_flag, "t": s.t_start}
             for s in ep.steps]  # fmt: skip
    return Result(case, steps, o.session_row or {}, ep.meta["transcript"], o.timings)


def step_languages(r: Result, i: int, tolerance_s: float = 0.3) -> set[str]:
    """Languages of the other-language utterances whose midpoint falls in step i's window (after the previous
    action, up to this one; both + the alignment tolerance)."""
    lo = r.steps[i - 1]["t"] + tolerance_s if i else float("-inf")
    hi = r.steps[i]["t"] + tolerance_s
    return {u["language"] for u in r.transcript
            if "other_language" in u["flags"] and lo < (u["t_start"] + u["t_end"]) / 2 <= hi}  # fmt: skip


def _ratio(a: int, b: int) -> float | None:
    return None if b == 0 else round(a / b, 4)


def figures(results: Sequence[Result]) -> dict[str, Any]:
    """The acceptance figures, each with the counts it is made of."""
    by = {r.case.name: r for r in results}
    f: dict[str, Any] = {}
    eng = [r for r in results if r.case.kind in ("english", "split")]
    e = n = ne = nw = 0  # nw, ne: words and edits after the Whisper normaliser
    per: dict[str, float | None] = {}
    for r in eng:
        ee, nn = edits(" ".join(r.case.expected), " ".join(s["thought"] for s in r.steps))
        per[r.case.name] = _ratio(ee, nn)
        e, n = e + ee, n + nn
        ee, nn = edits(" ".join(r.case.expected), " ".join(s["thought"] for s in r.steps), normalised_words)
        ne, nw = ne + ee, nw + nn
    by_voice: dict[str, list[int]] = {}
    for r in eng:
        if r.case.name.startswith(("en-", "numbers-")):
            ref, hyp = " ".join(r.case.expected), " ".join(s["thought"] for s in r.steps)
            (ee, nn), (qe, qn) = edits(ref, hyp), edits(ref, hyp, normalised_words)
            acc = by_voice.setdefault(f"{r.case.voice} {r.case.wpm} wpm", [0, 0, 0, 0])
            acc[:] = [acc[0] + ee, acc[1] + nn, acc[2] + qe, acc[3] + qn]
    f["english_wer"] = {"wer": _ratio(e, n), "edits": e, "words": n, "sessions": len(eng), "per_session": per,
                        "per_voice_and_speed": {k: _ratio(a, b) for k, (a, b, _, _) in by_voice.items()},
                        "wer_whisper_normaliser": _ratio(ne, nw),
                        "per_voice_and_speed_whisper_normaliser": {k: _ratio(c, d)
                                                                   for k, (_, _, c, d) in by_voice.items()}}  # fmt: skip
    right = total = 0
    wrong = []
    for r in results:
        if r.case.kind in ("english", "split", "names", "mixed_language", "other_language", "silent"):
            for i, s in enumerate(r.steps):
                ok = on_right_action(r.case.expected, i, s["thought"])
                right += ok
                total += 1
                if not ok:
                    wrong.append(f"{r.case.name}[{i}]: {r.case.expected[i]!r} -> {s['thought']!r} ({s['flag']})")
    f["thoughts_on_right_action"] = {"share": _ratio(right, total), "right": right, "steps": total, "wrong": wrong}
    heard = exact = 0
    for r in results:
        if r.case.name.startswith("numbers-"):
            for exp, s in zip(r.case.expected, r.steps):
                for num in re.findall(r"\d+", exp):
                    if num in re.findall(r"\d+", s["raw"].replace(",", "")):
                        heard += 1
                        exact += num in re.findall(r"\d+", s["thought"].replace(",", ""))
    f["numbers_exact"] = {"share": _ratio(exact, heard), "exact": exact, "heard_right": heard}
    other = [r for r in results if r.case.kind in ("other_language", "mixed_language")]
    foreign_steps = [(r, i) for r in other for i, lang in enumerate(r.case.languages) if lang != "en"]
    became = sum(1 for r, i in foreign_steps if r.steps[i]["thought"])
    flagged = sum(1 for r, i in foreign_steps if r.steps[i]["flag"] == "other_language")
    with_language = sum(1 for r, i in foreign_steps if r.steps[i]["flag"] == "other_language"
                        and r.case.languages[i] in step_languages(r, i))  # fmt: skip
    utt = [u for r in other for u in r.transcript if "other_language" in u["flags"]]
    f["other_language"] = {"non_english_steps": len(foreign_steps), "became_thoughts": became,
                           "steps_flagged_other_language": flagged,
                           "steps_flagged_with_their_language": with_language, "utterances_flagged": len(utt),
                           "wordless_utterances": sum(1 for u in utt if not u["text"]),
                           "utterance_languages": sorted({u["language"] for u in utt}),
                           "session_languages": {r.case.name: r.session.get("asr_language") for r in other},
                           "session_problems": {r.case.name: r.session.get("problems") for r in other}}  # fmt: skip
    if "two-channel" in by:
        two = by["two-channel"]

        def channel_text(r: Result, ch: int) -> str:
            return " ".join(u["text"] for u in r.transcript if u["channel"] == ch)

        refs = (" ".join(by["channel-0-alone"].case.expected), " ".join(ASIDES))
        stereo = [edits(refs[c], channel_text(two, c)) for c in (0, 1)]
        alone = [edits(refs[0], channel_text(by["channel-0-alone"], 0)),
                 edits(refs[1], channel_text(by["channel-1-alone"], 0))]  # fmt: skip
        mix = by["mono-mix"]
        mix_e = edits(" ".join(refs), " ".join(u["text"] for u in mix.transcript))
        own = [edits(refs[c], channel_text(by[f"two-channel-{c}"], 0)) for c in (0, 1)]
        sw, aw = _ratio(sum(a for a, _ in stereo), sum(b for _, b in stereo)), _ratio(sum(a for a, _ in alone),
                                                                                    sum(b for _, b in alone))  # fmt: skip
        ow = _ratio(sum(a for a, _ in own), sum(b for _, b in own))
        f["two_channel"] = {"two_channel_wer": sw, "per_channel_wer": ow,
                            "points_apart": None if sw is None or ow is None else round(100 * (sw - ow), 2),
                            "per_channel_alone_wer": aw,
                            "points_apart_from_alone": None if sw is None or aw is None else round(100 * (sw - aw), 2),
                            "words": sum(b for _, b in stereo), "mono_mix_wer": _ratio(*mix_e),
                            "steps_holding_their_annotator_thought": sum(
                                recall(x, s["thought"]) >= 0.7 for x, s in zip(two.case.expected, two.steps)),
                            "steps": len(two.steps)}  # fmt: skip
    if "names-primed" in by:
        hits = {}
        for k in ("names-primed", "names-plain"):
            r = by[k]
            said = sum(len(re.findall(rf"\b{n}\b", t)) for t in r.case.expected for n in NAMES)
            got = sum(len(re.findall(rf"\b{n}\b", s["thought"], re.I)) for s in r.steps for n in NAMES)
            ee, nn = edits(" ".join(r.case.expected), " ".join(s["thought"] for s in r.steps))
            hits[k] = {"names_said": said, "names_heard": got, "wer": _ratio(ee, nn)}
        f["priming"] = hits
    sil = [r for r in results if r.case.kind == "silent"]
    f["silence_and_noise"] = {
        "sessions": len(sil),
        "thoughts": sum(1 for r in sil for s in r.steps if s["thought"]),
        "steps": sum(len(r.steps) for r in sil),
        "steps_flagged": sum(1 for r in sil for s in r.steps if s["flag"]),
        "sessions_flagged_no_speech": sum(1 for r in sil if "no_speech" in r.session["problems"]),
        "step_flags": sorted({s["flag"] for r in sil for s in r.steps}, key=str),
    }
    if "split-type" in by:
        r = by["split-type"]
        f["split_type"] = {"actions": [s["action"] for s in r.steps], "expected": list(r.case.expected_actions),
                           "thoughts": [s["thought"] for s in r.steps]}  # fmt: skip
    return f


def measure(quick: bool = False, only: Callable[[Case], bool] | None = None) -> dict[str, Any]:
    """Build and ingest the corpus in a temporary folder; the figures plus the audio and ASR seconds."""
    if shutil.which("espeak-ng") is None or shutil.which("sox") is None:
        raise RuntimeError("the corpus needs espeak-ng and sox (apt-get install -y espeak-ng sox)")
    results = []
    with tempfile.TemporaryDirectory(prefix="flywheel-corpus-") as d:
        for c in cases(quick):
            if only is None or only(c):
                results.append(ingest(c, build(c, Path(d) / "bundles"), Path(d) / "lakes"))
    out = figures(results)
    out["audio_s"] = round(sum(r.timings.get("audio_s", 0.0) for r in results), 1)
    out["asr_s"] = round(sum(r.timings.get("asr_s", 0.0) for r in results), 1)
    return out


if __name__ == "__main__":
    t0 = time.perf_counter()
    report = measure(quick="--quick" in sys.argv)
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(report, indent=2))
