"""The composed stage: exclusion records, funnel counts, bad input, and the `cleaning:` settings."""

from __future__ import annotations

import random
import time

import pyarrow as pa
import pytest
import yaml
from document_batches import documents_batch
from pydantic import ValidationError

from platform_assets.cleaning import EXCLUSIONS_SCHEMA, CleaningPipeline, CleaningSettings, build_pipeline
from platform_assets.cleaning.guard import Guard
from platform_assets.cleaning.handed_texts import HandedTexts
from platform_assets.cleaning.pipeline import exclusion_counts
from platform_assets.cleaning.quality.step import QualityStep
from platform_assets.cleaning.settings import GopherQualitySettings, LengthSettings
from platform_assets.cleaning.steps import DocumentStep, text_bytes
from platform_assets.schema import DOCUMENTS_SCHEMA

PROSE = "\n".join(
    [
        "The committee met on Tuesday to discuss the new budget for the regional library network.",
        "Members agreed that funding for rural branches should increase by twelve percent next year.",
        "They noted that demand for digital lending has doubled since the service was launched.",
        "The chair said that the vote was unanimous and that the plan will be published next month.",
        "Residents will have six weeks to comment on the proposal before the final decision is taken.",
        "Several speakers asked whether the mobile library would return to the villages in the north.",
    ]
)
GERMAN = (
    "Die Bibliothek öffnet um neun Uhr morgens und schließt donnerstags spät, wenn Freiwillige "
    "Lesegruppen für Kinder anbieten. Der Ausschuss hat den Haushalt für das kommende Jahr beschlossen."
)
HTML = (
    "<html><body><nav><a href='/'>Home</a> <a href='/news'>News</a></nav><article><h1>Budget</h1>"
    + "".join(f"<p>{line}</p>" for line in PROSE.split("\n"))
    + "</article><footer>Copyright 2024 Example Corp. All rights reserved.</footer></body></html>"
)


# CleaningSettings' documented order: filters first, redaction last
STEP_ORDER = ["guard", "images", "audio", "html", "normalize", "language", "quality", "blocklist", "pii"]

def batch(texts, modalities=None, prefix="d") -> pa.RecordBatch:
    n = len(texts)
    return documents_batch(texts, modalities=modalities, id_prefix=prefix, uris=[f"u{i}" for i in range(n)],
                           license="cc-by", meta="{}")


@pytest.fixture(scope="module")
def pipeline() -> CleaningPipeline:
    return build_pipeline(CleaningSettings())


def test_end_to_end_keeps_redacts_and_records_why_the_rest_went(pipeline):
    pipeline.reset()
    texts = [
        PROSE + "\nWrite to jane.doe@example.com for details.",  # kept, e-mail redacted
        HTML,  # html: boilerplate removed, then kept
        GERMAN,  # kept: English rule sets do not apply to German
        "",  # guard.empty
        "x" * 5_000_000,  # guard.too_large
        "Short.",  # low-confidence language or too few words
        PROSE + "\nWatch free porn videos here every day.",  # blocklist
        PROSE + "\nfunction f() { return 1; } is defined in the script.",  # c4.curly_bracket
    ]
    r = pipeline.process_batch(batch(texts, modalities=["text", "html"] + ["text"] * 6))
    kept = {row["id"]: row for row in r.kept.to_pylist()}
    assert set(kept) == {"d0", "d1", "d2"}
    assert "<EMAIL>" in kept["d0"]["text"] and "jane.doe" not in kept["d0"]["text"]
    assert kept["d0"]["pii_redactions"] == 1
    # navigation and footer gone with the HTML; the one-word heading then went with C4's short lines
    assert kept["d1"]["text"].startswith("The committee met") and "Home" not in kept["d1"]["text"]
    assert "Copyright" not in kept["d1"]["text"]
    assert (kept["d0"]["lang"], kept["d1"]["lang"], kept["d2"]["lang"]) == ("en", "en", "de")
    assert kept["d2"]["text"] == GERMAN and kept["d2"]["license"] == "cc-by"  # other columns carried
    excl = {row["id"]: row for row in r.exclusions.to_pylist()}
    assert excl["d3"]["rule"] == "guard.empty"
    assert excl["d4"] == {
        "id": "d4",
        "rule": "guard.too_large",
        "value": "5000000 > 4194304",
        "bytes": 5_000_000,
    }
    assert excl["d5"]["rule"] in {"language.low_confidence", "gopher_quality.too_few_words"}
    assert excl["d6"]["rule"] == "blocklist.match" and excl["d6"]["value"] == "1 > 0: porn"
    assert excl["d7"]["rule"] == "c4.curly_bracket"
    assert r.exclusions.schema == EXCLUSIONS_SCHEMA
    assert r.kept.schema == pipeline.output_schema(DOCUMENTS_SCHEMA)


