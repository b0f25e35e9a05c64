"""Running a registered benchmark end to end from the smoke tests."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root holds benchmarks/

from benchmarks.harness import get_benchmark, run_benchmark  # noqa: E402


def figures(result: dict) -> dict[str, dict]:
    """The summary rows of a run, by metric."""
    return {row["metric"]: row for row in result["summary"]}


def run(name: str, corpus: Path, work: Path) -> dict:
    """One round of each side; the harness must leave no run directory behind."""
    result = run_benchmark(get_benchmark(name), corpus, 1, work)
    assert list(work.iterdir()) == []  # run directories are cleaned up
    return result
