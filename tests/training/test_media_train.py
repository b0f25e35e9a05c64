"""Training the media families end to end on CPU: a tiny Whisper on speech shards and a tiny LLaVA on
image + PDF-page shards learn, count what they were served, resume bit-identically after SIGKILL
(LLaVA with augmentation and loader workers), resume elastically, and refuse configs without media."""

import math
import signal
import statistics

import pytest
import torch
from media_runs import media_run_config, write_media_shard_set, write_tokenizer
from train_runs import (
    KILL_AT_STEP,
    eval_losses,
    latest_step,
    launch,
    sample_ids,
    train_in_process,
    train_losses,
    write_config,
)

from training.checkpoint import find_latest_checkpoint
from training.config import RunConfigError
from training.data.media_collate import sample_id_int
from training.metrics import read_records

SOURCE_MODALITY = {"photos": "image", "scans": "pdf", "speech": "audio"}
FAMILY_MODALITIES = {"whisper": {"audio"}, "llava": {"image", "pdf"}}
STEPS, GLOBAL_BATCH, CHECKPOINT_INTERVAL = 12, 4, 5
# Killed after step 8: the newest checkpoint is step 5, so steps 6-8 are trained twice.
KILL_AT = 8
# LLaVA: augmented images through 2 loader workers; Whisper: in-process loading (cheaper).
WORKERS = {"llava": 2, "whisper": 0}


@pytest.fixture(scope="module")
def media_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("media")
    shards = write_media_shard_set(root / "data")
    tokenizer = write_tokenizer(root / "data" / "tok")
    return shards, tokenizer


@pytest.fixture(scope="module")
def modality_of(media_data):
    """Modality of every train sample, by the int64 sample id the trainer logs, from the fixture's own
    record of what it wrote (not from the loader)."""
    shards, _ = media_data
    index = {}
    # write_media_shard_set adds photos, then scans, then speech, each source's train samples in order
    counts = {"photos": 20, "scans": 3, "speech": 12}
    docs = iter(shards.ids["train"])
    for source, n in counts.items():
        for _ in range(n):
            index[sample_id_int(next(docs))] = SOURCE_MODALITY[source]
    assert next(docs, None) is None  # the counts above are the fixture's defaults
    return index


@pytest.fixture(scope="module")
def references(media_data, tmp_path_factory):
    """One uninterrupted 12-step run per family (checkpoints at 5, 10, 12), trained on first use. Read only."""
    shards, tokenizer = media_data
    done = {}

    def get(family):
        if family not in done:
            ckpt = tmp_path_factory.mktemp(f"reference-{family}") / "ckpt"
            result = train_in_process(media_run_config(shards, tokenizer, ckpt, family,
                                                       data__num_workers=WORKERS[family]))
            assert result.step == STEPS and result.resumed_from is None
            done[family] = (ckpt, result)
        return done[family]

    return get


def sample_records(ckpt):
    return {r["step"]: r for r in read_records(ckpt / "samples-rank0.jsonl")}


@pytest.mark.parametrize("family", ["whisper", "llava"])
def test_tiny_media_model_learns_and_counts_the_modalities_it_was_served(family, references, modality_of):
    ckpt, result = references(family)
    losses = train_losses(ckpt)
    assert sorted(losses) == list(range(1, STEPS + 1))
    # Random init starts near ln(vocab) ~ 6.2; 12 steps at lr 3e-3 reach ~4.8-5.1 (5 seeds checked).
    first, last = statistics.mean(losses[s] for s in (1, 2, 3)), statistics.mean(losses[s] for s in (10, 11, 12))
    assert first > 5.5
    assert last < first - 0.4, losses
    evals = eval_losses(ckpt)
    assert sorted(evals) == [5, 10, 12]
    assert math.isfinite(result.eval_loss) and result.eval_loss == evals[12]
    assert evals[12] < evals[5], evals

    # What the loader served, by the logged sample ids, mapped to modalities via the fixture.
    ids = sample_ids(ckpt)
    served = {m: 0 for m in ("image", "pdf", "audio")}
    for step in range(1, STEPS + 1):
        assert len(ids[step]) == GLOBAL_BATCH
        for i in ids[step]:
            served[modality_of[i]] += 1
    assert result.modalities_seen == served
    assert sum(served.values()) == STEPS * GLOBAL_BATCH
    assert {m for m, n in served.items() if n} == FAMILY_MODALITIES[family]
    # the metrics carry the running count; the last record the run's total
    last_record = [r for r in read_records(ckpt / "metrics.jsonl") if r["kind"] == "train"][-1]
    assert last_record["modalities_seen"] == served
    assert 0.0 < result.decode_fraction <= 1.0
    assert result.samples_per_s > 0.0


