import io

import pyarrow as pa
import pytest

from platform_assets.ingest.file_io import block_lines, iter_line_blocks, iter_lines


def _stream(data: bytes) -> pa.NativeFile:
    return pa.PythonFile(io.BytesIO(data), mode="r")


def test_lines_are_numbered_across_blocks_and_crlf_is_stripped():
    data = b"".join(f"line {i}\r\n".encode() for i in range(1, 1001))
    got = list(iter_lines(_stream(data), max_line_bytes=100))
    assert [n for n, _, _ in got] == list(range(1, 1001))
    assert got[0][1] == b"line 1" and got[-1][1] == b"line 1000"


def test_blocks_hold_whole_lines_only():
    data = b"".join(b"x" * (i % 50) + b"\n" for i in range(5000))
    blocks = list(iter_line_blocks(_stream(data), max_line_bytes=100, block_bytes=1000))
    assert len(blocks) > 10
    assert all(b.endswith(b"\n") for _, b, _ in blocks)
    assert b"".join(b for _, b, _ in blocks) == data
    firsts = [first for first, _, _ in blocks]
    counts = [n for _, _, n in blocks]
    assert firsts == [1 + sum(counts[:i]) for i in range(len(blocks))]


def test_last_line_without_newline():
    assert [line for _, line, _ in iter_lines(_stream(b"a\nb"), 10)] == [b"a", b"b"]
    assert block_lines(b"a\nb\n") == [b"a", b"b"]


def test_overlong_line_is_reported_alone_with_its_length_and_others_survive():
    huge = b"y" * 3_000_000  # a line far beyond the bound, spanning several 4 MiB reads' worth of logic
    data = b"short one\n" + huge + b"\nshort two\n"
    got = list(iter_lines(_stream(data), max_line_bytes=1000))
    assert got == [(1, b"short one", 9), (2, None, len(huge)), (3, b"short two", 9)]


def test_overlong_final_line_without_newline():
    data = b"ok\n" + b"z" * 50_000
    got = list(iter_lines(_stream(data), max_line_bytes=1000))
    assert got == [(1, b"ok", 2), (2, None, 50_000)]


def test_overlong_line_longer_than_read_chunk_is_skipped_with_bounded_memory():
    # 9 MiB in one line: bigger than the 4 MiB read chunk, so the skipping state carries over reads
    data = b"first\n" + b"q" * (9 * 2**20) + b"\nlast\n"
    got = list(iter_lines(_stream(data), max_line_bytes=2**20))
    assert got == [(1, b"first", 5), (2, None, 9 * 2**20), (3, b"last", 4)]


def _mapped(tmp_path, data: bytes):
    import mmap

    path = tmp_path / "f.jsonl"
    path.write_bytes(data)
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


@pytest.mark.parametrize("data", [
    b"".join(b"x" * (i % 50) + b"\n" for i in range(5000)),
    b"a\nbb\nccc",  # no final newline
    b"short\n" + b"L" * 5000 + b"\nafter\n",  # a line longer than a block but within the bound
    b"short\n" + b"H" * 50_000 + b"\nafter",  # an overlong line
    b"\n\n\n",
])
def test_mapped_blocks_give_the_same_lines_as_streamed_blocks(tmp_path, data):
    from platform_assets.ingest.file_io import MappedLineBlocks

    def lines(blocks):
        out = []
        for first, block, count in blocks:
            if block is None:
                out.append((first, None, count))
            else:
                got = block_lines(bytes(block))
                assert len(got) == count
                out += [(first + i, line) for i, line in enumerate(got)]
        return out

    streamed = lines(iter_line_blocks(_stream(data), max_line_bytes=20_000, block_bytes=1000))
    mapped = lines(MappedLineBlocks(_mapped(tmp_path, data), max_line_bytes=20_000, block_bytes=1000))
    assert mapped == streamed
