"""py3langid's model as a memory-mapped cache file (platform_assets/cleaning/language_model_cache.py):
built once, opened by later processes, rebuilt when damaged, never required (no writable place: the
model stays in memory), and the language step's answers the same bit for bit whichever way it loaded."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from platform_assets.cleaning import language_id, language_model_cache
from platform_assets.cleaning.language_model_cache import ModelArrays, cache_file, model_digest


@pytest.fixture(scope="module")
def reference() -> ModelArrays:
    """The arrays decompressed by py3langid's own loader, as the step used them before the cache."""
    return language_model_cache.decompress(language_model_cache.model_file())


def _the_file(root: Path) -> Path:
    return cache_file(root, model_digest(language_model_cache.model_file()))


def _assert_same(got: ModelArrays, want: ModelArrays) -> None:
    assert got.classes == want.classes and len(got.classes) == 142
    for name in ModelArrays.ARRAY_NAMES:
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert np.array_equal(a, b), name
        assert not a.flags.writeable, name  # one numba signature for the walk, mapped or not


def _refuse_decompress(monkeypatch) -> None:
    def refuse(model):
        raise AssertionError("decompressed although a valid cache file was there")

    monkeypatch.setattr(language_model_cache, "decompress", refuse)


def test_cold_build_writes_one_file_then_warm_opens_map_it(tmp_path, reference, monkeypatch):
    built = language_model_cache.load(tmp_path)
    assert built.source == "built"
    _assert_same(built, reference)
    assert [p.name for p in tmp_path.iterdir()] == [_the_file(tmp_path).name]  # no temporary file left
    _refuse_decompress(monkeypatch)
    warm = language_model_cache.load(tmp_path)
    assert warm.source == "mapped"
    _assert_same(warm, reference)