@pytest.mark.parametrize("family", ["llava", "whisper"])
def test_sigkill_then_resume_is_bit_identical(family, media_data, references, tmp_path):
    shards, tokenizer = media_data
    reference, _ = references(family)
    ckpt = tmp_path / "ckpt"
    raw = media_run_config(shards, tokenizer, ckpt, family, data__num_workers=WORKERS[family])
    proc = launch(["-c", KILL_AT_STEP, str(write_config(tmp_path / "run.yaml", raw)), str(KILL_AT)])
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, out
    assert max(train_losses(ckpt)) == KILL_AT  # it really got that far before dying
    assert latest_step(ckpt) == CHECKPOINT_INTERVAL  # the newest checkpoint before the kill

    resumed = train_in_process(raw)
    assert resumed.resumed_from == CHECKPOINT_INTERVAL and resumed.step == STEPS
    # The same samples, the same augmented pixels, the same losses to the last bit, the same weights.
    got, expected = sample_records(ckpt), sample_records(reference)
    assert sorted(got) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert got[step]["sample_ids"] == expected[step]["sample_ids"], step
        if family == "llava":
            assert len(expected[step]["pixel_sha256"]) == 2  # one per micro-batch
            assert got[step]["pixel_sha256"] == expected[step]["pixel_sha256"], step
        else:
            assert "pixel_sha256" not in got[step]
    assert train_losses(ckpt) == train_losses(reference)
    assert eval_losses(ckpt) == eval_losses(reference)
    assert resumed.modalities_seen == references(family)[1].modalities_seen
    final, ref = find_latest_checkpoint(ckpt).load("model"), find_latest_checkpoint(reference).load("model")
    assert final.keys() == ref.keys()
    assert all(torch.equal(final[k], ref[k]) for k in ref)


def test_elastic_resume_with_another_micro_batch_size_keeps_the_sample_order(media_data, references, tmp_path):
    shards, tokenizer = media_data
    reference, ref_result = references("llava")
    ckpt = tmp_path / "ckpt"
    first = train_in_process(media_run_config(shards, tokenizer, ckpt, "llava", data__num_workers=2, max_steps=7))
    assert first.step == 7
    # Same global batch of 4, now as 4 micro-batches of 1 (accumulation 4 instead of 2).
    resumed = train_in_process(media_run_config(shards, tokenizer, ckpt, "llava", data__num_workers=2,
                                                data__micro_batch_size=1))
    assert resumed.resumed_from == 7 and resumed.step == STEPS
    got, expected = sample_records(ckpt), sample_records(reference)
    assert [got[s]["sample_ids"] for s in range(1, STEPS + 1)] == \
        [expected[s]["sample_ids"] for s in range(1, STEPS + 1)]
    assert all(len(got[s]["pixel_sha256"]) == 4 for s in range(8, STEPS + 1))
    # Another summation order, so not bit-identical, but the same samples and augmentations: the
    # same losses to float32 rounding.
    ref_losses, losses = train_losses(reference), train_losses(ckpt)
    assert all(losses[s] == ref_losses[s] for s in range(1, 8))
    for s in range(8, STEPS + 1):
        assert losses[s] == pytest.approx(ref_losses[s], rel=1e-6, abs=0), s
    assert resumed.modalities_seen == ref_result.modalities_seen


@pytest.mark.parametrize(("family", "top", "field"), [
    ("whisper", {"data__media": None}, "data.media:"),
    ("llava", {"data__media": None}, "data.media:"),
    ("whisper", {"data__media__modalities": ["image"]}, "data.media.modalities:"),
    ("llava", {"data__media__modalities": ["image", "audio"]}, "data.media.modalities:"),
])
def test_media_model_config_errors_name_the_field(family, top, field, media_data, tmp_path):
    shards, tokenizer = media_data
    with pytest.raises(RunConfigError) as err:
        train_in_process(media_run_config(shards, tokenizer, tmp_path / "ckpt", family, **top))
    assert str(err.value).startswith(field), str(err.value)
    assert not (tmp_path / "ckpt" / "latest").exists()
