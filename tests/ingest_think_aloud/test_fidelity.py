"""Think-aloud fidelity (issue 24): cleanup that keeps every real word, speech-split typing, utterance merging,
channels, language and the corpus acceptance figures on real espeak-ng speech and the bundled models."""

from __future__ import annotations

import json
import re
import shutil

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
from ingest.language import identify_segments, session_language
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
    # two channels lose at most 2 points against each speaker recorded alone (they may do better: the alone
    # sessions are timed slightly differently), where the mono mix of the same two speakers is garbled
    assert f["two_channel"]["points_apart"] <= 2.0 and f["two_channel"]["mono_mix_wer"] > 0.3
    assert f["other_language"]["became_thoughts"] == 0 and f["other_language"]["utterances_flagged"] >= 3
    assert set(f["other_language"]["utterance_languages"]) <= {"de", "fr"}
    assert f["numbers_exact"]["share"] >= 0.95 and f["numbers_exact"]["heard_right"] >= 3
    s = f["silence_and_noise"]
    assert s["thoughts"] == 0 and s["steps_flagged"] == s["steps"] and s["sessions_flagged_no_speech"] == s["sessions"]
    assert f["split_type"]["actions"] == f["split_type"]["expected"]
    p = f["priming"]
    assert p["names-primed"]["names_heard"] > p["names-plain"]["names_heard"]
