"""Audio clips -> 16 kHz mono -> Whisper input_features: our audio room vs soundfile + soxr +
`WhisperFeatureExtractor`.

Input (`--corpus`, the multimodal data of `../shared/data/build_multimodal.sh`, e.g. /work/mm):

- `media_audio`: `audio/speech/*.wav` (espeak-ng speech, 22,050 Hz mono 16-bit, 1-6 s).
- `media_audio_sounds`: `audio/sounds/*.oga` (freedesktop sound theme: Ogg Vorbis, 48 kHz, mono and stereo).

`AUDIO_BENCH_PASSES=N` (default 1) runs over the files N times (more clips per timed run). The parent
reads every file once first, so both sides find them in the page cache. Per clip:

- ours: `prepare_audio(data, AudioSettings())` (header limits, decode, down-mix, soxr HQ resample to
  16 kHz, 16-bit quantisation, loudness/silence/clipping measured, FLAC encoded: what ingest stores),
  then what the media_shards stage does with the stored clip: `decode_clip(prepared.data)` and
  `whisper_features(samples, 16000)` -> (80, 3000) float32.
- peer: `soundfile.read(path, dtype="float32", always_2d=True)`, the channels' mean for a stereo file,
  `soxr.resample(x, rate, 16000)` (soxr's default quality, HQ, as ours), then
  `WhisperFeatureExtractor()(y, sampling_rate=16000, return_tensors="np").input_features[0]`.

Both children run torch with one thread (`OMP_NUM_THREADS=1`); `AUDIO_BENCH_THREADS=N` gives both N,
`AUDIO_BENCH_THREADS=default` leaves torch's default (one per core). On a machine whose other processes
keep the cores busy, torch's default makes these small tensor ops many times slower on both sides (its
worker threads wait for a core at every op; RESULTS.md has the figures), so one thread is the steady
per-core comparison. Samples at 16 kHz must be equal on both sides; the
feature sums are compared too (ours goes through the stored 16-bit clip, so they agree closely, not
exactly: `check` allows a relative difference of 1e-3).
"""

from __future__ import annotations

import os
from pathlib import Path

from benchmarks.harness import (
    MB,
    Benchmark,
    BenchmarkError,
    Metric,
    Prepared,
    Record,
    Spec,
    Target,
    cpu_seconds_metric,
    peak_rss_metric,
)

RATE = 16_000
_THREADS = os.environ.get("AUDIO_BENCH_THREADS", "1")  # "default": torch's own choice (one per core)
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": "{run_dir}/hf_home",
       "TRANSFORMERS_VERBOSITY": "error",
       **({} if _THREADS == "default" else {"OMP_NUM_THREADS": _THREADS, "MKL_NUM_THREADS": _THREADS})}
FEATURE_SUM_RTOL = 1e-3


def _prepare(corpus: Path, run_dir: Path, folder: str, pattern: str) -> Spec:
    root = corpus / folder
    files = sorted(p for p in root.glob(pattern) if p.is_file()) if root.is_dir() else []
    if not files:
        raise BenchmarkError(f"no {pattern} files in {root}")
    passes = max(1, int(os.environ.get("AUDIO_BENCH_PASSES", "1") or 1))
    total = sum(len(p.read_bytes()) for p in files)  # also warms the page cache for both sides
    return {"corpus": str(corpus), "folder": folder, "files": [str(p) for p in files], "passes": passes,
            "input_bytes": total * passes, "clips": len(files) * passes}


def prepare_speech(corpus: Path, run_dir: Path) -> Spec:
    return _prepare(corpus, run_dir, "audio/speech", "*.wav")


def prepare_sounds(corpus: Path, run_dir: Path) -> Spec:
    return _prepare(corpus, run_dir, "audio/sounds", "*.oga")


def describe(spec: Spec) -> str:
    files = len(spec["files"])
    return (f"{files:,} files under {spec['folder']}/ x {spec['passes']} pass(es) = {spec['clips']:,} clips, "
            f"{spec['input_bytes'] / MB:,.1f} MB read")


def _clips(spec: Spec) -> list[str]:
    return spec["files"] * spec["passes"]


# -- ours ------------------------------------------------------------------------------------------
def run_ours(spec: Spec, run_dir: Path) -> Prepared:
    import torch

    from platform_assets.media.audio import decode_clip, prepare_audio, whisper_features
    from platform_assets.media.settings import AudioSettings

    settings = AudioSettings()
    if settings.sample_rate != RATE:
        raise BenchmarkError(f"AudioSettings().sample_rate is {settings.sample_rate}, not {RATE}")
    clips = _clips(spec)
    first = prepare_audio(Path(clips[0]).read_bytes(), settings)  # first-call costs (mel filters, torch), untimed
    whisper_features(*decode_clip(first.data))

    def work():
        n = samples = stored = 0
        seconds = feature_sum = 0.0
        for path in clips:
            prepared = prepare_audio(Path(path).read_bytes(), settings)
            x, rate = decode_clip(prepared.data)
            features = whisper_features(x, rate)
            n += 1
            samples += len(x)
            stored += len(prepared.data)
            seconds += prepared.measured["duration_s"]
            feature_sum += float(features.sum(dtype="float64"))
        return {"clips": n, "samples_16k": samples, "stored_bytes": stored, "audio_seconds": seconds,
                "feature_sum": feature_sum, "features_shape": list(features.shape),
                "torch_threads": torch.get_num_threads()}

    return Prepared(work)