def test_texts_handed_from_step_to_step_give_what_each_step_called_alone_gives():
    """Each document step hands the next one its texts as Python strings, the batch going without its
    text column meanwhile (handed_texts.py), instead of the next step decoding the column again and
    each rewrite or removal copying it: the same kept batch, exclusions and counts as calling every
    step on the whole Arrow batch alone, step by step."""
    texts = [
        PROSE + "  \n\n\n\nWrite to jane.doe@example.com for details.\r\n",  # normalised, then redacted
        HTML,
        GERMAN + "\t",
        "",
        "Short.",
        PROSE + "\nWatch free porn videos here every day.",
        "lorem ipsum dolor sit amet. " * 30,  # c4
        PROSE + "\nCall +1 415 555 0132 or visit 10.0.0.1.\n\nJavaScript must be enabled.",  # C4 rewrites
        "Ünïcödé prose: " + GERMAN + " — mit Umlauten.\u00a0 ",  # non-ASCII, rewritten by normalize
    ]
    modalities = ["text", "html"] + ["text"] * 7
    handed, alone = build_pipeline(CleaningSettings()), build_pipeline(CleaningSettings())
    seen = {}
    for step in handed.steps:
        original = step.run

        def run(b, t=None, original=original, name=step.name, **kwargs):
            result = original(b, t, **kwargs)
            seen[name] = (t is not None, kwargs.get("hand_on", False), result)
            return result

        step.run = run
    r = handed.process_batch(batch(texts, modalities=modalities))
    b = batch(texts, modalities=modalities)
    exclusions, alone_kept = [], {}
    for step in alone.steps:
        result = step(b)
        b = alone_kept[step.name] = result.kept
        exclusions.append(result.exclusions)
        alone._totals[step.name].merge(result.stats)
    assert r.kept.equals(b) and r.kept.num_rows == 6 and r.exclusions.num_rows == 3
    assert r.kept.schema == handed.output_schema(DOCUMENTS_SCHEMA)
    assert r.exclusions.equals(pa.Table.from_batches(exclusions).combine_chunks().to_batches()[0])
    assert [s.to_dict() | {"seconds": 0} for s in handed.funnel().steps] == [
        s.to_dict() | {"seconds": 0} for s in alone.funnel().steps]
    # the document steps after the first (html) are handed texts; all but the last hand theirs on
    document_steps = ["html", "normalize", "language", "quality", "blocklist", "pii"]
    assert [name for name, (given, _, _) in seen.items() if given] == document_steps[1:]
    assert [name for name, (_, hand_on, _) in seen.items() if hand_on] == document_steps[:-1]
    # texts were rewritten by a step before a step that was handed them, and by the last
    assert seen["normalize"][2].stats.modified and seen["quality"][2].stats.modified
    assert seen["pii"][2].stats.modified
    for name in document_steps[:-1]:
        result, whole = seen[name][2], alone_kept[name]
        assert "text" not in result.kept.schema.names, name
        assert result.kept.equals(whole.drop_columns(["text"])), name
        assert result.kept_texts.strings == whole.column("text").to_pylist(), name
        assert result.kept_texts.sizes == text_bytes(whole.column("text")), name
    assert seen["pii"][2].kept_texts is None and seen["pii"][2].kept.equals(alone_kept["pii"])