def test_the_cache_directory_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("PLATFORM_ASSETS_CACHE_DIR", str(tmp_path / "here"))
    assert language_model_cache.cache_root() == tmp_path / "here"
    monkeypatch.delenv("PLATFORM_ASSETS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert language_model_cache.cache_root() == tmp_path / "xdg" / "platform_assets"
    monkeypatch.delenv("XDG_CACHE_HOME")

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert language_model_cache.cache_root() is None  # nowhere to cache: decompressed in memory
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("PLATFORM_ASSETS_CACHE_DIR", "")  # set but empty: no cache at all
    assert language_model_cache.cache_root() is None
    assert language_model_cache.load().source == "memory"
    assert not (tmp_path / "xdg").exists()


_BUILDER = """
import json, sys, zlib
from pathlib import Path
from platform_assets.cleaning import language_model_cache as c
sys.stdin.read()  # every builder waits for the same go, then they race
arrays = c.load(Path(sys.argv[1]))
print(json.dumps({"source": arrays.source,
                  "crc": [zlib.crc32(getattr(arrays, n).data) for n in c.ModelArrays.ARRAY_NAMES]}))
"""


def test_concurrent_builders_all_get_the_same_arrays_and_leave_one_whole_file(tmp_path, reference):
    builders = [subprocess.Popen([sys.executable, "-c", _BUILDER, str(tmp_path)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True) for _ in range(3)]
    results = []
    for builder in builders:
        builder.stdin.close()  # all started before any goes
    for builder in builders:
        out = builder.stdout.read()
        assert builder.wait(timeout=120) == 0
        results.append(json.loads(out.splitlines()[-1]))
    want = [zlib.crc32(getattr(reference, n).data) for n in ModelArrays.ARRAY_NAMES]
    assert all(r["crc"] == want for r in results)
    assert all(r["source"] in ("built", "mapped") for r in results)
    assert any(r["source"] == "built" for r in results)  # the directory was empty: someone built it
    assert [p.name for p in tmp_path.iterdir()] == [_the_file(tmp_path).name]
    _assert_same(language_model_cache.load(tmp_path), reference)


def _damage_weights(path: Path) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(size - 4096)  # inside the prior or the weights, past the header
        byte = f.read(1)
        f.seek(size - 4096)
        f.write(bytes([byte[0] ^ 0x01]))


def _truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _garbage_header(path: Path) -> None:
    with open(path, "r+b") as f:
        f.seek(len(language_model_cache.MAGIC) + 8)
        f.write(b"{not json")


def _other_model(path: Path) -> None:
    """A file as another py3langid model would leave under this name (a hash prefix collision)."""
    with open(path, "r+b") as f:
        head = f.read(4096)
        at = head.index(b'"model_sha256": "') + len(b'"model_sha256": "')
        f.seek(at)
        f.write(b"0" if head[at:at + 1] != b"0" else b"1")


def _not_a_cache_file(path: Path) -> None:
    path.write_bytes(b"\0" * 100)


@pytest.mark.parametrize("damage", [_damage_weights, _truncate, _garbage_header, _other_model, _not_a_cache_file])
def test_a_damaged_cache_file_is_rebuilt_never_read(tmp_path, reference, damage, caplog):
    language_model_cache.load(tmp_path)
    path = _the_file(tmp_path)
    path.chmod(0o644)
    damage(path)
    rebuilt = language_model_cache.load(tmp_path)
    assert rebuilt.source == "built"
    _assert_same(rebuilt, reference)
    assert "rebuilding the language model cache" in caplog.text
    assert language_model_cache.load(tmp_path).source == "mapped"  # whole again


def test_a_killed_builders_temporary_file_is_removed_by_the_next_build(tmp_path, reference):
    final = _the_file(tmp_path)
    abandoned = tmp_path / f"{final.name}.killed.tmp"
    in_progress = tmp_path / f"{final.name}.writing.tmp"
    abandoned.write_bytes(b"half a model")
    in_progress.write_bytes(b"being written")
    old = time.time() - language_model_cache.ABANDONED_AFTER_S - 60
    os.utime(abandoned, (old, old))
    assert language_model_cache.load(tmp_path).source == "built"
    assert not abandoned.exists()
    assert in_progress.exists()  # recent: another builder may still be writing it
    assert final.exists()


def test_no_writable_cache_location_keeps_the_model_in_memory(tmp_path, reference, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    arrays = language_model_cache.load(blocker / "cache")  # mkdir fails whoever runs the test
    assert arrays.source == "memory"
    _assert_same(arrays, reference)
    assert "not usable" in caplog.text


def test_a_read_only_directory_with_a_valid_file_is_mapped(tmp_path, reference, monkeypatch):
    language_model_cache.load(tmp_path)
    tmp_path.chmod(0o555)
    try:
        _refuse_decompress(monkeypatch)
        arrays = language_model_cache.load(tmp_path)
    finally:
        tmp_path.chmod(0o755)
    assert arrays.source == "mapped"
    _assert_same(arrays, reference)


TEXTS = ["The library opens at nine in the morning and closes late on Thursdays.",
         "Die Bibliothek öffnet um neun Uhr morgens und schließt donnerstags spät.",
         "図書館は朝九時に開館し、木曜日は遅くまで開いています。", "Библиотека открывается в девять утра.",
         "x", "12 + 34", "ÉCRIT EN MAJUSCULES", "ok " * 700]


def _predict(monkeypatch, cache_dir: str) -> tuple[str, list]:
    monkeypatch.setenv("PLATFORM_ASSETS_CACHE_DIR", cache_dir)
    language_id.release_model()
    identifier = language_id.LanguageIdentifier()
    short = identifier.predict_many(TEXTS)  # one by one below _MATRIX_MIN samples
    batch = identifier.predict_many(TEXTS * 8)  # the score matrix
    return identifier._m.source, [short, batch]


def test_the_step_answers_the_same_bit_for_bit_mapped_or_in_memory(tmp_path, monkeypatch):
    try:
        memory_source, in_memory = _predict(monkeypatch, "")
        built_source, built = _predict(monkeypatch, str(tmp_path))
        mapped_source, mapped = _predict(monkeypatch, str(tmp_path))
    finally:
        language_id.release_model()
    assert (memory_source, built_source, mapped_source) == ("memory", "built", "mapped")
    assert in_memory == built == mapped
    assert {label for label, _ in in_memory[0]} >= {"en", "de", "ja", "ru", "und"}


def test_releasing_the_model_unmaps_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("PLATFORM_ASSETS_CACHE_DIR", str(tmp_path))
    language_id.release_model()
    path = str(_the_file(tmp_path))
    language_id.LanguageIdentifier().predict(TEXTS[0])
    assert path in Path("/proc/self/maps").read_text()
    assert language_id.release_model()
    gc.collect()
    assert path not in Path("/proc/self/maps").read_text()
