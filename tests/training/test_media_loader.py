"""MediaLoader: the text loader's guarantees on media shard sets. The micro-batch sequence is the same for
0, 1 or 2 workers and for both formats; ranks split every optimizer step without gap or overlap; the
mixture over (source, modality) streams keeps every stream within one sample of its quota on every
prefix (and per_modality batching keeps every step to one modality, the steps within one step of each
modality's quota); a resumed loader continues exactly, also on another world size at a step boundary;
states and configs that cannot resume or do not fit the split are refused by name."""

from __future__ import annotations

import itertools
import json
import os
from collections import Counter
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import torch
from media_runs import write_media_shard_set, write_tokenizer

from training.data.loader_position import LoaderConfigError, LoaderStateError
from training.data.media_loader import MediaLoader, MediaLoaderConfig, PerModalityOrder
from training.data.mixture import Mixture, MixtureError

# train split: photos 21 images, scans 3 pages, speech 12 clips = 36 samples (validation: 4 + 3 + 4)
IMAGES, PAGES, CLIPS, VALIDATION = 25, 6, 16, 4
GB = 4
STREAMS = ("photos/image", "scans/pdf", "speech/audio")


def ids_only(samples: list, epoch: int) -> dict[str, Any]:
    """A cheap collate (module level: the DataLoader workers pickle it)."""
    return {"ids": [s.id for s in samples], "modalities": [s.modality for s in samples], "epoch": epoch}


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    return write_media_shard_set(tmp_path_factory.mktemp("media"), images=IMAGES, pages=PAGES, clips=CLIPS,
                                 validation=VALIDATION, audio_features="none")


