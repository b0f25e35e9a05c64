"""The media rooms: images (Pillow), PDF pages (PyMuPDF + Tesseract) and audio (soundfile + soxr).

Dagster-free and ingest-free: each room takes the bytes of one file and its settings and returns what
a document stores of it (`PreparedMedia`: the normalised bytes plus what was measured), or raises
`MediaRejected` with a stable quarantine reason. Work per file is bounded by the settings (pixels,
pages, seconds) before anything large is decoded.
"""
