"""Why a media file is rejected: a stable reason (schema.QuarantineReason) and a detail naming what was found."""

from __future__ import annotations


class MediaRejected(Exception):
    """A media file (or one page of it) that cannot become a document. `reason` is a
    schema.QuarantineReason value; `detail` says what was found (sizes, limits, the decoder's message)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
