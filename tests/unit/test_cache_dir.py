"""The platform's cache folder, and numba's kernel cache named for the kernels' sources (cache_dir.py)."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from platform_assets.cache_dir import (
    KERNEL_DIR_PREFIX,
    STALE_KERNEL_DIR_S,
    kernel_cache_dir,
    kernel_sources_digest,
    remove_stale_kernel_dirs,
)

REPO = Path(__file__).resolve().parents[2]


def _package(tmp_path: Path) -> Path:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("@compiled\ndef f(): return 1\n")
    (pkg / "sub" / "b.py").write_text("@compiled\ndef g(): return 2\n")
    (pkg / "plain.py").write_text("def h(): return 3\n")
    return pkg


def test_digest_follows_kernel_modules_only(tmp_path):
    pkg = _package(tmp_path)
    first = kernel_sources_digest(pkg)
    assert first == kernel_sources_digest(pkg) and len(first) == 16
    (pkg / "plain.py").write_text("def h(): return 4\n")  # no kernel in it: the compiled code is the same
    assert kernel_sources_digest(pkg) == first
    (pkg / "sub" / "b.py").write_text("@compiled\ndef g(): return 5\n")  # a callee in another module
    changed = kernel_sources_digest(pkg)
    assert changed != first
    (pkg / "sub" / "b.py").rename(pkg / "b.py")  # the same bytes at another path: another module
    assert kernel_sources_digest(pkg) != changed


def test_kernel_cache_dir_respects_the_environment(tmp_path, monkeypatch):
    pkg = _package(tmp_path)
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("PLATFORM_ASSETS_CACHE_DIR", str(tmp_path / "cache"))
    assert kernel_cache_dir(pkg) == tmp_path / "cache" / f"{KERNEL_DIR_PREFIX}{kernel_sources_digest(pkg)}"
    monkeypatch.setenv("PLATFORM_ASSETS_CACHE_DIR", "")  # no platform cache: numba's default stands
    assert kernel_cache_dir(pkg) is None
    monkeypatch.setenv("PLATFORM_ASSETS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "mine"))  # the user's choice, used as it is
    assert kernel_cache_dir(pkg) is None


def test_stale_kernel_folders_are_removed_after_a_week_only(tmp_path):
    now = time.time()
    folders = {name: tmp_path / name for name in ("numba-current", "numba-old", "numba-recent", "other-old")}
    for path in folders.values():
        (path / "sub").mkdir(parents=True)
    for name in ("numba-old", "other-old", "numba-current"):
        os.utime(folders[name], (now - STALE_KERNEL_DIR_S - 60,) * 2)
    removed = remove_stale_kernel_dirs(tmp_path, keep="numba-current", now=now)
    assert removed == [folders["numba-old"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["numba-current", "numba-recent", "other-old"]
    assert remove_stale_kernel_dirs(tmp_path / "missing", keep="x") == []


def test_the_cleaning_kernels_cache_in_the_folder_of_their_sources(tmp_path):
    code = ("import numba; from platform_assets.cleaning.quality import kernels, line_stats; "
            "print(numba.config.CACHE_DIR); print(line_stats._kept_lines_at._cache._cache_path)")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["PLATFORM_ASSETS_CACHE_DIR"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    expected = tmp_path / f"{KERNEL_DIR_PREFIX}{kernel_sources_digest(REPO / 'platform_assets' / 'cleaning')}"
    assert out[0] == str(expected)
    assert out[1].startswith(str(expected) + os.sep)  # a kernel of another module than kernels.py too


CALLER = """
import sys
from pathlib import Path
import numba
from platform_assets.cache_dir import kernel_cache_dir
here = Path(__file__).resolve().parent
if sys.argv[1] == "ours":
    numba.config.CACHE_DIR = str(kernel_cache_dir(here))
sys.path.insert(0, str(here))
from callee import step

@numba.njit(cache=True)  # @compiled
def caller(x):
    return step(x) + 1

print(caller(1))
"""


@pytest.mark.parametrize("where", ["ours", "numba_default"])
def test_a_changed_callee_in_another_module_is_compiled_again(tmp_path, where):
    """numba's default cache (beside the sources) keeps the caller's machine code when only a callee
    in another file changes (numba#1833); the folder named for the sources does not."""
    pkg = tmp_path / "kernels"
    pkg.mkdir()
    (pkg / "caller.py").write_text(textwrap.dedent(CALLER))
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(PLATFORM_ASSETS_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(REPO))

    def run_with(step_body: str) -> str:
        (pkg / "callee.py").write_text(f"import numba\n\n@numba.njit(cache=True)  # @compiled\ndef step(x):\n"
                                       f"    return {step_body}\n")
        return subprocess.run([sys.executable, str(pkg / "caller.py"), where], env=env, capture_output=True,
                              text=True, check=True, timeout=120).stdout.strip()

    assert run_with("x * 10") == "11"
    assert run_with("x * 20") == ("21" if where == "ours" else "11")  # "11": the stale callee, numba's default
