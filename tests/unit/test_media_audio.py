"""The audio room: decoding, limits decided from the header, measurements, stored bytes, Whisper features.

Every fixture is synthesised here with numpy and written by soundfile (libsndfile), so nothing depends on
files outside the repository and nothing is downloaded (tests/conftest.py sets HF_HUB_OFFLINE=1).
"""

import hashlib
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr

from platform_assets.media import audio
from platform_assets.media.audio import decode_clip, prepare_audio, whisper_extractor, whisper_features
from platform_assets.media.errors import MediaRejected
from platform_assets.media.settings import AudioSettings
from platform_assets.schema import QuarantineReason

REPO = Path(__file__).resolve().parents[2]


def tone(freq: float, seconds: float, rate: int, amplitude: float = 0.5, channels: int = 1) -> np.ndarray:
    t = np.arange(round(seconds * rate)) / rate
    mono = (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)
    return mono if channels == 1 else np.stack([mono] * channels, axis=1)


def encode(samples: np.ndarray, rate: int, fmt: str = "WAV", subtype: str = "PCM_16") -> bytes:
    out = io.BytesIO()
    sf.write(out, samples, rate, format=fmt, subtype=subtype)
    return out.getvalue()


def peak_hz(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[np.argmax(spectrum)])


def rejected(data: bytes, **settings) -> MediaRejected:
    with pytest.raises(MediaRejected) as info:
        prepare_audio(data, AudioSettings(**settings))
    return info.value


def test_stereo_44k_wav_becomes_mono_16k_flac():
    # 1.5 s of a 1 kHz sine on both channels of a 44.1 kHz WAV: 66150 source frames -> 24000 at 16 kHz.
    prepared = prepare_audio(encode(tone(1000, 1.5, 44_100, channels=2), 44_100))
    assert (prepared.kind, prepared.mime) == ("audio", "audio/flac")
    assert prepared.data[:4] == b"fLaC"
    m = prepared.measured
    assert (m["format"], m["channels"], m["source_sample_rate"], m["sample_rate"]) == ("WAV", 2, 44_100, 16_000)
    assert abs(m["duration_s"] - 1.5) <= 1 / 16_000  # within one stored sample
    samples, rate = decode_clip(prepared.data)
    assert samples.dtype == np.float32 and samples.ndim == 1 and rate == 16_000
    assert len(samples) == round(m["duration_s"] * rate)
    # FFT bins are 16000 / 24000 = 0.67 Hz wide: the resampler kept the tone where it was.
    assert abs(peak_hz(samples, rate) - 1000) < 1.0
    # A 0.5-amplitude sine is 20 log10(0.5 / sqrt 2) = -9.03 dBFS; two equal channels average to the same.
    assert m["rms_dbfs"] == pytest.approx(-9.03, abs=0.05)
    assert m["silent_fraction"] == 0.0 and m["clipped_fraction"] == 0.0


@pytest.mark.parametrize(
    ("fmt", "subtype", "tolerance_db"),
    [
        ("WAV", "PCM_U8", 0.1),  # 8-bit: ~48 dB of quantisation noise under a -9 dB tone
        ("WAV", "PCM_24", 0.01),
        ("WAV", "FLOAT", 0.01),
        ("FLAC", "PCM_16", 0.01),
        ("OGG", "VORBIS", 0.3),  # lossy: the level moves a little, the pitch does not
        ("MP3", "MPEG_LAYER_III", 0.3),  # mpg123 trims the encoder's delay and padding: the duration holds
    ],
)
def test_source_encodings_decode(fmt, subtype, tolerance_db):
    rate = 22_050
    prepared = prepare_audio(encode(tone(440, 1.0, rate, channels=2), rate, fmt, subtype))
    m = prepared.measured
    assert (m["format"], m["channels"], m["source_sample_rate"]) == (fmt, 2, rate)
    assert abs(m["duration_s"] - 1.0) <= 1 / 16_000
    assert m["rms_dbfs"] == pytest.approx(-9.03, abs=tolerance_db)
    samples, rate_out = decode_clip(prepared.data)
    assert abs(peak_hz(samples, rate_out) - 440) < 2.0


@pytest.mark.parametrize(
    "data",
    [
        b"RIFF\x24\x08\x00\x00WAVE" + np.random.default_rng(0).bytes(2048),  # a RIFF/WAVE signature, then noise
        np.random.default_rng(1).bytes(4096),
        b"",
    ],
)
def test_unreadable_headers_are_corrupt_audio(data):
    with pytest.raises(sf.LibsndfileError) as opened:
        sf.info(io.BytesIO(data))
    err = rejected(data)
    assert err.reason == QuarantineReason.CORRUPT_AUDIO
    # The detail names what libsndfile said ("Format not recognised.", "No 'data' chunk marker.", ...) but not
    # the BytesIO's memory address that soundfile's str() carries: re-runs must write the same quarantine rows.
    assert err.detail == f"unreadable header: {opened.value.error_string}"
    assert "0x" not in err.detail