# -- peer ------------------------------------------------------------------------------------------
def run_peer(spec: Spec, run_dir: Path) -> Prepared:
    import soundfile as sf
    import soxr
    import torch
    from transformers import WhisperFeatureExtractor

    fe = WhisperFeatureExtractor()
    clips = _clips(spec)
    x0, r0 = sf.read(clips[0], dtype="float32")  # first-call costs, untimed
    fe(soxr.resample(x0 if x0.ndim == 1 else x0.mean(axis=1), r0, RATE), sampling_rate=RATE, return_tensors="np")

    def work():
        n = samples = 0
        seconds = feature_sum = 0.0
        for path in clips:
            x, rate = sf.read(path, dtype="float32", always_2d=True)
            x = x[:, 0] if x.shape[1] == 1 else x.mean(axis=1)
            y = soxr.resample(x, rate, RATE)
            features = fe(y, sampling_rate=RATE, return_tensors="np").input_features[0]
            n += 1
            samples += len(y)
            seconds += len(y) / RATE
            feature_sum += float(features.sum(dtype="float64"))
        return {"clips": n, "samples_16k": samples, "stored_bytes": 0, "audio_seconds": seconds,
                "feature_sum": feature_sum, "features_shape": list(features.shape),
                "torch_threads": torch.get_num_threads()}

    return Prepared(work)


def check(ours: Record, peer: Record) -> None:
    for key in ("clips", "samples_16k", "features_shape"):
        if ours[key] != peer[key]:
            raise BenchmarkError(f"{key} differ: ours {ours[key]}, peer {peer[key]}; not comparable")
    a, b = ours["feature_sum"], peer["feature_sum"]
    if abs(a - b) > FEATURE_SUM_RTOL * max(abs(a), abs(b), 1.0):
        raise BenchmarkError(f"Whisper features differ: sum ours {a:.6g}, peer {b:.6g} (rtol {FEATURE_SUM_RTOL})")


METRICS = (
    Metric("clips/s", "clips/s", True, lambda r, s: r["clips"] / r["seconds"], "{:,.1f}"),
    Metric("clips per CPU-s", "clips/CPU-s", True, lambda r, s: r["clips"] / r["cpu_seconds"], "{:,.1f}"),
    Metric("audio speed", "x real time", True, lambda r, s: r["audio_seconds"] / r["seconds"], "{:,.0f}"),
    Metric("wall time", "s", False, lambda r, s: r["seconds"], "{:,.2f}"),
    cpu_seconds_metric(),
    Metric("cores used", "CPU s / wall s", None, lambda r, s: r["cpu_seconds"] / r["seconds"], "{:.2f}"),
    peak_rss_metric(),
    Metric("RSS after setup", "MB", None, lambda r, s: (r["rss_after_setup_bytes"] or 0) / MB, "{:,.0f}"),
    Metric("audio", "s at 16 kHz", None, lambda r, s: r["audio_seconds"], "{:,.1f}"),
    Metric("samples at 16 kHz", "", None, lambda r, s: r["samples_16k"], "{:,.0f}", must_match=True),
    Metric("clips", "", None, lambda r, s: r["clips"], "{:,.0f}", must_match=True),
    Metric("torch threads", "", None, lambda r, s: r["torch_threads"], "{:,.0f}", must_match=True),
)
OURS_LABEL = ("platform_assets.media.audio: prepare_audio (decode, mono, soxr HQ to 16 kHz, measured, 16-bit FLAC), "
              "then decode_clip + whisper_features on the stored clip")
PEER_LABEL = ("soundfile.read + channel mean + soxr.resample(x, rate, 16000) + "
              "WhisperFeatureExtractor()(y, sampling_rate=16000, return_tensors='np')")
PACKAGES = ("platform-assets", "soundfile", "soxr", "transformers", "torch", "numpy")
TARGETS = (Target("clips/s", "clips/s at least 1.5x the peer's", min_ratio=1.5),)

BENCHMARKS = (
    Benchmark(name="media_audio", description="speech WAVs -> 16 kHz mono -> Whisper input_features",
              ours_label=OURS_LABEL, peer_label=PEER_LABEL, prepare=prepare_speech, ours=run_ours, peer=run_peer,
              metrics=METRICS, packages=PACKAGES, check=check, targets=TARGETS, env=ENV, describe=describe),
    Benchmark(name="media_audio_sounds", description="Ogg Vorbis sounds -> 16 kHz mono -> Whisper input_features",
              ours_label=OURS_LABEL, peer_label=PEER_LABEL, prepare=prepare_sounds, ours=run_ours, peer=run_peer,
              metrics=METRICS, packages=PACKAGES, check=check, targets=TARGETS, env=ENV, describe=describe),
)