@pytest.fixture(scope="module")
def stream_ids(media) -> dict[str, list[str]]:
    """The train ids of each stream, from the fixture (written photos, then scans, then speech)."""
    train = media.ids["train"]
    n_photos, n_scans = IMAGES - VALIDATION, PAGES - min(VALIDATION, PAGES // 2)
    out = {"photos/image": train[:n_photos], "scans/pdf": train[n_photos:n_photos + n_scans],
           "speech/audio": train[n_photos + n_scans:]}
    assert [len(v) for v in out.values()] == [21, 3, 12] and len(set(train)) == 36
    return out


def _cfg(media, fmt: str = "webdataset", **kw) -> MediaLoaderConfig:
    base = {"data_dir": str(media.format_dir(fmt)), "global_batch_size": GB, "micro_batch_size": 2, "seed": 3}
    return MediaLoaderConfig(**{**base, **kw})


def take(loader: MediaLoader, n: int | None = None) -> list[dict[str, Any]]:
    """The next n micro-batches of the current epoch (all that remain when n is None); the iterator is
    closed, so its workers stop now."""
    it = iter(loader)
    try:
        return list(itertools.islice(it, n))
    finally:
        it.close()


def ids(batches: list[dict[str, Any]]) -> list[str]:
    return [i for b in batches for i in b["document_ids"]]


def streams(batches: list[dict[str, Any]]) -> list[str]:
    return [s for b in batches for s in b["streams"]]


def assert_quota_on_every_prefix(seq: list[str], weights: dict[str, Fraction]) -> None:
    """floor(w*n) <= count <= ceil(w*n) after every prefix of n, exactly."""
    assert set(seq) <= set(weights), set(seq) - set(weights)
    for name, w in weights.items():
        count = 0
        for n, s in enumerate(seq, 1):
            count += s == name
            low, high = (w * n).__floor__(), (w * n).__ceil__()
            assert low <= count <= high, (name, n, count, float(w * n))


# -- 1. workers and formats ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference(media) -> list[dict[str, Any]]:
    """Epoch 0 and the first 3 micro-batches of epoch 1, 0 workers, world 1, micro batch 2."""
    loader = MediaLoader(_cfg(media), ids_only)
    return take(loader) + take(loader, 3)


def test_reference_epoch_holds_every_train_sample_once(media, stream_ids, reference):
    loader = MediaLoader(_cfg(media), ids_only)
    assert loader.streams == STREAMS and loader.reader.sizes.tolist() == [21, 3, 12]
    assert loader.samples_per_epoch == 36 and loader.steps_per_epoch == 9 and loader.accumulation_steps == 2
    assert len(reference) == 18 + 3
    epoch0 = ids(reference[:18])
    assert sorted(epoch0) == sorted(media.ids["train"])  # weights None, samples_per_epoch = total
    of_stream = {i: name for name, group in stream_ids.items() for i in group}
    for b in reference:  # the batch keys: the collate's, the ids, the stream of every sample
        assert set(b) == {"ids", "modalities", "epoch", "read_s", "document_ids", "streams"}
        assert b["ids"] == b["document_ids"] and len(b["ids"]) == 2 and b["read_s"] >= 0
        assert b["streams"] == [of_stream[i] for i in b["ids"]]
        assert [s.split("/")[1] for s in b["streams"]] == b["modalities"]
    assert [b["epoch"] for b in reference] == [0] * 18 + [1] * 3
    assert ids(reference[18:]) != epoch0[:6]  # epoch 1 is a new shuffle


@pytest.mark.parametrize("num_workers", [1, 2])
def test_workers_give_the_same_sequence_into_the_next_epoch(media, reference, num_workers):
    loader = MediaLoader(_cfg(media, num_workers=num_workers), ids_only)
    got = take(loader) + take(loader, 3)
    assert loader.epoch == 1 and loader.state_dict()["consumed_samples"] == 6
    assert [(b["ids"], b["document_ids"], b["streams"], b["epoch"]) for b in got] == \
           [(b["ids"], b["document_ids"], b["streams"], b["epoch"]) for b in reference]


def test_parquet_gives_the_same_sequence_as_webdataset(media, reference):
    loader = MediaLoader(_cfg(media, "parquet"), ids_only)
    got = take(loader) + take(loader, 3)
    assert ids(got) == ids(reference) and streams(got) == streams(reference)


# -- 2. ranks --------------------------------------------------------------------------------------------


def test_two_ranks_split_every_step_and_cover_every_stream_once(media, stream_ids, reference):
    ranks = [MediaLoader(_cfg(media, micro_batch_size=1), ids_only, rank=r, world_size=2) for r in (0, 1)]
    runs = [take(loader) for loader in ranks]
    assert ranks[0].accumulation_steps == 2 and len(runs[0]) == len(runs[1]) == 9 * 2
    single = ids(reference[:18])  # world 1: step t is micro-batches 2t, 2t+1 (GB 4)
    for t in range(9):
        r0, r1 = ids(runs[0][2 * t: 2 * t + 2]), ids(runs[1][2 * t: 2 * t + 2])
        assert not set(r0) & set(r1)
        assert r0 + r1 == single[GB * t: GB * (t + 1)]  # rank 0 the first half of the step, rank 1 the second
    seen = Counter(zip(ids(runs[0]) + ids(runs[1]), streams(runs[0]) + streams(runs[1]), strict=True))
    assert seen == Counter((i, name) for name, group in stream_ids.items() for i in group)  # each exactly once


# -- 3. mixture across modalities ------------------------------------------------------------------------

QUARTERS = {"photos/image": Fraction(1, 2), "scans/pdf": Fraction(1, 4), "speech/audio": Fraction(1, 4)}


@pytest.mark.parametrize("weights", [
    {"photos": 0.5, "scans": 0.25, "speech": 0.25},  # by source
    {"photos/image": 0.5, "scans/pdf": 0.25, "speech/audio": 0.25},  # by stream
    {"photos": 2, "scans/pdf": 1, "speech/audio": 1},  # both kinds of keys, unnormalised
])
def test_weights_whose_denominator_divides_the_global_batch_fix_every_batch(media, stream_ids, weights):
    loader = MediaLoader(_cfg(media, weights=weights, samples_per_epoch=36), ids_only)
    assert loader.mixture == Mixture(STREAMS, (2, 1, 1), 4)
    batches = take(loader) + take(loader)  # two epochs
    seq = streams(batches)
    assert len(seq) == 72
    assert_quota_on_every_prefix(seq[:36], QUARTERS)
    for t in range(18):
        assert Counter(seq[GB * t: GB * (t + 1)]) == {"photos/image": 2, "scans/pdf": 1, "speech/audio": 1}, t
    by = {name: [i for i, s in zip(ids(batches), seq, strict=True) if s == name] for name in STREAMS}
    # scans (3 pages) drawn 9 times an epoch: three whole passes, each page 3 times
    assert Counter(by["scans/pdf"][:9]) == dict.fromkeys(stream_ids["scans/pdf"], 3)
    for p in range(6):  # every pass over the pages is a permutation of them
        assert sorted(by["scans/pdf"][3 * p: 3 * p + 3]) == sorted(stream_ids["scans/pdf"])
    # photos (21) drawn 18 times an epoch: epoch 1 finishes the pass epoch 0 began, no photo skipped
    assert sorted(by["photos/image"][:21]) == sorted(stream_ids["photos/image"])
    assert sorted(by["speech/audio"][:12]) == sorted(stream_ids["speech/audio"])


def test_weights_with_a_large_denominator_keep_the_quota_on_every_prefix(media):
    weights = {"photos": 0.61, "scans": 0.07, "speech/audio": 0.32}
    loader = MediaLoader(_cfg(media, weights=weights, samples_per_epoch=200, micro_batch_size=4), ids_only)
    assert loader.mixture == Mixture(STREAMS, (61, 7, 32), 100)
    seq = streams(take(loader))
    assert len(seq) == 200
    assert_quota_on_every_prefix(seq, {"photos/image": Fraction(61, 100), "scans/pdf": Fraction(7, 100),
                                       "speech/audio": Fraction(32, 100)})
    assert Counter(seq) == {"photos/image": 122, "scans/pdf": 14, "speech/audio": 64}


def test_weight_zero_leaves_a_stream_out(media):
    loader = MediaLoader(_cfg(media, weights={"photos": 1, "scans": 0, "speech": 1}), ids_only)
    assert loader.samples_per_epoch == 33  # default epoch: the drawn streams' samples
    seq = streams(take(loader))
    assert len(seq) == 32 and "scans/pdf" not in seq
    assert_quota_on_every_prefix(seq, {"photos/image": Fraction(1, 2), "speech/audio": Fraction(1, 2)})


# -- 4. per_modality batching ----------------------------------------------------------------------------


def _steps(media, world_size: int, **kw) -> list[list[tuple[str, str]]]:
    """Every optimizer step's (id, stream) pairs over all ranks, rank 0's first."""
    ranks = [MediaLoader(_cfg(media, batching="per_modality", micro_batch_size=1, **kw), ids_only, rank=r,
                         world_size=world_size) for r in range(world_size)]
    runs = [take(loader) for loader in ranks]
    acc = ranks[0].accumulation_steps
    return [[p for run in runs for b in run[acc * t: acc * (t + 1)]
             for p in zip(b["document_ids"], b["streams"], strict=True)]
            for t in range(ranks[0].steps_per_epoch)]


def test_per_modality_steps_hold_one_modality_and_keep_the_quota(media):
    steps = _steps(media, 2, samples_per_epoch=72)  # 18 steps of 4
    assert len(steps) == 18 and all(len(s) == GB for s in steps)
    mods = []
    for t, step in enumerate(steps):
        kinds = {name for _, name in step}
        assert len(kinds) == 1, (t, kinds)  # one stream per modality here: one modality per step
        mods.append(kinds.pop())
    # modality weights: the streams' sample shares 21/36, 3/36, 12/36
    assert_quota_on_every_prefix(mods, {"photos/image": Fraction(21, 36), "scans/pdf": Fraction(3, 36),
                                        "speech/audio": Fraction(12, 36)})
    # 18 steps * (21, 3, 12) / 36 = 10.5, 1.5, 6: EDF gives the half step to the earlier deadline
    assert Counter(mods) == {"photos/image": 11, "scans/pdf": 1, "speech/audio": 6}
    # within a modality: its samples follow its own order, so an image's first 21 draws are every image once
    images = [i for step in steps for i, name in step if name == "photos/image"]
    assert len(images) == 44 and len(set(images[:21])) == 21


def test_per_modality_exact_weights_repeat_every_four_steps(media):
    steps = _steps(media, 1, samples_per_epoch=32, weights={"photos": 2, "scans": 1, "speech": 1})
    mods = [{name for _, name in step} for step in steps]
    assert all(len(m) == 1 for m in mods)
    mods = [m.pop() for m in mods]
    for p in range(2):
        assert Counter(mods[4 * p: 4 * p + 4]) == {"photos/image": 2, "scans/pdf": 1, "speech/audio": 1}


def test_per_modality_streams_within_a_modality_keep_their_quota():
    # two image streams and one audio stream: the image steps' samples keep the image streams' 3:1 split
    names, modality = ["a/image", "b/image", "c/audio"], ["image", "image", "audio"]
    sizes = np.array([30, 10, 20])
    mixture = Mixture.from_weights(names, sizes.tolist(), {"a/image": 3, "b/image": 1, "c/audio": 2}, "train")
    order = PerModalityOrder(names, modality, sizes, mixture, seed=5, steps=30, global_batch_size=6, split="train")
    assert order.modalities == ("audio", "image")
    step_mod, within = [], {"image": [], "audio": []}
    for t in range(30):
        src, idx = order.samples(1, np.arange(6 * t, 6 * t + 6))
        kinds = {modality[s] for s in src.tolist()}
        assert len(kinds) == 1 and kinds == {order.step_modality(t)}, t
        step_mod.append(kinds.pop())
        within[step_mod[-1]] += [names[s] for s in src.tolist()]
    assert_quota_on_every_prefix(step_mod, {"image": Fraction(2, 3), "audio": Fraction(1, 3)})
    assert_quota_on_every_prefix(within["image"], {"a/image": Fraction(3, 4), "b/image": Fraction(1, 4)})
    assert Counter(step_mod) == {"image": 20, "audio": 10} and len(within["image"]) == 120


# -- 5. resume -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stop_at", [5, 20])  # mid-step in epoch 0, in epoch 1 (after the epoch boundary)
def test_resume_with_workers_continues_exactly(media, reference, stop_at):
    cfg = _cfg(media, num_workers=2)
    first = MediaLoader(cfg, ids_only)
    got = take(first) if stop_at >= 18 else []
    got += take(first, stop_at - len(got))  # the workers prefetch past this point; the state must not count it
    state = json.loads(json.dumps(first.state_dict()))
    assert (state["epoch"], state["consumed_samples"]) == divmod(stop_at * 2, 36)

    resumed = MediaLoader(cfg, ids_only)
    resumed.load_state_dict(state)
    assert resumed.epoch == stop_at // 18
    while len(got) < 36:  # to the end of epoch 1, across the epoch boundary when stopped in epoch 0
        got += take(resumed)
    assert resumed.epoch == 2 and resumed.state_dict()["consumed_samples"] == 0
    uninterrupted = MediaLoader(_cfg(media), ids_only)
    want = take(uninterrupted) + take(uninterrupted)
    assert ids(want[:21]) == ids(reference)
    assert [(b["document_ids"], b["streams"], b["epoch"]) for b in got] == \
           [(b["document_ids"], b["streams"], b["epoch"]) for b in want]


@pytest.mark.parametrize("batching", ["mixed", "per_modality"])
def test_resume_at_a_step_boundary_on_another_world_size(media, batching):
    kw = {"batching": batching, "samples_per_epoch": 40}
    single = MediaLoader(_cfg(media, **kw), ids_only)
    want = ids(take(single)) + ids(take(single))

    ranks = [MediaLoader(_cfg(media, micro_batch_size=1, **kw), ids_only, rank=r, world_size=2) for r in (0, 1)]
    parts = [take(loader, 3 * 2) for loader in ranks]  # 3 optimizer steps
    got = [i for t in range(3) for part in parts for i in ids(part[2 * t: 2 * t + 2])]
    state = ranks[0].state_dict()
    assert state == ranks[1].state_dict() and state["consumed_samples"] == 3 * GB and state["world_size"] == 2

    resumed = MediaLoader(_cfg(media, micro_batch_size=4, **kw), ids_only)  # world 1, one micro-batch a step
    resumed.load_state_dict(state)
    got += ids(take(resumed)) + ids(take(resumed))
    assert got == want


@pytest.mark.parametrize(("other", "key"), [
    ({"seed": 4}, "seed"),
    ({"batching": "per_modality"}, "batching"),
    ({"modalities": ("image", "pdf"), "samples_per_epoch": 36}, "modalities"),
    ({"samples_per_epoch": 40}, "samples_per_epoch"),
    ({"split": "validation", "samples_per_epoch": 36}, "split"),
])
def test_a_state_of_another_order_is_refused(media, other, key):
    saved = MediaLoader(_cfg(media), ids_only)
    take(saved, 4)
    state = saved.state_dict()
    with pytest.raises(LoaderStateError, match=rf"state was saved with {key}="):
        MediaLoader(_cfg(media, **other), ids_only).load_state_dict(state)


def test_a_mid_step_state_needs_the_same_world_size(media):
    two = MediaLoader(_cfg(media, micro_batch_size=1), ids_only, rank=0, world_size=2)
    take(two, 1)
    state = two.state_dict()
    assert state["consumed_samples"] == 2
    with pytest.raises(LoaderStateError, match=r"2 samples into optimizer step 0: resume it with the world_size "
                                               r"and micro_batch_size it was saved with \(2, 1\), not \(1, 2\)"):
        MediaLoader(_cfg(media), ids_only).load_state_dict(state)
    same = MediaLoader(_cfg(media, micro_batch_size=1), ids_only, rank=1, world_size=2)
    same.load_state_dict(state)
    assert same.state_dict()["consumed_samples"] == 2


# -- 6. modalities and weights that do not fit -----------------------------------------------------------


def test_modalities_restrict_the_streams(media, stream_ids):
    loader = MediaLoader(_cfg(media, modalities=("audio",)), ids_only)
    assert loader.streams == ("speech/audio",) and loader.samples_per_epoch == 12
    batches = take(loader)
    assert sorted(ids(batches)) == sorted(stream_ids["speech/audio"])
    assert set(streams(batches)) == {"speech/audio"} and {m for b in batches for m in b["modalities"]} == {"audio"}


def test_a_split_without_the_modalities_is_refused(tmp_path):
    small = write_media_shard_set(tmp_path, images=3, pages=1, clips=2, validation=1, audio_features="none")
    # validation: 1 photo and 1 clip, no page (pages - min(validation, pages // 2) = 1 page stays in train)
    with pytest.raises(LoaderConfigError, match=r"split 'validation' of .* has no samples of the modalities "
                                                r"\['pdf'\]"):
        MediaLoader(_cfg(small, split="validation", modalities=("pdf",), global_batch_size=1,
                         micro_batch_size=1), ids_only)
    ok = MediaLoader(_cfg(small, split="validation", global_batch_size=1, micro_batch_size=1), ids_only)
    assert ok.streams == ("photos/image", "speech/audio")


def test_weights_that_do_not_fit_are_refused(media):
    with pytest.raises(MixtureError, match=r"weights name source\(s\) \['speech/image'\]"):
        MediaLoader(_cfg(media, weights={**QUARTERS, "speech/image": 1}), ids_only)
    with pytest.raises(MixtureError, match=r"weights name source\(s\) \['video'\]"):
        MediaLoader(_cfg(media, weights={"photos": 1, "scans": 1, "speech": 1, "video": 1}), ids_only)
    with pytest.raises(MixtureError, match=r"missing: \['scans/pdf'\]"):
        MediaLoader(_cfg(media, weights={"photos": 1, "speech": 1}), ids_only)
    with pytest.raises(MixtureError, match=r"weights name source\(s\) \['photos'\]"):  # not a source of these
        MediaLoader(_cfg(media, modalities=("audio",), weights={"photos": 1, "speech": 1}), ids_only)
    for bad in (float("inf"), float("nan"), -1, "0.5", True):  # by source checked as by stream
        for key in ("photos", "photos/image"):
            with pytest.raises(MixtureError, match=rf"weights\['{key}'\]: expected a finite number >= 0, got"):
                MediaLoader(_cfg(media, weights={key: bad, "scans": 1, "speech": 1}), ids_only)
    for weights in ({"photos": 1, "photos/image": 1, "scans": 1, "speech": 1},
                    {"photos/image": 1, "photos": 1, "scans": 1, "speech": 1}):
        with pytest.raises(LoaderConfigError, match=r"give 'photos' \(a source\) or 'photos/image' \(its stream\), "
                                                    r"not both"):
            MediaLoader(_cfg(media, weights=weights), ids_only)


# -- the real collator -----------------------------------------------------------------------------------


def test_augmented_pixels_are_the_same_for_0_and_2_workers(media, tmp_path):
    from transformers import AutoTokenizer

    from training.data.image_augment import AugmentSettings
    from training.data.media_collate import (
        ImageSettings,
        VisionLanguageCollator,
        build_image_processor,
        ensure_image_token,
    )

    tokenizer = AutoTokenizer.from_pretrained(write_tokenizer(tmp_path / "tok"))
    ensure_image_token(tokenizer)

    def collator(augment: AugmentSettings) -> VisionLanguageCollator:
        processor = build_image_processor(ImageSettings(size=32, augment=augment))
        return VisionLanguageCollator(tokenizer, processor, augment, 3, image_seq_length=16, max_text_tokens=256)

    on = AugmentSettings(random_resized_crop_scale=(0.3, 1.0), hflip_probability=0.5, brightness=0.4,
                         contrast=0.4, saturation=0.4)
    cfg = {"modalities": ("image", "pdf"), "samples_per_epoch": 16}
    runs = [take(MediaLoader(_cfg(media, num_workers=w, **cfg), collator(on))) for w in (0, 2)]
    assert len(runs[0]) == len(runs[1]) == 8
    for a, b in zip(*runs, strict=True):
        assert a["document_ids"] == b["document_ids"]
        assert a["pixel_values"].shape == (2, 3, 32, 32) and a["pixel_values"].dtype == torch.float32
        assert torch.equal(a["pixel_values"], b["pixel_values"]) and torch.equal(a["input_ids"], b["input_ids"])
    plain = take(MediaLoader(_cfg(media, **cfg), collator(AugmentSettings())))
    assert [b["document_ids"] for b in plain] == [b["document_ids"] for b in runs[0]]
    assert not torch.equal(torch.cat([b["pixel_values"] for b in plain]),
                           torch.cat([b["pixel_values"] for b in runs[0]]))  # augmentation is on


def _storage_inode(t: torch.Tensor) -> int:
    """The shared-memory file behind a tensor a worker sent (the main process maps it by descriptor)."""
    fd, _size = t.untyped_storage()._share_fd_cpu_()
    return os.fstat(fd).st_ino


def test_workers_recycle_pixel_buffers_without_touching_batches_the_caller_keeps(media, tmp_path):
    """With 2 workers the pixel_values of a streaming consumer come from a few recycled shared-memory
    buffers (shared_buffers.py: a fresh 19 MB segment costs 10 ms of page faults), yet every batch equals
    the in-process one, and batches the caller keeps are never written again."""
    from transformers import AutoTokenizer

    from training.data.image_augment import AugmentSettings
    from training.data.media_collate import (
        ImageSettings,
        VisionLanguageCollator,
        build_image_processor,
        ensure_image_token,
    )

    tokenizer = AutoTokenizer.from_pretrained(write_tokenizer(tmp_path / "tok"))
    ensure_image_token(tokenizer)
    augment = AugmentSettings(random_resized_crop_scale=(0.3, 1.0), hflip_probability=0.5)
    collate = VisionLanguageCollator(tokenizer, build_image_processor(ImageSettings(size=32, augment=augment)),
                                     augment, 3, image_seq_length=16, max_text_tokens=256)
    cfg = {"modalities": ("image", "pdf"), "samples_per_epoch": 48}
    reference = [b["pixel_values"].clone() for b in take(MediaLoader(_cfg(media, **cfg), collate))]
    assert len(reference) == 24

    loader = MediaLoader(_cfg(media, num_workers=2, **cfg), collate)
    inodes, kept = set(), []
    for k, batch in enumerate(iter(loader)):
        pixels = batch["pixel_values"]
        assert "_shared_buffer_slots" not in batch and pixels.is_shared()
        assert torch.equal(pixels, reference[k]), k
        inodes.add(_storage_inode(pixels))
        if k % 5 == 0:
            kept.append((k, pixels))  # held by the caller: its buffer must not be reused
        del batch, pixels
    loader.close()
    assert all(torch.equal(pixels, reference[k]) for k, pixels in kept)
    # 24 batches in at most 4 recycled buffers per worker plus the 5 kept ones (fresh when none is free)
    assert len(inodes) <= 2 * 4 + len(kept) < 24
