"""The audio room: one file's bytes -> a mono 16-bit clip at `audio.sample_rate`, plus what was measured.

soundfile (libsndfile 1.2: WAV, FLAC, Ogg Vorbis/Opus, MP3, AIFF, ...) decodes and encodes, soxr resamples.
The header is read first and decides the size and duration limits before a sample is decoded, so the work
per file is bounded by `max_file_bytes` and `max_duration_s`. Loudness, silence and clipping are measured
here, once; the `audio_filter` cleaning step reads them instead of decoding the clip again.

Whisper features: `WhisperFeatureExtractor` pads every clip to 30 s and runs the STFT over all 3000 frames.
Past the clip's last sample those frames see only zeros, whose log-mel value is a known constant, so
`whisper_features` transforms only the frames the clip reaches and fills the rest: the same numbers
(bit-identical on the clips tried), ~13x faster for a 3 s clip (0.6 ms against 8.5 ms on 2 cores).
"""

from __future__ import annotations

import io
import math
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import soundfile as sf
import soxr

from platform_assets.media.errors import MediaRejected
from platform_assets.media.prepared import PreparedMedia
from platform_assets.media.settings import DEFAULT_MEDIA, AudioSettings
from platform_assets.schema import QuarantineReason

if TYPE_CHECKING:
    from transformers import WhisperFeatureExtractor

_BLOCK_FRAMES = 1 << 18
"""Frames decoded per read (5.9 s at 44.1 kHz: 2 MB per channel as float32). A clip of declared length
is read in one call; one without a usable frame count is read block by block and stopped as soon as it
passes `max_duration_s`, so an hour-long stream costs at most one block past the limit."""
_SF_COUNT_MAX = 2**63 - 1  # libsndfile's "length unknown"
_FLOOR_DBFS = -120.0
"""rms_dbfs of digital silence (log10(0) is -inf). The quietest non-silent 16-bit clip, one LSB, is
-90 dBFS, so the floor never collides with a real level."""
_FRAME_S = 0.02  # silent_fraction counts 20 ms frames: 320 samples at 16 kHz
_PCM_SCALE = 32768.0
"""float <-> int16 scale libsndfile uses when it reads 16-bit PCM back as float (1/0x8000): quantising with
the same scale makes decode_clip return exactly the samples that were measured."""
_RESAMPLE_QUALITY = "HQ"
"""soxr's 'high quality': 20-bit precision (~120 dB stop-band), above what the stored 16 bits hold (96 dB).
VHQ (28-bit) is lost in the 16-bit quantisation and costs ~45% more (0.70 against 0.48 ms for 3 s of
22.05 kHz audio); LQ/MQ save nothing measurable at these sizes (0.47-0.48 ms)."""
_TRUSTED_COUNT_EXCEPT = frozenset({"MP3"})
"""Containers whose frame count may be an estimate: without a Xing/Info header mpg123 derives an MP3's
length from its size and bitrate, so decoding fewer frames than that is not evidence of truncation."""


def _sf_message(err: Exception) -> str:
    # LibsndfileError's str() names the BytesIO and its memory address, different every run: the
    # quarantine detail must be the same bytes on a re-run, so keep only libsndfile's own words.
    return getattr(err, "error_string", None) or str(err)


def _riff_declared_frames(data: bytes) -> int:
    """Frames the `data` chunk of a RIFF/WAVE header declares, or 0 where it declares none usable.

    libsndfile clamps a WAV's frame count to the bytes present, so a truncated file would pass for a
    short clip (and a 20-minute header over 10 s of data would be judged as 10 s). 0 and 0xFFFFFFFF
    are what streaming writers put before they know the length: unknown, not a claim.
    """
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return 0
    pos, block_align = 12, 0
    for _ in range(64):  # fmt, fact, LIST, ... come before data; 64 chunks is far more than real files carry
        if pos + 8 > len(data):
            break
        chunk, size = data[pos:pos + 4], int.from_bytes(data[pos + 4:pos + 8], "little")
        if chunk == b"fmt " and size >= 14:
            block_align = int.from_bytes(data[pos + 20:pos + 22], "little")  # bytes per frame, all channels
        elif chunk == b"data":
            return size // block_align if block_align and size not in (0, 0xFFFFFFFF) else 0
        pos += 8 + size + (size & 1)  # RIFF chunks are padded to an even length
    return 0


