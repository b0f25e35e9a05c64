"""Where the platform keeps files it derives once per machine and reuses (standard library only).

Two users: py3langid's model, uncompressed (cleaning/language_model_cache.py), and the cleaning steps'
compiled numba kernels (cleaning/quality/kernels.py, `kernel_cache_dir`).

Location: ``$PLATFORM_ASSETS_CACHE_DIR`` if set (set but empty: none), else
``$XDG_CACHE_HOME/platform_assets``, else ``~/.cache/platform_assets``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

CACHE_DIR_ENV = "PLATFORM_ASSETS_CACHE_DIR"
KERNEL_DIR_PREFIX = "numba-"
# A kernel folder of other sources is removed once nothing was written into it this long: a process of
# an older checkout still running may write a kernel it had not compiled yet, and a week is far past
# any stage's run.
STALE_KERNEL_DIR_S = 7 * 24 * 3600


def cache_root() -> Path | None:
    """The cache directory, or None where the environment turns the cache off (set, empty)."""
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured is not None:
        return Path(configured) if configured else None
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no home directory to be found (no $HOME, no passwd entry): no cache
            return None
    return Path(base) / "platform_assets"


def kernel_sources_digest(package: Path, marker: bytes = b"@compiled") -> str:
    """16 hex digits of the SHA-256 over every module under `package` that defines a compiled kernel
    (its path relative to `package`, its size and its bytes), in path order."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        data = path.read_bytes()
        if marker in data:
            name = path.relative_to(package).as_posix().encode()
            digest.update(len(name).to_bytes(4, "little") + name + len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()[:16]


def kernel_cache_dir(package: Path, root: Path | None = None) -> Path | None:
    """The folder for numba's cache of the kernels under `package`, named for their sources, or None
    (the user chose NUMBA_CACHE_DIR, or no cache root): numba's own choice then stands.

    Why not numba's default, beside the sources: its index checks only the decorated function's own
    file (mtime and size), so a kernel that calls a kernel of another module (line_stats ->
    kernels.repeated_ranges, ngram_kernels -> kernels) keeps the machine code of the callee it was
    compiled with after that callee changes (numba#1833, documented under "Cache invalidation"): a
    checkout after `git pull` could run old code. A folder per sources digest compiles afresh after
    any change to any kernel module (~7 CPU-s, once)."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return None
    root = cache_root() if root is None else root
    if root is None:
        return None
    path = root / f"{KERNEL_DIR_PREFIX}{kernel_sources_digest(package)}"
    if not path.exists():  # a new digest: first use after a change, when older folders may be left
        remove_stale_kernel_dirs(root, keep=path.name)
    return path


def remove_stale_kernel_dirs(root: Path, keep: str, now: float | None = None) -> list[Path]:
    """Remove the kernel folders of other sources untouched for STALE_KERNEL_DIR_S; return them.
    Best effort: a folder another process removes first, or one not ours to remove, is left."""
    now = time.time() if now is None else now
    removed = []
    try:
        candidates = [p for p in root.iterdir() if p.name.startswith(KERNEL_DIR_PREFIX) and p.name != keep]
    except OSError:  # no root yet, or unreadable
        return removed
    for path in candidates:
        try:
            if now - path.stat().st_mtime > STALE_KERNEL_DIR_S:
                shutil.rmtree(path)
                removed.append(path)
        except OSError:
            continue
    return removed