def test_a_step_that_takes_no_texts_refuses_handed_ones():
    guard = build_pipeline(CleaningSettings()).steps[0]
    assert guard.name == "guard" and not guard.takes_texts
    b = batch(["some text"])
    handed = HandedTexts(["some text"], [9], b.schema.field("text"), b.schema.get_field_index("text"))
    with pytest.raises(ValueError, match="does not take handed texts"):
        guard.run(b.drop_columns(["text"]), handed)


def test_funnel_counts_equal_the_exclusion_records_over_several_batches(pipeline):
    pipeline.reset()
    rng = random.Random(5)
    pool = [PROSE, GERMAN, "", "tiny", "x" * 4_200_000, HTML, PROSE + " {", "\x00\x01" * 100, "😀" * 50]
    exclusions, kept_rows, docs_in, bytes_in = [], 0, 0, 0
    for b in range(3):
        texts = [rng.choice(pool) for _ in range(20)]
        mods = ["html" if t == HTML else "text" for t in texts]
        r = pipeline.process_batch(batch(texts, mods, prefix=f"b{b}-"))
        exclusions.append(r.exclusions)
        kept_rows += r.kept.num_rows
        docs_in += len(texts)
        bytes_in += sum(len(t.encode()) for t in texts)
    funnel = pipeline.funnel()
    funnel.check()
    table = pa.Table.from_batches(exclusions, schema=EXCLUSIONS_SCHEMA)
    assert funnel.docs_in == docs_in and funnel.bytes_in == bytes_in
    assert funnel.docs_out == kept_rows
    assert funnel.docs_removed == table.num_rows == docs_in - kept_rows
    assert exclusion_counts(table) == funnel.removed_by_rule()
    assert funnel.bytes_in == funnel.bytes_out + funnel.bytes_removed + funnel.bytes_rewritten
    d = funnel.to_dict()
    assert [s["step"] for s in d["steps"]] == STEP_ORDER
    assert d["removal_rate"] == pytest.approx(table.num_rows / docs_in, abs=1e-6)
    md = funnel.to_markdown()
    assert md.splitlines()[2] == f"| **in** | {docs_in} | {bytes_in} |"
    assert "guard.too_large" in md
    meta = funnel.to_metadata()
    assert meta["docs_in"] == docs_in and sum(meta["removed_by_rule"].values()) == table.num_rows


def test_process_table_streams_batches_and_returns_tables(pipeline):
    pipeline.reset()
    table = pa.Table.from_batches([batch([PROSE, "", GERMAN] * 5)])
    kept, excl = pipeline.process_table(table, batch_rows=4)
    assert kept.num_rows == 10 and excl.num_rows == 5
    assert kept.schema == pipeline.output_schema(table.schema) and excl.schema == EXCLUSIONS_SCHEMA
    assert pipeline.funnel().docs_in == 15


def test_bad_input_never_crashes_or_stalls(pipeline):
    pipeline.reset()
    rng = random.Random(11)
    junk = bytes(rng.getrandbits(8) for _ in range(20_000))
    texts = [
        junk.decode("utf-8", "replace"),
        junk.decode("latin-1"),
        "a" * 1_000_000,
        "1 " * 500_000,
        "a@" * 500_000,
        "." * 1_000_000,
        "\n" * 1_000_000,
        "e" + "\u0301" * 200_000,  # one letter, 200k combining accents ("zalgo")
        "\ue000" * 10_000,  # private use area
        "བོད་ཡིག་ནི་བོད་ཀྱི་ཡི་གེ་ཡིན། " * 100,  # Tibetan
        "𒀀𒀁𒀂 " * 1000,  # cuneiform
        "<div>" * 50_000,
        "",
        " ",
    ]
    mods = ["text"] * 11 + ["html", "text", "text"]
    start = time.process_time()
    r = pipeline.process_batch(batch(texts, mods))
    assert time.process_time() - start < 20.0
    funnel = pipeline.funnel()
    funnel.check()
    assert funnel.docs_in == len(texts)
    assert not any(rule.endswith(".error") for rule in funnel.removed_by_rule())  # reasons, not exceptions
    excl = {row["id"]: row["rule"] for row in r.exclusions.to_pylist()}
    assert excl["d0"] == excl["d1"] == "guard.binary"
    assert excl["d11"] == "html.too_deep"
    assert excl["d12"] == excl["d13"] == "guard.empty"