def _decode_mono(f: sf.SoundFile, declared: int, settings: AudioSettings) -> tuple[np.ndarray, int]:
    """Decode `f` to float32, down-mix each block to mono (mean of channels) and count clipped source
    samples on the way. Returns (mono samples at the source rate, clipped sample count)."""
    limit = settings.max_duration_s * f.samplerate
    # One frame more than declared: a short read then proves the end was reached in one call.
    buf = np.empty((min(_BLOCK_FRAMES, declared + 1) if declared else _BLOCK_FRAMES, f.channels), np.float32)
    blocks, clipped, n = [], 0, 0
    while True:
        # read(out=...) decodes until libsndfile stops, where read(frames) would stop at the header's count.
        got = f.read(out=buf)
        # Clipping is counted on the source samples: resampling rings near a hard edge and can overshoot
        # full scale (or smooth a clipped plateau below it), so the resampled clip would misreport it.
        clipped += int(np.count_nonzero(np.abs(got) >= settings.clip_level))
        blocks.append(got[:, 0].copy() if f.channels == 1 else got.mean(axis=1, dtype=np.float32))
        n += len(got)
        if n > limit:
            raise MediaRejected(QuarantineReason.AUDIO_TOO_LONG,
                                f"decoded past max_duration_s {settings.max_duration_s} s at {f.samplerate} Hz; "
                                f"the header declares {declared} frames")
        if len(got) < len(buf):
            break
    return (blocks[0] if len(blocks) == 1 else np.concatenate(blocks)), clipped


def _frame_levels(samples: np.ndarray, frame: int) -> np.ndarray:
    """Mean square of each `frame`-sample frame; a shorter tail is one frame of its own length."""
    full = len(samples) // frame * frame
    squares = samples.astype(np.float64) ** 2
    levels = squares[:full].reshape(-1, frame).mean(axis=1)
    return np.append(levels, squares[full:].mean()) if full < len(samples) else levels


def prepare_audio(data: bytes, settings: AudioSettings = DEFAULT_MEDIA.audio) -> PreparedMedia:
    """One audio file -> PreparedMedia(kind="audio"): the mono clip at `settings.sample_rate` as 16-bit
    FLAC (or WAV), measured. Raises MediaRejected (media_too_large, corrupt_audio, empty_audio,
    audio_too_long) with a detail naming what was found."""
    if len(data) > settings.max_file_bytes:
        raise MediaRejected(QuarantineReason.MEDIA_TOO_LARGE,
                            f"{len(data)} bytes > max_file_bytes {settings.max_file_bytes}")
    try:
        f = sf.SoundFile(io.BytesIO(data))  # parses the header only
    except RuntimeError as err:  # soundfile.LibsndfileError
        raise MediaRejected(QuarantineReason.CORRUPT_AUDIO, f"unreadable header: {_sf_message(err)}") from None
    with f:
        source_rate, channels, container = f.samplerate, f.channels, f.format
        declared = f.frames if 0 < f.frames < _SF_COUNT_MAX else 0  # 0: the header has no usable count
        if container in ("WAV", "WAVEX"):
            declared = max(declared, _riff_declared_frames(data))
        if declared > settings.max_duration_s * source_rate:
            raise MediaRejected(QuarantineReason.AUDIO_TOO_LONG,
                                f"header declares {declared / source_rate:.1f} s ({declared} frames at "
                                f"{source_rate} Hz) > max_duration_s {settings.max_duration_s}")
        try:
            mono, clipped = _decode_mono(f, declared, settings)
        except RuntimeError as err:  # libsndfile stopped mid-stream (lost sync, failed seek, bad packet)
            raise MediaRejected(QuarantineReason.CORRUPT_AUDIO, f"decoding failed: {_sf_message(err)}") from None
    if len(mono) == 0:
        raise MediaRejected(QuarantineReason.EMPTY_AUDIO, f"no samples decoded ({container}, {len(data)} bytes)")
    if declared and len(mono) < declared and container not in _TRUSTED_COUNT_EXCEPT:
        raise MediaRejected(QuarantineReason.CORRUPT_AUDIO,
                            f"truncated: the header declares {declared} frames, the file holds {len(mono)}")

    rate = settings.sample_rate
    resampled = mono if source_rate == rate else soxr.resample(mono, source_rate, rate, quality=_RESAMPLE_QUALITY)
    # Quantise here rather than in libsndfile: its float -> PCM conversion wraps, not clips, by default,
    # and a resampled peak can overshoot 1.0.
    pcm = np.clip(np.rint(resampled * _PCM_SCALE), -32768, 32767).astype(np.int16)
    if len(pcm) == 0:  # 1 frame at 48 kHz is 1/3 of a sample at 16 kHz: soxr returns none
        raise MediaRejected(QuarantineReason.EMPTY_AUDIO,
                            f"{len(mono)} frames at {source_rate} Hz are no sample at {rate} Hz")
    stored = pcm.astype(np.float32) / np.float32(_PCM_SCALE)  # what decode_clip will return, sample for sample

    levels = _frame_levels(stored, max(1, round(rate * _FRAME_S)))
    rms = math.sqrt(float(np.mean(stored.astype(np.float64) ** 2)))
    measured = {
        "format": container,
        "duration_s": len(pcm) / rate,
        "sample_rate": rate,
        "source_sample_rate": source_rate,
        "channels": channels,
        "rms_dbfs": 20 * math.log10(rms) if rms > 0 else _FLOOR_DBFS,
        # compared as mean squares: level < silence_dbfs  <=>  ms < 10^(silence_dbfs / 10)
        "silent_fraction": float(np.mean(levels < 10 ** (settings.silence_dbfs / 10))),
        "clipped_fraction": clipped / (len(mono) * channels),
    }
    out = io.BytesIO()
    # libFLAC's output depends only on the samples and settings (no timestamps; the vendor string is fixed
    # per libFLAC version), so re-runs write the same bytes; 16-bit PCM WAV has no PEAK/date chunk either.
    sf.write(out, pcm, rate, format=settings.output.upper(), subtype="PCM_16")
    return PreparedMedia(kind="audio", mime=f"audio/{settings.output}", data=out.getvalue(), measured=measured)