def test_header_only_wav_is_empty_audio():
    data = encode(np.zeros(0, np.float32), 16_000)
    assert len(data) == 44  # RIFF + fmt + an empty data chunk: no frames at all
    assert rejected(data).reason == QuarantineReason.EMPTY_AUDIO
    # One frame at 48 kHz resamples to no sample at 16 kHz: nothing to store either.
    err = rejected(encode(np.full(1, 0.5, np.float32), 48_000))
    assert err.reason == QuarantineReason.EMPTY_AUDIO and "1 frames at 48000 Hz" in err.detail


def test_too_long_is_decided_from_the_header(monkeypatch):
    data = encode(tone(440, 3.0, 16_000), 16_000)
    # Any decoding would be a bug here: the header's 48000 frames at 16 kHz (3 s) already exceed 1 s.
    monkeypatch.setattr(sf.SoundFile, "read", lambda *a, **k: pytest.fail("decoded a clip the header rejects"))
    err = rejected(data, max_duration_s=1.0)
    assert err.reason == QuarantineReason.AUDIO_TOO_LONG
    assert "header declares 3.0 s (48000 frames at 16000 Hz)" in err.detail


def test_truncated_files_keep_their_declared_length():
    wav = encode(tone(440, 3.0, 16_000), 16_000)
    flac = encode(tone(440, 3.0, 16_000), 16_000, "FLAC")
    # 0.1 s of data left under a header that declares 3 s: still too long, not corrupt. libsndfile would
    # clamp the WAV's count to the 1600 frames present; the room reads the RIFF data chunk's size itself.
    for cut in (wav[:44 + 3200], flac[:len(flac) // 3]):
        assert rejected(cut, max_duration_s=1.0).reason == QuarantineReason.AUDIO_TOO_LONG
    # Within the limit, the missing part makes it corrupt: a shorter clip would no longer match its transcript.
    err = rejected(wav[:44 + 3200])
    assert err.reason == QuarantineReason.CORRUPT_AUDIO and "declares 48000 frames, the file holds 1600" in err.detail
    # A truncated FLAC stream fails inside libFLAC after decoding part of it.
    err = rejected(flac[:len(flac) // 3])
    assert err.reason == QuarantineReason.CORRUPT_AUDIO and err.detail.startswith("decoding failed")


def test_stream_without_frame_count_stops_at_the_limit(monkeypatch):
    # A container with no usable count (declared = 0, as libsndfile reports for some Ogg/MP3) is decoded in
    # blocks; 10 s at 16 kHz under a 1 s limit must stop after the block that crosses 16000 frames.
    monkeypatch.setattr(audio, "_BLOCK_FRAMES", 4096)
    with sf.SoundFile(io.BytesIO(encode(tone(440, 10.0, 16_000), 16_000))) as f:
        with pytest.raises(MediaRejected) as info:
            audio._decode_mono(f, 0, AudioSettings(max_duration_s=1.0))
        assert info.value.reason == QuarantineReason.AUDIO_TOO_LONG
        assert f.tell() == 4 * 4096  # 16384 frames read of 160000: one block past the limit, no more


def test_silence_measures():
    silent = prepare_audio(encode(np.zeros(16_000, np.float32), 16_000)).measured
    assert silent["silent_fraction"] == 1.0 and silent["rms_dbfs"] == -120.0  # the floor for digital silence
    # 1 s of a -9 dB tone, then 1 s of digital silence: 50 loud and 50 silent 20 ms frames. The resampler's
    # ringing at the edge may lift one silent frame above -50 dBFS, hence the tolerance of 2 frames in 100.
    half = np.concatenate([tone(440, 1.0, 44_100), np.zeros(44_100, np.float32)])
    measured = prepare_audio(encode(half, 44_100, subtype="FLOAT")).measured
    assert measured["silent_fraction"] == pytest.approx(0.5, abs=0.02)


def test_clipping_is_measured_on_the_source():
    # A full-scale 100 Hz square wave: every sample at +-1.0, i.e. at or above clip_level 0.999. After resampling
    # its edges ring (Gibbs) and its plateaus no longer sit at full scale: measuring there would be wrong.
    square = np.sign(np.sin(2 * np.pi * 100 * np.arange(44_100) / 44_100) + 1e-9).astype(np.float32)
    loud = prepare_audio(encode(square, 44_100, subtype="FLOAT"))
    assert loud.measured["clipped_fraction"] == 1.0
    # The resampled square overshoots full scale; quantising clips it to the int16 range (libsndfile's own float
    # conversion would wrap +1.05 round to -0.95). The stored clip is the clipped resample, within half an LSB.
    resampled = soxr.resample(square, 44_100, 16_000, quality="HQ")
    assert resampled.max() > 1.0
    samples, _ = decode_clip(loud.data)
    assert np.abs(samples - np.clip(resampled, -1.0, 32767 / 32768)).max() <= 0.5 / 32768 + 1e-7
    quiet = prepare_audio(encode(tone(440, 1.0, 44_100, amplitude=0.1), 44_100))
    assert quiet.measured["clipped_fraction"] == 0.0


def test_oversize_rejected_before_opening():
    # Random bytes would be corrupt_audio if they were opened; the size check comes first.
    err = rejected(np.random.default_rng(2).bytes(2048), max_file_bytes=1024)
    assert err.reason == QuarantineReason.MEDIA_TOO_LARGE and "2048 bytes > max_file_bytes 1024" in err.detail


def test_output_is_byte_identical_across_runs_and_processes(tmp_path):
    source = encode(tone(440, 2.0, 48_000, channels=2), 48_000)
    first = prepare_audio(source)
    assert prepare_audio(source).data == first.data
    # Another process: other allocations, other addresses, libFLAC initialised afresh.
    (tmp_path / "in.wav").write_bytes(source)
    code = ("import sys, hashlib; from platform_assets.media.audio import prepare_audio; "
            "print(hashlib.sha256(prepare_audio(open(sys.argv[1], 'rb').read()).data).hexdigest())")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "in.wav")], capture_output=True, text=True,
                         check=True, env=env, cwd=REPO)
    assert out.stdout.strip() == hashlib.sha256(first.data).hexdigest()


def test_wav_output_and_clip_round_trip():
    source = encode(tone(300, 0.5, 16_000, amplitude=0.3), 16_000, subtype="FLOAT")
    flac = prepare_audio(source)
    wav = prepare_audio(source, AudioSettings(output="wav"))
    assert wav.mime == "audio/wav" and wav.data[:4] == b"RIFF" and len(wav.data) == 44 + 2 * 8000
    # Both encodings hold the same 16-bit samples, and decode_clip returns exactly int16 / 32768.
    pcm, _ = sf.read(io.BytesIO(flac.data), dtype="int16")
    for stored in (flac, wav):
        samples, rate = decode_clip(stored.data)
        assert rate == 16_000 and np.array_equal(samples, pcm.astype(np.float32) / 32768)
    # A stored clip is already mono 16 kHz 16-bit: preparing it again changes nothing.
    assert prepare_audio(flac.data).data == flac.data


def test_whisper_extractor_is_local_and_cached():
    fe = whisper_extractor()
    assert fe is whisper_extractor()
    assert (fe.feature_size, fe.sampling_rate, fe.n_samples) == (80, 16_000, 480_000)


@pytest.mark.parametrize(
    "seconds",
    [
        0.005,  # shorter than one n_fft window (80 samples)
        2.5,  # the usual case: 250 of 3000 frames computed, the rest filled
        30.0 - 0.00625,  # 100 samples short of 30 s: within n_fft of the end, takes the full-length path
        31.0,  # cut to 30 s, as the extractor does
    ],
)
def test_whisper_features_match_the_extractor(seconds):
    rng = np.random.default_rng(3)
    noise = rng.normal(0, 0.01, round(seconds * 16_000)).astype(np.float32)
    speechy = tone(220, seconds, 16_000, amplitude=0.2) + noise
    features = whisper_features(speechy, 16_000)
    reference = whisper_extractor()(speechy, sampling_rate=16_000, return_tensors="np").input_features[0]
    assert features.shape == (80, 3000) and features.dtype == np.float32
    # The extractor documents 1e-5 agreement between its own numpy and torch paths; this one matches it to that.
    np.testing.assert_allclose(features, reference, atol=1e-5, rtol=0)


def test_whisper_features_of_a_stored_clip_and_of_silence():
    samples, rate = decode_clip(prepare_audio(encode(tone(700, 1.2, 22_050, channels=2), 22_050)).data)
    reference = whisper_extractor()(samples, sampling_rate=rate, return_tensors="np").input_features[0]
    np.testing.assert_allclose(whisper_features(samples, rate), reference, atol=1e-5, rtol=0)
    # All frames silent: log10(1e-10) = -10 everywhere, scaled (-10 + 4) / 4 = -1.5.
    assert np.all(whisper_features(np.zeros(16_000, np.float32), 16_000) == -1.5)


def test_whisper_features_refuse_other_rates_and_shapes():
    with pytest.raises(ValueError, match="16000 Hz"):
        whisper_features(np.zeros(22_050, np.float32), 22_050)
    with pytest.raises(ValueError, match="mono"):
        whisper_features(np.zeros((16_000, 2), np.float32), 16_000)