def test_a_crashing_document_is_excluded_with_its_error():
    class Boom(DocumentStep):
        name = "boom"

        def process(self, doc, counters):
            if doc.text == "boom":
                raise ValueError("bad document")
            return None

    p = CleaningPipeline([Guard(), Boom()])
    r = p.process_batch(batch(["fine", "boom"]))
    assert r.exclusions.to_pylist() == [
        {"id": "d1", "rule": "boom.error", "value": "ValueError: bad document", "bytes": 4}
    ]
    assert r.kept.column("id").to_pylist() == ["d0"]
    with pytest.raises(ValueError):
        CleaningPipeline([Guard(), Boom(on_error="raise")]).process_batch(batch(["boom"]))


def test_steps_compose_freely_and_names_must_be_unique():
    p = CleaningPipeline([Guard(), QualityStep([LengthSettings(min_chars=10, min_words=None)])])
    r = p.process_batch(batch(["", "short", "long enough text"]))
    assert r.kept.column("id").to_pylist() == ["d2"]
    assert r.exclusions.column("rule").to_pylist() == ["guard.empty", "length.too_few_chars"]
    with pytest.raises(ValueError):
        CleaningPipeline([Guard(), Guard()])


# -- settings ------------------------------------------------------------------------------------------

YAML = """
guard: {max_bytes: 1000000}
normalize: {unicode_form: NFKC}
language: {allow: [en, de], min_score: 0.6}
quality:
  - preset: gopher_repetition
  - preset: gopher_quality
    min_doc_words: 30
    languages: [en, de]
  - preset: c4
    filter_no_terminal_punct: false
  - preset: length
    min_chars: 100
blocklist: {max_hits: 2}
pii: {types: [EMAIL, PHONE], placeholder: "[{type}]"}
"""


def test_settings_parse_from_yaml_and_build_the_configured_steps():
    s = CleaningSettings.model_validate(yaml.safe_load(YAML))
    assert s.guard.max_bytes == 1_000_000 and s.normalize.unicode_form == "NFKC"
    assert s.language.allow == ("en", "de")
    assert [q.preset for q in s.quality] == ["gopher_repetition", "gopher_quality", "c4", "length"]
    assert isinstance(s.quality[1], GopherQualitySettings) and s.quality[1].min_doc_words == 30
    assert s.quality[1].max_doc_words == 100_000  # the rest stay published
    p = build_pipeline(s)
    assert [st.name for st in p.steps] == STEP_ORDER
    r = p.process_batch(batch(["mail a@example.com or call +44 20 7946 0958. " + PROSE]))
    assert r.kept.column("text").to_pylist()[0].startswith("mail [EMAIL] or call [PHONE].")


def test_settings_are_strict_and_explain_mistakes():
    with pytest.raises(ValidationError, match="extra"):
        CleaningSettings.model_validate({"guard": {"max_byte": 10}})
    with pytest.raises(ValidationError):
        CleaningSettings.model_validate({"quality": [{"preset": "gopher"}]})
    with pytest.raises(ValidationError):
        CleaningSettings.model_validate({"pii": {"types": ["SSN"]}})
    with pytest.raises(ValidationError, match="filter by language"):
        CleaningSettings.model_validate({"language": {"enabled": False}})  # English presets need `lang`
    s = CleaningSettings.model_validate(
        {"language": {"enabled": False}, "quality": [{"preset": "gopher_quality", "languages": None}]}
    )
    assert [st.name for st in build_pipeline(s).steps] == [
        "guard",
        "images",
        "audio",
        "html",
        "normalize",
        "quality",
        "blocklist",
        "pii",
    ]


def test_steps_can_be_switched_off():
    s = CleaningSettings.model_validate(
        {
            "html": {"enabled": False},
            "language": {"enabled": False},
            "quality": [],
            "blocklist": {"enabled": False},
            "pii": {"enabled": False},
            "normalize": {"enabled": False},
            "images": {"enabled": False},
            "audio": {"enabled": False},
        }
    )
    p = build_pipeline(s)
    assert [st.name for st in p.steps] == ["guard"]
    assert p.output_schema(DOCUMENTS_SCHEMA) == DOCUMENTS_SCHEMA


