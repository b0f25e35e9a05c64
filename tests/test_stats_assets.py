"""dataset_splits and tokenized_documents through Dagster with the statistics of issue #17: strata of a
meta field and the label distribution on the splits, token- and output-length histograms per split and
source on the tokens, consistent with the data written."""

import json
import random

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from platform_assets.defs.dataset_splits.assets import dataset_splits
from platform_assets.defs.resources import PipelineResource
from platform_assets.defs.tokenized_documents.assets import tokenized_documents
from platform_assets.defs.tokenizer.assets import tokenizer
from platform_assets.schema import DOCUMENTS_SCHEMA, document_id
from platform_assets.storage import Storage

WORDS = ("shard token model train corpus filter clean dedup split pack index byte text page line word source "
         "asset check gate lineage version remote cache batch worker").split()
LABELS = {"positive": 40, "negative": 25, "mixed": 8}


@pytest.fixture
def pipeline(tmp_path):
    """A deduplicated_documents output: labelled reviews (labels in meta, 6 without one, some long
    enough to be chunked at max_length 64) and chat documents; a config stratifying by the meta label."""
    rng = random.Random(5)
    rows = []
    for label, n in [*LABELS.items(), (None, 6)]:
        for _ in range(n):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(20, 300))) + "."
            rows.append(("reviews", text, json.dumps({"stars": 3} if label is None else {"review": {"label": label}})))
    for _ in range(15):
        q, a = f"What is {rng.choice(WORDS)}?", " ".join(rng.choice(WORDS) for _ in range(rng.randrange(3, 30)))
        rows.append(("chat", f"user: {q}\n\nassistant: {a}",
                     json.dumps({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]})))
    n = len(rows)
    uris = [f"{s}.jsonl#line={i}" for i, (s, _, _) in enumerate(rows)]
    table = pa.table({
        "id": [document_id(s, u, t) for (s, t, _), u in zip(rows, uris, strict=True)],
        "source": [r[0] for r in rows], "text": pa.array([r[1] for r in rows], pa.large_string()),
        "modality": ["text"] * n, "uri": uris, "license": pa.nulls(n, pa.string()), "meta": [r[2] for r in rows],
        "ingested_at": pa.array([1_700_000_000_000] * n, pa.timestamp("ms", tz="UTC")),
        "media": pa.nulls(n, DOCUMENTS_SCHEMA.field("media").type),
    }, schema=DOCUMENTS_SCHEMA)
    root = tmp_path / "out"
    with Storage(str(root)).staged_dir("deduplicated_documents/_all") as staged:
        with staged.open_output("part-00000.parquet") as f:
            pq.write_table(table, f)
    cfg = {
        "storage": {"root": str(root)},
        "sources": [{"name": name, "format": "jsonl", "path": "x"} for name in ("reviews", "chat")],
        "splits": {"ratios": {"train": 0.6, "validation": 0.2, "test": 0.2}, "stratify_by": "meta.review.label"},
        "statistics": {"label_field": "meta.review.label", "label_top_k": 2,
                       "length_bin_edges": [0, 8, 16, 32, 64, 128]},
        "tokenizer": {"source": "train", "vocab_size": 400, "min_frequency": 1},
        "tokenize": {"max_length": 64, "overlong": "chunk"},
    }
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(cfg))
    return root, n, PipelineResource(config_path=str(tmp_path / "p.yaml"))


def _meta(result, asset: str) -> dict:
    return {k: v.value for k, v in result.asset_materializations_for_node(asset)[0].metadata.items()}


def test_split_and_token_statistics_match_the_data(pipeline):
    root, n, resource = pipeline
    result = dg.materialize([dataset_splits, tokenizer, tokenized_documents], resources={"pipeline": resource})
    assert result.success and all(e.passed for e in result.get_asset_check_evaluations())

    splits = _meta(result, "dataset_splits")
    strata = splits["strata_counts"]
    assert strata["total"] == 4 and sum(s["documents"] for s in strata["shown"]) == n
    by_name = {s["stratum"]: s for s in strata["shown"]}
    assert by_name["<missing>"]["documents"] == 6 + 15  # unlabelled reviews and every chat document
    for label, size in LABELS.items():  # each stratum keeps 60/20/20 within one document
        assert by_name[label]["documents"] == size and abs(by_name[label]["validation"] - 0.2 * size) <= 1
    assert "| <missing> | 21 |" in splits["strata"] and "data:image/svg+xml" in splits["label_distribution"]
    labels = {r["label"] or r["bucket"]: r for r in splits["label_counts"]["rows"]}
    assert list(labels) == ["positive", "negative", "other", "missing"] and labels["other"]["total"] == 8
    assert sum(r["total"] for r in labels.values()) == n
    written = pq.read_table(root / "dataset_splits" / "_all", columns=["split"])["split"]
    for split in ("train", "validation", "test"):
        assert sum(r[split] for r in labels.values()) == pc.sum(pc.equal(written, split)).as_py()

    tok = _meta(result, "tokenized_documents")
    sets = {(r.data["split"], r.data["source"]): r.data for r in tok["tokens_per_split_and_source"].records}
    hist = tok["length_histograms"]
    assert hist["edges"] == [0, 8, 16, 32, 64, 128]
    data = pq.read_table(root / "tokenized_documents" / "_all", columns=["id", "split", "source", "num_tokens"])
    per_doc = data.group_by(["id", "split", "source"]).aggregate([("num_tokens", "sum")])
    assert data.num_rows > per_doc.num_rows  # some documents were chunked: the histograms count documents
    shown = 0
    for (split, source), s in sets.items():
        h = hist["sets"][split][source]
        mine = per_doc.filter(pc.and_(pc.equal(per_doc["split"], split), pc.equal(per_doc["source"], source)))
        assert sum(h["tokens"]["counts"]) == h["tokens"]["documents"] == s["documents"] == mine.num_rows
        assert sum(h["output"]["counts"]) == s["documents"]
        assert h["tokens"]["sum"] == s["tokens"] and h["output"]["sum"] == s["loss_tokens"]
        assert h["tokens"]["max"] == pc.max(mine["num_tokens_sum"]).as_py()
        if source == "chat":  # the output (assistant) part is shorter than the whole conversation
            assert h["output"]["sum"] < h["tokens"]["sum"] and f"{split}/chat" in tok["output_length_histogram"]
            shown += 1
        else:
            assert h["output"] == h["tokens"] and f"{split}/reviews" not in tok["output_length_histogram"]
        assert f"{split}/{source}" in tok["token_length_histogram"]
    assert shown >= 1 and tok["token_length_histogram"].count("data:image/svg+xml") == len(sets)
