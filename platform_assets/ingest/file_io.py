"""Byte-level helpers shared by the file readers: opening (with decompression), sniffing, lines."""

from __future__ import annotations

import io
import mmap
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

READ_CHUNK = 4 * 2**20  # 4 MiB reads: large enough to amortise per-call cost, small for memory
SNIFF_BYTES = 8192
_COMPRESSION = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".lz4": "lz4"}


def compression_of(path: str) -> str | None:
    for ext, codec in _COMPRESSION.items():
        if path.endswith(ext):
            return codec
    return None


def open_stream(fs: pafs.FileSystem, path: str) -> pa.NativeFile:
    """A sequential byte stream, transparently decompressed by extension (.gz, .bz2, .zst, .lz4)."""
    # explicit, not pyarrow's default compression="detect": one mapping decides for every reader
    return fs.open_input_stream(path, compression=compression_of(path))


def looks_binary(head: bytes) -> bool:
    """A NUL byte in the first 8 KiB: how git and grep tell binary from text. UTF-16 text also has
    NULs; it is declared with `encoding:` and decoded before this check would matter."""
    return b"\x00" in head[:SNIFF_BYTES]


BLOCK_BYTES = 16 * 2**20  # whole-line blocks handed to the Arrow JSON parser


def iter_line_blocks(
    stream: pa.NativeFile, max_line_bytes: int, block_bytes: int = BLOCK_BYTES
) -> Iterator[tuple[int, bytes | None, int]]:
    """Yield (number of the block's first line, block of whole lines, number of lines in it).

    A block holds complete lines (the last one newline-terminated unless it ends the file) and is
    at most about `block_bytes`. A line longer than `max_line_bytes` comes alone as
    (n, None, its length in bytes), after being skipped without holding more than
    `max_line_bytes + READ_CHUNK` bytes: a 50 MB single-line file cannot grow a worker's memory
    with it.
    """
    lineno = 1
    pending = b""
    skipping = 0  # bytes of an overlong line seen so far; 0 when not skipping
    while True:
        # top the pending partial line up to about one block (at least a quarter block per read)
        chunk = stream.read(max(block_bytes - len(pending), block_bytes // 4))
        if not chunk:
            break
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                skipping += len(chunk)
                continue
            yield lineno, None, skipping + nl
            lineno, skipping, chunk = lineno + 1, 0, chunk[nl + 1 :]
        buf = pending + chunk if pending else chunk
        cut = buf.rfind(b"\n") + 1
        block, pending = buf[:cut], buf[cut:]
        if block:
            n_lines = block.count(b"\n")
            yield from _split_overlong(block, lineno, max_line_bytes, n_lines)
            lineno += n_lines
        if len(pending) > max_line_bytes:
            skipping, pending = len(pending), b""
    if skipping:
        yield lineno, None, skipping
    elif pending:
        yield from _split_overlong(pending, lineno, max_line_bytes, pending.count(b"\n") + 1)


class MappedLineBlocks:
    """`iter_line_blocks` over a memory-mapped file, with zero-copy blocks.

    Reading a local file through a stream copies every byte twice more (into the read buffer, then
    into `pending + chunk`) and touches fresh pages each time; slicing the map costs nothing and the
    Arrow parser reads straight from the page cache.

    The pages of blocks already read count in this process's RSS until dropped: without dropping
    them, reading a 1.1 GB file left ~1.1 GB resident (peak RSS grew with the file, not the block).
    Iterating drops them every `block_bytes`; a reader that has copied a block out (parsed it) calls
    `release_read()` to drop its pages before the block's documents are written: ingest's peak on the
    pipeline_scaling 16x text source (base 32 MB, two groups of ~6 MB files at once) 345-349 ->
    338-339 MB. MADV_DONTNEED on a read-only file mapping only unmaps them: a later access refaults
    the same bytes from the page cache.
    """

    def __init__(self, mapped: mmap.mmap, max_line_bytes: int, block_bytes: int = BLOCK_BYTES):
        self._mapped = mapped
        self._max_line_bytes = max_line_bytes
        self._block_bytes = block_bytes
        self._released = 0  # pages before this offset were handed back
        self._read_end = 0  # the end of the last block yielded

    def release_read(self) -> None:
        """Hand back the whole pages of every block yielded so far."""
        done = self._read_end - self._read_end % mmap.PAGESIZE
        if done > self._released:
            self._mapped.madvise(mmap.MADV_DONTNEED, self._released, done - self._released)
            self._released = done

    def __iter__(self) -> Iterator[tuple[int, memoryview | bytes | None, int]]:
        mapped, max_line_bytes, block_bytes = self._mapped, self._max_line_bytes, self._block_bytes
        size = len(mapped)
        view = memoryview(mapped)
        counter = NewlineCounter()
        pos, lineno = 0, 1
        while pos < size:
            if pos - self._released >= block_bytes:
                self.release_read()
            end = min(pos + block_bytes, size)
            if end < size:
                cut = mapped.rfind(b"\n", pos, end)
                if cut < 0:  # one line longer than a block
                    nl = mapped.find(b"\n", pos)
                    line_end = nl if nl >= 0 else size
                    if line_end - pos > max_line_bytes:
                        self._read_end = line_end
                        yield lineno, None, line_end - pos
                        pos, lineno = line_end + 1, lineno + 1
                        continue
                    cut = line_end
                end = min(cut + 1, size)
            block = view[pos:end]
            newlines = counter.count(block)
            n_lines = newlines + (0 if view[end - 1] == 10 else 1)
            self._read_end = end
            if len(block) > max_line_bytes:  # only when max_line_bytes < block_bytes: find the long line
                yield from _split_overlong(bytes(block), lineno, max_line_bytes, n_lines)
            else:
                yield lineno, block, n_lines
            pos, lineno = end, lineno + newlines


class NewlineCounter:
    """Counts b"\n" in a buffer without copying it. `np.frombuffer(b) == 10` would allocate a fresh
    mask as large as the buffer for each block: 16 MiB of new pages to fault in and zero per block
    (~5% of the ingest's CPU). A reused 1 MiB mask stays in cache."""

    PIECE = 2**20

    def __init__(self) -> None:
        self._mask = np.empty(self.PIECE, np.bool_)

    def count(self, buffer) -> int:
        data = np.frombuffer(buffer, np.uint8)
        total = 0
        for lo in range(0, len(data), self.PIECE):
            piece = data[lo : lo + self.PIECE]
            total += int(np.count_nonzero(np.equal(piece, 10, out=self._mask[: len(piece)])))
        return total


def _line_count(block: bytes) -> int:
    return block.count(b"\n") + (0 if block.endswith(b"\n") else 1)


def _split_overlong(
    block: bytes, lineno: int, max_line_bytes: int, n_lines: int
) -> Iterator[tuple[int, bytes | None, int]]:
    if len(block) <= max_line_bytes:
        yield lineno, block, n_lines
        return
    # rare: the block holds a line over the bound; cut it out so that it is reported alone
    lines = block.split(b"\n")
    keep_from = 0
    for i, line in enumerate(lines):
        if len(line) > max_line_bytes:
            if keep_from < i:
                yield lineno + keep_from, b"\n".join(lines[keep_from:i]) + b"\n", i - keep_from
            yield lineno + i, None, len(line)
            keep_from = i + 1
    rest = b"\n".join(lines[keep_from:])
    if rest:
        yield lineno + keep_from, rest, _line_count(rest)


def block_lines(block: bytes) -> list[bytes]:
    """A block's lines without newlines (a final newline does not start an extra line)."""
    lines = block.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [line[:-1] if line.endswith(b"\r") else line for line in lines]


def iter_lines(stream: pa.NativeFile, max_line_bytes: int) -> Iterator[tuple[int, bytes | None, int]]:
    """Yield (1-based line number, line without its newline, length); overlong lines as None."""
    for first, block, count in iter_line_blocks(stream, max_line_bytes):
        if block is None:
            yield first, None, count
            continue
        for i, line in enumerate(block_lines(block)):
            yield first + i, line, len(line)


class RawStreamIO(io.RawIOBase):
    """Adapts a pyarrow stream to Python's io stack (for csv.reader via TextIOWrapper)."""

    def __init__(self, stream: pa.NativeFile):
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self._stream.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        return n

    def close(self) -> None:
        self._stream.close()
        super().close()
