"""A batch's text column while it travels from one document step to the next as Python strings.

Every document step reads the texts as Python strings, and the steps that rewrite them (normalize,
C4's line removal, redaction) produce Python strings. Handing the strings on, and taking the column
out of the batch meanwhile, spares each step the two copies of the whole column it would otherwise
make: encoding the strings back into an Arrow column after a rewrite (normalize rewrites some text in
almost every batch, so it re-encoded all of them), and copying the column's bytes into the kept batch
when it removes documents (language). The column is built once, from the last step's strings, for
the documents that survived: on the cleaning_stage benchmark's 27 MB batch those copies were 0.06-0.23
of ~1.1-1.4 CPU-s (each a fresh 26 MB allocation, page faults included), the one build left is of 4 MB.

The contract (CleaningPipeline.process_batch, DocumentStep.run): a kept batch without its `text`
column always comes with its :class:`HandedTexts`, and a step is handed one only if it takes texts
(`Step.takes_texts`); the pipeline's last step always returns its batch whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True, slots=True)
class HandedTexts:
    """The text column of a batch whose `text` column was taken out: one entry per row, in order."""

    strings: list[str | None]
    sizes: list[int]
    """UTF-8 bytes of every string (what `steps.text_bytes` gives for the column)."""
    field: pa.Field
    index: int
    """Where the column stood in the batch's schema, and stands again when attached."""

    def rewritten(self, strings: list[str | None], rows: list[int]) -> HandedTexts:
        """These texts with `strings` in their place, of which `rows` differ (their sizes measured)."""
        sizes = list(self.sizes)
        for row in rows:
            sizes[row] = utf8_size(strings[row] or "")
        return HandedTexts(strings, sizes, self.field, self.index)


def attach_texts(batch: pa.RecordBatch, strings: list[str | None], field: pa.Field, index: int) -> pa.RecordBatch:
    """`batch` (without a text column) with `strings` as its text column `field`, at `index`."""
    return batch.add_column(index, field, pa.array(strings, field.type))


def utf8_size(text: str) -> int:
    """UTF-8 bytes of `text`: its length where it is ASCII (an O(1) test in CPython)."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))