def decode_clip(data: bytes) -> tuple[np.ndarray, int]:
    """A stored clip (prepare_audio's bytes) back to float32 mono samples and its sample rate."""
    samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    return (samples[:, 0] if samples.shape[1] == 1 else samples.mean(axis=1, dtype=np.float32)), rate


@lru_cache(maxsize=1)
def whisper_extractor() -> WhisperFeatureExtractor:
    """transformers' WhisperFeatureExtractor from its constructor defaults (80 mel bins, 16 kHz, 30 s chunks,
    n_fft 400, hop 160): built locally, never fetched from the Hub. Cached: the mel filter bank is computed
    once per process."""
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor()


@lru_cache(maxsize=1)
def _whisper_kernels():  # torch is imported here, not at module import: ingest workers never need it
    import torch

    fe = whisper_extractor()
    return torch, torch.from_numpy(np.ascontiguousarray(fe.mel_filters.T, np.float32)), torch.hann_window(fe.n_fft)


def whisper_features(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    """Whisper's log-mel input_features (80, 3000) float32 for one mono clip at 16 kHz, equal to
    `whisper_extractor()(samples, sampling_rate=16000).input_features[0]` (clips longer than 30 s are cut)."""
    fe = whisper_extractor()
    if sample_rate != fe.sampling_rate:
        raise ValueError(f"whisper_features needs {fe.sampling_rate} Hz audio, got {sample_rate} Hz")
    x = np.asarray(samples, dtype=np.float32)
    if x.ndim != 1:
        raise ValueError(f"whisper_features takes one mono clip (1-D), got shape {x.shape}")
    torch, mel, window = _whisper_kernels()
    n_fft, hop, n_out = fe.n_fft, fe.hop_length, fe.nb_max_frames
    x = x[:fe.n_samples]
    # Pad with zeros to a hop multiple at least n_fft past the clip: every frame touching a sample is then
    # computed exactly as on the 30 s padding (the centred STFT's reflected tail is zeros either way), and
    # each frame after it sees only zeros. A clip within n_fft of 30 s takes the full-length path.
    length = min(fe.n_samples, -(-(len(x) + n_fft) // hop) * hop)
    padded = np.zeros(length, np.float32)
    padded[:len(x)] = x
    # One thread: a clip's STFT is too small to split (a second thread gave 221 against 246 clips/s on a
    # quiet machine, and with the other core busy a 3 s clip took 86 ms instead of 2.2 ms: the pool waits).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        stft = torch.stft(torch.from_numpy(padded), n_fft, hop, window=window, return_complex=True)
        power = (stft[:, :n_out].abs() ** 2).contiguous()  # the extractor also drops the STFT's last frame
        # All-zero frames have mel power 0, clamped to 1e-10: log10 = -10, the value the rest is filled with.
        log_spec = torch.full((mel.shape[0], n_out), -10.0, dtype=torch.float32)
        log_spec[:, :power.shape[1]] = torch.clamp(mel @ power, min=1e-10).log10()
        log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)  # Whisper's 80 dB dynamic range
        return ((log_spec + 4.0) / 4.0).numpy()
    finally:
        torch.set_num_threads(threads)
