"""Think-aloud fidelity (issue 24): cleanup that keeps every real word, speech-split typing, utterance merging,
channels, language and the corpus acceptance figures on real espeak-ng speech and the bundled models."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest import asr, cleanup
from ingest.align import align
from ingest.channels import channels_to_transcribe
from ingest.events import reduce_events
from ingest.formats.bundle import hotkey_events, shift, synthesize, type_events
from ingest.language import identify_segments, session_language, uncovered, unheard_speech
from ingest.priming import vocabulary_prompt
from schemas.tables import TABLES
from storage import Lake
from storage.delta import MANIFEST
from tests.ingest_think_aloud import corpus

W = asr.Word

#: (spoken, cleaned): fillers go only where they are fillers; every content word stays
COUNTER_EXAMPLES = [
    ("what kind of chart is this", "What kind of chart is this."),
    ("er the ER button", "The ER button."),
    ("Um al Quwain is the tab I need", "Um al Quwain is the tab I need."),
    ("now open the Um al Quwain tab", "Now open the Um al Quwain tab."),
    ("click the Ah button", "Click the Ah button."),
    ("a sort of menu appears", "A sort of menu appears."),
    ("this kind of file is fine", "This kind of file is fine."),
    ("what I mean is the second one", "What I mean is the second one."),
    ("do you know the password", "Do you know the password."),
    ("if you know the name type it", "If you know the name type it."),
    ("type 4 4 2 in the box", "Type 4 4 2 in the box."),
    ("I know that that file is open", "I know that that file is open."),
    ("sort of the list by date", "Sort of the list by date."),
    ("the UM store page", "The UM store page."),
    ("press control-s to save", "Press control-s to save."),
    ("set the zoom to 250 and the width to 1,800", "Set the zoom to 250 and the width to 1,800."),
]
#: (spoken, cleaned): what the rules must still remove
FILLERS = [
    ("um so I I need to uh click the the file menu", "So I need to click the file menu."),
    ("okay now i'll go- i'll type hello", "Okay now I'll type hello."),
    ("uh. hmm", ""),
    ("Um, I think the save button", "I think the save button."),
    ("I kind of want to open it", "I want to open it."),
    ("it is sort of slow", "It is slow."),
    ("you know, the save button", "The save button."),
    ("I mean, the second one", "The second one."),
    ("the menu, you know, is on top", "The menu, is on top."),
    ("er the file is uhm open", "The file is open."),
]


@pytest.mark.parametrize(("raw", "want"), COUNTER_EXAMPLES + FILLERS)
def test_rules_cleanup_table(raw: str, want: str) -> None:
    assert cleanup.clean_rules(raw) == want


def test_no_content_word_is_deleted_on_the_counter_examples() -> None:
    deleted = []
    for raw, _ in COUNTER_EXAMPLES:
        got = re.findall(r"[\w'-]+", cleanup.clean_rules(raw).lower())
        deleted += [w for w in re.findall(r"[\w'-]+", raw.lower()) if w not in got]
    assert deleted == []


CONTENT = ["open", "the", "file", "menu", "Quillmate", "ER", "250", "click", "save", "kind", "sort", "tab", "7"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(CONTENT), min_size=1, unique=True),  # no repeats: those are collapsed on purpose
    st.lists(st.sampled_from(["", "um", "uh", "hmm", "erm", "uhm"]), min_size=len(CONTENT), max_size=len(CONTENT)),
)
def test_rules_keep_every_content_word_and_drop_lowercase_fillers(content: list[str], fillers: list[str]) -> None:
    pairs = list(zip(content, fillers))
    spoken = " ".join(f"{f} {w}" if f else w for w, f in pairs)
    cleaned = cleanup.clean_rules(spoken)
    assert [g.lower() for g in re.findall(r"[\w'-]+", cleaned)] == [w.lower() for w, _ in pairs]
    assert not cleanup.lost_facts(spoken, cleaned)


def test_a_repeated_name_or_number_is_never_collapsed_away() -> None:
    assert cleanup.clean_rules("open Quillmate Quillmate now") == "Open Quillmate Quillmate now."
    assert cleanup.clean_rules("type 7 7 7") == "Type 7 7 7."


def test_guard_rejects_a_dropped_number_like_the_rules_keep_it() -> None:
    assert "drops '250'" in cleanup.guard("set the width to 250 pixels", "Set the width to pixels.")
    assert cleanup.guard("set the width to 250 pixels", "Set the width to 250 pixels.") is None
    assert cleanup.lost_facts("open Quillmate now", "Open it now.") == ["quillmate"]


def test_words_join_with_the_tokenizers_spacing() -> None:
    ws = (W(0.0, 0.3, " press", 0.9), W(0.3, 0.6, " control", 0.9), W(0.6, 0.8, "-s.", 0.9))
    assert asr.join_words(ws) == "press control-s."
    seg = asr.Segment(0.0, 1.0, "press control-s.", 0.9, 0.0, ws)
    out, _ = align([2.0], asr.Transcript("m", "en", 2.0, (seg,)))
    assert out[0].raw == "press control-s."


def test_keystrokes_split_where_speech_falls_between_them() -> None:
    ev = type_events("Quarterly report") + shift(hotkey_events("enter"), 4.0)
    assert [a.action.text for a in reduce_events(ev)] == ["Quarterly report\n"]  # no speech: one type action
    split = reduce_events(ev, speech_times=[2.0, 2.6, 3.1])
    assert [(a.action.kind, a.action.text or a.action.key) for a in split] == [
        ("type", "Quarterly report"),
        ("hotkey", "enter"),
    ]
    assert split[1].t_start == pytest.approx(4.0)
    # speech while typing fast (gaps under split_gap_s) does not cut a word apart
    assert len(reduce_events(type_events("hello world"), speech_times=[0.1, 0.3, 0.5])) == 1


def test_an_utterance_spanning_an_action_is_split_by_the_phrase_before_it_rule() -> None:
    # "I click save and now I type the name", one utterance (0.2 s a word); actions at 0.3 s and 1.5 s
    words = [" I", " click", " save", " and", " now", " I", " type", " the", " name"]
    ws = tuple(W(0.2 * i, 0.2 * i + 0.18, t, 0.9) for i, t in enumerate(words))
    tr = asr.Transcript("m", "en", 3.0, (asr.Segment(0.0, 1.8, "".join(words), 0.9, 0.0, ws),))
    out, _ = align([0.3, 1.5], tr, tolerance_s=0.3)
    # a word belongs to the first action whose time + 0.3 s is at or after its midpoint: "save" (mid 0.49 s) is
    # still finishing the first phrase; "and" (0.69 s) starts the next
    assert [a.raw for a in out] == ["I click save", "and now I type the name"]
    assert out[0].flag is None and out[1].flag is None


def test_two_speakers_at_once_are_joined_utterance_by_utterance() -> None:
    a = asr.Segment(0.0, 1.0, "open the menu", 0.9, 0.0, (W(0.0, 0.3, " open", 0.9), W(0.4, 0.6, " the", 0.9),
                    W(0.7, 1.0, " menu", 0.9)), channel=0)  # fmt: skip
    b = asr.Segment(0.2, 0.9, "check it", 0.9, 0.0, (W(0.2, 0.5, " check", 0.9), W(0.55, 0.9, " it", 0.9)), channel=1)
    out, _ = align([2.0], asr.Transcript("m", "en", 2.0, (a, b)))
    assert out[0].raw == "open the menu check it"


def test_utterances_split_at_pauses_with_their_own_confidence() -> None:
    ws = (W(0.0, 0.4, " open", 0.95), W(0.5, 0.9, " it", 0.9), W(3.0, 3.4, " ja", 0.2), W(3.5, 3.9, " nein", 0.1))
    seg = asr.Segment(0.0, 4.0, "open it ja nein", 0.6, 0.1, ws)
    a, b = asr.utterances(seg)
    assert (a.text, b.text) == ("open it", "ja nein")
    assert a.confidence == pytest.approx((0.95 * 0.9) ** 0.5) and b.confidence == pytest.approx((0.2 * 0.1) ** 0.5)
    assert (a.t_start, a.t_end, b.t_start, b.t_end) == (0.0, 0.9, 3.0, 4.0)


def test_channels_identical_stay_one_pass_different_get_one_each() -> None:
    rng = np.random.default_rng(0)
    x = (0.1 * rng.standard_normal(16000)).astype(np.float32)
    y = (0.1 * rng.standard_normal(16000)).astype(np.float32)
    assert [i for i, _ in channels_to_transcribe(np.stack([x, x]))] == [0]
    assert [i for i, _ in channels_to_transcribe(np.stack([x, y]))] == [0, 1]
    assert [i for i, _ in channels_to_transcribe(np.stack([np.zeros_like(x), y]))] == [1]  # a silent channel


def test_a_mono_file_decodes_at_its_own_level_as_two_equal_channels(tmp_path) -> None:
    import soundfile as sf

    x = (0.5 * np.sin(np.arange(16000) / 16000 * 2 * np.pi * 440)).astype(np.float32)
    sf.write(tmp_path / "mono.wav", x, 16000)
    both = asr.load_audio(tmp_path / "mono.wav", split_stereo=True)
    assert both.shape == (2, 16000) and np.array_equal(both[0], both[1])
    assert np.array_equal(both[0], asr.load_audio(tmp_path / "mono.wav"))  # not PyAV's upmix, 3 dB lower
    assert np.array_equal(asr.load_audio((tmp_path / "mono.wav").read_bytes(), split_stereo=True), both)
    sf.write(tmp_path / "stereo.wav", np.stack([x, x / 2], axis=1), 16000)
    lr = asr.load_audio(tmp_path / "stereo.wav", split_stereo=True)
    assert np.abs(lr[0]).max() == pytest.approx(0.5, abs=1e-3) and np.abs(lr[1]).max() == pytest.approx(0.25, abs=1e-3)


def test_vocabulary_prompt() -> None:
    p = vocabulary_prompt("Open  Quillmate and check the draft.", "Zorblax Studio", ["Tabula view", "tabula VIEW", ""])
    assert p == "Zorblax Studio. Open Quillmate and check the draft. Tabula view."
    assert vocabulary_prompt("x " * 500, None).count("x") == 120
    assert vocabulary_prompt("", None) is None


@pytest.fixture(scope="module")
def german() -> np.ndarray:
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    return synthesize("Jetzt klicke ich auf den Knopf oben rechts, um die Datei zu speichern.", voice="de")


def test_german_speech_is_flagged_with_its_language_and_transcribed_the_same_every_time(german) -> None:
    cfg = asr.AsrConfig()
    runs = []
    for _ in range(2):
        tr = asr.transcribe(german, cfg)
        runs.append(identify_segments(tr.segments, german, cfg, tr.language))
    assert runs[0] == runs[1]  # temperature 0: the same audio and model give the same output
    assert runs[0] and all("other_language" in s.flags and s.language == "de" for s in runs[0])
    assert all(s.language_prob and s.language_prob > 0.5 for s in runs[0])
    assert session_language(runs[0])[0] == "de"
    # with a multilingual model configured, the raw text is German, still not a thought
    multi = identify_segments(tr.segments, german, asr.AsrConfig(multilingual_model="base"), tr.language)
    assert "Knopf" in " ".join(s.text for s in multi) and all("other_language" in s.flags for s in multi)
    out, m = align([20.0], asr.Transcript("m", "en", 20.0, tuple(multi)))
    assert (out[0].raw, out[0].flag, m.other_language_segments) == ("", "other_language", len(multi))


def test_uncovered_voice_activity_is_what_no_word_comes_near() -> None:
    ws = (W(1.0, 1.4, " open", 0.9), W(1.5, 2.0, " it", 0.9))
    seg = asr.Segment(1.0, 2.0, "open it", 0.9, 0.0, ws)
    assert uncovered([(0.8, 2.2)], [seg]) == []  # the words cover their region (0.3 s either side)
    assert uncovered([(0.8, 2.2), (4.0, 6.0)], [seg]) == [(4.0, 6.0)]  # a region ASR gave nothing
    assert uncovered([(0.8, 4.0)], [seg]) == [(2.3, 4.0)]  # speech after the last word, 1.7 s of it
    assert uncovered([(0.8, 2.8)], [seg]) == []  # under 0.8 s uncovered: a tail, not unheard speech
    wordless = asr.Segment(4.0, 6.0, "", 0.0, 0.0, flags=("other_language",))
    assert uncovered([(4.0, 6.0)], [wordless]) == []


def _pink_noise(seconds: float) -> np.ndarray:
    out = subprocess.run(["sox", "-n", "-r", "16000", "-c", "1", "-b", "16", "-t", "raw", "-", "synth", str(seconds),
                          "pinknoise", "vol", "0.3"], capture_output=True, check=True).stdout  # fmt: skip
    return np.frombuffer(out, dtype="<i2").astype(np.float32) / 32768


def test_speech_asr_gave_no_words_is_flagged_with_its_language_not_no_speech() -> None:
    """Where voice activity has no recognised words (what tiny.en, primed, makes of French), the multilingual
    identifier names its language: French -> other_language fr; English -> unrecognised_speech; silence and
    pink noise have no voice activity and give nothing (they stay no_speech). The French sentence is one the
    identifier is sure of (fr 0.95): on espeak's French voice Whisper base's identification is weak and varies by
    machine (the corpus's "Maintenant je clique sur le bouton en haut." scored en 0.53 on one host and fr on
    another), and this test is about what is done with the identified language, not about the identifier."""
    if shutil.which("espeak-ng") is None or shutil.which("sox") is None:
        pytest.skip("espeak-ng and sox are needed")
    cfg = asr.AsrConfig()
    gap = np.zeros(16000, dtype=np.float32)
    fr = np.concatenate([gap, synthesize("Je clique sur le bouton Enregistrer.", voice="fr"), gap])
    en = np.concatenate([gap, synthesize("Now I click the button at the top.", voice="en-us"), gap])
    (f,) = unheard_speech(fr, [], cfg, channel=1)  # as if ASR had written nothing
    assert unheard_speech(fr, [], cfg, channel=1) == [f]  # the same audio gives the same answer
    assert (f.flags, f.language, f.channel, f.text) == (("other_language",), "fr", 1, "")
    assert 0.5 < f.t_start < 1.2 and f.t_end > f.t_start + 1.5 and f.language_prob and f.language_prob > 0
    (e,) = unheard_speech(en, [], cfg)
    assert (e.flags, e.language) == ((asr.UNRECOGNISED,), "en") and e.language_prob and e.language_prob >= 0.5
    heard = asr.transcribe(en, cfg)
    assert heard.segments and unheard_speech(en, heard.segments, cfg) == []  # words cover it: nothing to add
    assert unheard_speech(_pink_noise(20.0), [], cfg) == []
    assert unheard_speech(np.zeros(16000 * 5, dtype=np.float32), [], cfg) == []
    # without an identifier the speech is still flagged, with no language
    (n,) = unheard_speech(fr, [], asr.AsrConfig(lid_model=None))
    assert (n.flags, n.language) == ((asr.UNRECOGNISED,), None)
    # a step whose only speech is such a segment says so, and the session counts it
    out, m = align([0.5, 6.0], asr.Transcript("m", "en", 6.0, (f, replace(e, t_start=3.0, t_end=5.0))))
    assert [(a.raw, a.flag) for a in out] == [("", "no_speech"), ("", "other_language")]
    out, m = align([6.0], asr.Transcript("m", "en", 6.0, (replace(e, t_start=3.0, t_end=5.0),)))
    assert (out[0].flag, m.unrecognised_segments, m.thought_share) == (asr.UNRECOGNISED, 1, 0.0)


class _Cleaner(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint whose model refuses sentences about saving or dragging and otherwise
    returns the sentence as it was said (what the guard must reject, and what it must accept)."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        said = body["messages"][-1]["content"]
        answer = "I'm sorry, I cannot help with that request." if re.search(r"\b(save|drag)\b", said) else said
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": answer}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a: object) -> None:
        pass


def test_the_guards_rejections_are_counted_per_session(tmp_path, text_bundle_dir) -> None:
    from ingest.think_aloud import IngestOptions, process_input

    srv = HTTPServer(("127.0.0.1", 0), _Cleaner)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        opts = IngestOptions(cleanup_backend="llm", llm_model=f"http://127.0.0.1:{srv.server_port}/v1#cleaner")
        o = process_input(text_bundle_dir, Lake.open(tmp_path / "lake", create=True), 0, opts)
    finally:
        srv.shutdown()
    steps = o.episodes[0].steps
    rejected = [s.index for s in steps if s.thought_flag == "llm_rejected"]
    assert rejected == [3, 5]  # "I save the changes ...", "I drag the picture ..."
    assert all(s.thought and "sorry" not in s.thought for s in steps)  # the rules' cleanup landed instead
    assert o.session_row["cleanup_rejections"] == 2 and "llm_rejected:2" in o.session_row["problems"]
    assert o.episodes[0].meta["cleanup_backend"] == "endpoint:cleaner"


def test_sessions_v1_lake_migrates_to_v2_columns(tmp_path) -> None:
    lake = Lake.open(tmp_path / "new", create=True)
    old_schema = pa.schema([f for f in TABLES["sessions"].schema if not f.name.startswith(("asr_lang", "cleanup_"))])
    uri = tmp_path / "old"
    old = Lake.open(uri, create=True)
    shutil.rmtree(old.table_uri("sessions"))
    write_deltalake(old.table_uri("sessions"), old_schema.empty_table())
    m = json.loads((uri / MANIFEST).read_text())
    m["tables"]["sessions"] = 1
    (uri / MANIFEST).write_text(json.dumps(m))
    got = Lake.open(uri)
    hist = [h for h in got.read_manifest()["history"] if h["table"] == "sessions"]
    assert hist[0]["added_columns"] == ["asr_language", "asr_language_prob", "cleanup_rejections"]
    assert set(lake.read("sessions").schema.names) == set(got.read("sessions").schema.names)


@pytest.mark.slow
def test_corpus_acceptance_figures() -> None:
    """The issue's acceptance on the quick corpus (one voice and speed of each kind; the full corpus: python -m
    tests.ingest_think_aloud.corpus)."""
    f = corpus.measure(quick=True)
    print(json.dumps(f, indent=1))
    assert f["english_wer"]["wer"] <= 0.10
    assert f["thoughts_on_right_action"]["share"] >= 0.95
    # two channels within 2 points of each channel of the same recording transcribed on its own, and no worse
    # than each speaker recorded alone (timed slightly differently), where the mono mix of the two is garbled
    t = f["two_channel"]
    assert abs(t["points_apart"]) <= 2.0 and t["points_apart_from_alone"] <= 2.0 and t["mono_mix_wer"] > 0.3
    o = f["other_language"]
    assert o["became_thoughts"] == 0 and o["utterances_flagged"] >= 3
    assert o["steps_flagged_with_their_language"] == o["non_english_steps"]  # flagged other_language, de or fr
    assert not any("no_speech" in p for p in o["session_problems"].values())  # speech was heard, none usable
    assert set(f["other_language"]["utterance_languages"]) <= {"de", "fr"}
    assert f["numbers_exact"]["share"] >= 0.95 and f["numbers_exact"]["heard_right"] >= 3
    s = f["silence_and_noise"]
    assert s["thoughts"] == 0 and s["steps_flagged"] == s["steps"] and s["sessions_flagged_no_speech"] == s["sessions"]
    assert s["step_flags"] == ["no_speech"]  # pink noise is not taken for speech
    assert f["split_type"]["actions"] == f["split_type"]["expected"]
    p = f["priming"]
    assert p["names-primed"]["names_heard"] > p["names-plain"]["names_heard"]
