"""The shape of a packed shard set's `index.json`: every key the readers and `verify_shards` rely on,
with its JSON type, checked once when the index is loaded.

The readers index into the parsed JSON directly (`shard["files"]["data"]["path"]`); without this, a
damaged or hand-edited index (found by fuzzing: a list where an object belongs, a count that is a
string) surfaced as a KeyError or TypeError from deep inside a reader, naming neither the file nor the
key. Now it is a ShardSetError naming both.
"""

from __future__ import annotations

from typing import Any

from platform_assets.packing.samples import ShardSetError

TOKEN_DTYPES = ("uint16", "uint32")


def _is_count(value: Any) -> bool:
    # bool is an int subclass: a count written as true/false is still wrong
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _need(obj: dict, key: str, where: str, kind: type | tuple[type, ...], what: str) -> Any:
    value = obj.get(key)
    ok = _is_count(value) if kind is int else isinstance(value, kind) and not (kind is not bool
                                                                                 and isinstance(value, bool))
    if not ok:
        raise ShardSetError(f"{where}.{key}: expected {what}, got {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def check_index_shape(index: Any, path: str) -> None:
    """Raise ShardSetError (naming `path` and the key) unless `index` has the shape readers rely on."""
    if not isinstance(index, dict):
        raise ShardSetError(f"{path}: expected a JSON object, got {type(index).__name__}")
    _need(index, "format", path, str, "a format name")
    seq_len = _need(index, "seq_len", path, int, "an int > 0")
    if seq_len == 0:
        raise ShardSetError(f"{path}.seq_len: expected an int > 0, got 0")
    if index.get("token_dtype") not in TOKEN_DTYPES:
        raise ShardSetError(f"{path}.token_dtype: expected one of {list(TOKEN_DTYPES)}, "
                            f"got {_short(index.get('token_dtype'))}")
    _need(index, "has_loss_mask", path, bool, "true or false")
    totals = index.get("totals", {})
    if not isinstance(totals, dict):
        raise ShardSetError(f"{path}.totals: expected an object, got {_short(totals)}")
    for key in ("samples", "tokens"):
        if key in totals:
            _need(totals, key, f"{path}.totals", int, "a count")
    for i, entry in enumerate(_need(index, "sets", path, list, "a list of sets")):
        where = f"{path}: sets[{i}]"
        if not isinstance(entry, dict):
            raise ShardSetError(f"{where}: expected an object, got {_short(entry)}")
        for key in ("split", "source"):
            _need(entry, key, where, str, "a name")
        for key in ("samples", "tokens"):
            _need(entry, key, where, int, "a count")
        for j, shard in enumerate(_need(entry, "shards", where, list, "a list of shards")):
            _check_shard(shard, f"{where}.shards[{j}]")


def _check_shard(shard: Any, where: str) -> None:
    if not isinstance(shard, dict):
        raise ShardSetError(f"{where}: expected an object, got {_short(shard)}")
    _need(shard, "name", where, str, "a name")
    for key in ("samples", "tokens", "bytes"):
        _need(shard, key, where, int, "a count")
    files = _need(shard, "files", where, dict, "an object of files by role")
    for role, info in files.items():
        w = f"{where}.files.{role}"
        if not isinstance(info, dict):
            raise ShardSetError(f"{w}: expected an object, got {_short(info)}")
        _need(info, "path", w, str, "a relative path")
        _need(info, "bytes", w, int, "a count")
        _need(info, "sha256", w, str, "a hex digest")
        if "inline" in info and not isinstance(info["inline"], str):
            raise ShardSetError(f"{w}.inline: expected base64 text, got {_short(info['inline'])}")