def test_steps_are_scoped_by_modality_and_media_without_text_is_skipped_not_dropped():
    """A caption-less image, audio clip or PDF page is never `guard.empty`; prose rules judge text and
    HTML only; a caption still goes through language ID, the blocklist and PII redaction."""
    settings = CleaningSettings(quality=[{"preset": "gopher_quality"}, {"preset": "length"}])
    pipeline = build_pipeline(settings)
    caption = "A golden retriever lying on the grass; write to jane.doe@example.com for the photo."
    texts = [PROSE, "", "", "", caption, ""]
    modalities = ["text", "image", "audio", "pdf", "image", "text"]
    r = pipeline.process_batch(batch(texts, modalities))
    kept = dict(zip(r.kept.column("id").to_pylist(), r.kept.column("text").to_pylist(), strict=True))
    assert set(kept) == {"d0", "d1", "d2", "d3", "d4"}  # only the empty *text* document is removed
    assert dict(zip(r.exclusions.column("id").to_pylist(), r.exclusions.column("rule").to_pylist(),
                    strict=True)) == {"d5": "guard.empty"}
    assert kept["d4"] == caption.replace("jane.doe@example.com", "<EMAIL>")  # PII reaches captions
    assert r.kept.column("lang").to_pylist()[4] == "en"  # so does language ID
    stats = {s.step: s for s in pipeline.funnel().steps}
    assert stats["guard"].skipped == 4  # the four media documents: not the guard's to judge
    assert stats["quality"].skipped == 4  # prose rules: text and HTML only (the caption too)
    assert stats["language"].skipped == 3  # media without text: nothing to identify
    pipeline.funnel().check()


def test_a_funnel_that_does_not_add_up_raises_even_under_python_O():
    from platform_assets.cleaning.pipeline import Funnel, FunnelError
    from platform_assets.cleaning.steps import StepStats

    broken = Funnel([StepStats("guard", docs_in=10, docs_out=9, bytes_in=100, bytes_out=90),
                     StepStats("pii", docs_in=8, docs_out=8, bytes_in=90, bytes_out=90)])
    with pytest.raises(FunnelError,
                       match="guard: docs in 10 != out 9 \\+ removed 0.*pii: docs in 8 != guard's docs out 9"):
        broken.check()


_LOAD_ON_FIRST_BATCH = """
import json
import sys

from platform_assets.cleaning import build_pipeline, language_id
from platform_assets.schema import DOCUMENTS_SCHEMA
import pyarrow as pa

pipeline = build_pipeline()
schema = pipeline.output_schema(DOCUMENTS_SCHEMA)
built = "numba" in sys.modules, language_id._MODEL is not None
pipeline.load()
loaded = language_id._MODEL is not None
batch = pa.RecordBatch.from_pylist(
    [{"id": "a", "source": "s", "text": sys.argv[1], "modality": "text"}], schema=DOCUMENTS_SCHEMA)
result = pipeline.process_batch(batch)
print(json.dumps({"numba_when_built": built[0], "model_when_built": built[1], "model_when_loaded": loaded,
                  "numba_after_a_batch": "numba" in sys.modules, "kept": result.kept.num_rows,
                  "columns": len(schema)}))
"""


def test_a_pipeline_loads_its_kernels_on_its_first_batch_not_when_built():
    """The cleaning stage's parent builds a pipeline for its step names and output schema while the
    workers clean: building it must not import numba and load the kernels (~0.9 CPU-s for two sources)
    nor map the language model (~130 MB); loading it, before the first batch, does both."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _LOAD_ON_FIRST_BATCH, PROSE], capture_output=True, text=True,
                          timeout=300, check=True)
    result = json.loads(done.stdout.splitlines()[-1])
    assert result == {"numba_when_built": False, "model_when_built": False, "model_when_loaded": True,
                      "numba_after_a_batch": True, "kept": 1, "columns": result["columns"]}
    assert result["columns"] > len(DOCUMENTS_SCHEMA)  # the steps' added columns, from the unloaded pipeline
