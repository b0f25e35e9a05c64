"""Length histograms: exact bin counts on hand-computed data, documents summed over their chunks
(also across batch boundaries), output lengths from the loss tokens."""

import numpy as np
import pyarrow as pa
import pytest
from pydantic import ValidationError

from platform_assets.stats.histograms import DocumentLengths, LengthHistogram, length_stats
from platform_assets.stats.report import histograms_markdown, lengths_json
from platform_assets.stats.settings import StatisticsSettings, half_octave_edges


def test_bins_are_half_open_and_the_last_is_open():
    h = LengthHistogram((0, 1, 2, 4, 8))
    h.add([0, 1, 2, 3, 3, 4, 7, 8, 1000])
    # [0,1) [1,2) [2,4) [4,8) [8,inf)
    assert h.counts.tolist() == [1, 1, 3, 2, 2]
    assert (h.documents, h.total, h.min, h.max) == (9, 1028, 0, 1000)
    assert h.bin_labels() == ["0", "1", "2-3", "4-7", "8+"]
    h.add(np.array([], np.int64))  # nothing changes
    assert h.to_dict() == {"edges": [0, 1, 2, 4, 8], "counts": [1, 1, 3, 2, 2], "documents": 9, "sum": 1028,
                           "min": 0, "max": 1000, "mean": 114.222}


def test_bad_edges_and_negative_lengths_are_clear_errors():
    with pytest.raises(ValueError, match="start at 0"):
        LengthHistogram((1, 2))
    with pytest.raises(ValueError, match="increase strictly"):
        LengthHistogram((0, 4, 4))
    with pytest.raises(ValueError, match="negative length -3"):
        LengthHistogram((0, 10)).add([5, -3])
    with pytest.raises(ValidationError, match="strictly increasing"):
        StatisticsSettings(length_bin_edges=[0, 8, 2])
    with pytest.raises(ValidationError, match="start at 0"):
        StatisticsSettings(length_bin_edges=[1, 2])


def test_default_edges_are_half_octaves_up_to_2_pow_20():
    edges = half_octave_edges()
    assert edges[:12] == [0, 1, 2, 3, 4, 6, 8, 11, 16, 23, 32, 45]
    assert edges[-1] == 2**20 and len(edges) == 41 and StatisticsSettings().length_bin_edges == edges


def _rows(rows):
    ids, splits, sources, toks, loss = zip(*rows, strict=True) if rows else ([], [], [], [], [])
    return pa.record_batch({"id": list(ids), "split": list(splits), "source": list(sources),
                            "num_tokens": pa.array(toks, pa.int32()), "loss_tokens": pa.array(loss, pa.int32())})


def test_documents_are_summed_over_chunks_across_batches_per_split_and_source():
    edges = (0, 4, 16, 64)
    batches = [
        _rows([("a", "train", "web", 10, 10), ("b", "train", "web", 64, 64), ("b", "train", "web", 64, 64)]),
        # b's third chunk opens the next batch: b is one document of 130 tokens, not 2 + 1 chunks
        _rows([("b", "train", "web", 2, 2), ("c", "train", "chat", 20, 5), ("d", "test", "web", 3, 3)]),
        _rows([("d", "test", "web", 1, 1)]),  # a batch that only continues d
        _rows([]),
        _rows([("e", "train", "chat", 70, 12), ("e", "train", "chat", 30, 0), ("f", "train", "web", 16, 16)]),
    ]
    stats = length_stats(batches, edges)
    assert list(stats) == [("train", "chat"), ("train", "web"), ("test", "web")]  # train, validation, test
    web, chat, test = stats[("train", "web")], stats[("train", "chat")], stats[("test", "web")]
    # train/web: a=10 -> [4,16), b=130 -> [64,inf), f=16 -> [16,64)
    assert web.tokens.counts.tolist() == [0, 1, 1, 1] and web.tokens.total == 10 + 130 + 16
    assert web.output.counts.tolist() == [0, 1, 1, 1] and not web.has_masked_tokens
    # train/chat: c=20 tokens / 5 output, e=100 tokens / 12 output
    assert chat.tokens.counts.tolist() == [0, 0, 1, 1] and chat.output.counts.tolist() == [0, 2, 0, 0]
    assert chat.output.total == 17 and chat.has_masked_tokens
    # test/web: d = 3 + 1 = 4 tokens -> [4,16)
    assert test.tokens.counts.tolist() == [0, 1, 0, 0] and test.tokens.documents == 1
    assert sum(s.tokens.documents for s in stats.values()) == 6  # a..f


def test_batching_does_not_change_the_result():
    rng = np.random.default_rng(5)
    rows = []
    for i in range(300):
        for _ in range(int(rng.integers(1, 4))):  # 1-3 chunks a document
            n = int(rng.integers(1, 5000))
            rows.append((f"d{i:04d}", ["train", "validation"][i % 2], ["web", "chat"][i % 3 == 0], n, n // 3))
    edges = half_octave_edges(13)
    whole = length_stats([_rows(rows)], edges)
    cut = [_rows(rows[a:a + 7]) for a in range(0, len(rows), 7)]
    pieces = length_stats(cut, edges)
    assert lengths_json(whole) == lengths_json(pieces)
    assert sum(s.tokens.documents for s in whole.values()) == 300


def test_markdown_shows_occupied_bins_a_chart_per_set_and_is_deterministic():
    acc = DocumentLengths((0, 1, 2, 4, 8, 16))
    acc.add_batch(_rows([("x", "train", "web", 5, 5), ("y", "train", "web", 6, 6), ("z", "test", "web", 2, 2)]))
    stats = acc.finish()
    md = histograms_markdown("document length (tokens)", {k: v.tokens for k, v in stats.items()})
    assert "| tokens | train/web | test/web |" in md
    assert "| 2-3 | 0 | 1 |" in md and "| 4-7 | 2 | 0 |" in md and "\n| 8-15 |" not in md and "\n| 1 |" not in md
    assert md.count("](data:image/svg+xml;base64,") == 2
    assert md == histograms_markdown("document length (tokens)", {k: v.tokens for k, v in stats.items()})
    assert histograms_markdown("output", {}) == "**output**: no documents"


def test_the_same_id_in_two_sources_is_two_documents():
    """Ids are unique within a (split, source) set only: a document ends where id, split or source changes."""
    edges = (0, 4, 16, 64)
    batches = [
        # y of web followed by y of chat, in one batch
        _rows([("y", "train", "web", 3, 3), ("y", "train", "chat", 5, 5), ("x", "train", "chat", 10, 10)]),
        # x of chat ends one batch, x of web opens the next; x of test/web after it
        _rows([("x", "train", "web", 20, 20), ("x", "test", "web", 30, 30)]),
    ]
    for parts in (batches, pa.Table.from_batches(batches).combine_chunks().to_batches()):
        stats = length_stats(parts, edges)
        web, chat, test = stats[("train", "web")], stats[("train", "chat")], stats[("test", "web")]
        assert web.tokens.documents == 2 and web.tokens.total == 3 + 20 and web.tokens.max == 20
        assert chat.tokens.documents == 2 and chat.tokens.total == 5 + 10 and chat.tokens.max == 10
        assert test.tokens.documents == 1 and test.tokens.total == 30
