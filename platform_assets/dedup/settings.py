"""Config of the dedup stage: the `dedup:` key of the pipeline config.

Defaults are the ones measured against exact Jaccard ground truth (shared/data/scripts/
dedup_truth.py: lower-cased word 5-grams, pairs at J >= 0.8). 128 one-permutation slots, LSH shaped
for recall (b=18 x r=7) and exact verification of candidates found every true pair and no false one
(precision = recall = 1.000) on three sets: 2,888 stdlib .py files of five Python versions (5,399
pairs; 136 more among 17 files without a word, left to exact dedup), 3,738 and 6,182 documents of
the real corpus (367 and 77 pairs). `verify: estimated` gave precision 0.80-0.98 and recall
0.87-1.00 (the 6,182 set has many pairs at 0.80-0.85, where +-0.035 of estimator noise decides);
`verify: none` with datasketch's own shape for 0.8 (b=9 x r=13): precision 0.69-0.94, recall
0.81-1.00.
"""

from __future__ import annotations

from math import comb
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from platform_assets.contracts import StrictModel


class ShingleSettings(StrictModel):
    unit: Literal["word", "char"] = "word"
    """`word`: n-grams of `\\w+` tokens (Python's Unicode definition, as dedup_truth.py);
    `char`: n-grams of code points after collapsing whitespace runs to one space."""
    size: Annotated[int, Field(ge=1, le=32)] = 5
    lowercase: bool = True
    max_chars: Annotated[int, Field(gt=0)] = 1_000_000
    """Only the first `max_chars` characters are shingled: bounds the work per document (1 M chars
    is ~170k word shingles, ~4 ms of hashing). Exact dedup still hashes the whole text."""


class ExactSettings(StrictModel):
    enabled: bool = True
    lowercase: bool = True
    collapse_whitespace: bool = True
    """Runs of whitespace become one space and the ends are trimmed before hashing."""
    unicode_form: Literal["NFC", "NFKC", "none"] = "NFC"


class LshStorage(StrictModel):
    type: Literal["disk", "memory", "redis"] = "disk"
    """`disk`: band values bucketed in files, only values two documents share are indexed, shingles
    and signatures spilled too (band_buckets.py, signature_spill.py: the same decisions as `memory`;
    on the real 500 MB corpus peak RSS 1,213 -> 831 MB and 24.7 -> 18.0 s); `memory`: datasketch's
    index in this process (~2.7 KB per accepted document, 4 B per shingle); `redis` shares one
    datasketch index between workers (needs the `redis` package)."""
    partitions: Annotated[int, Field(ge=1, le=65536)] = 64
    """`disk`: bucket files; one is grouped in memory at a time (~(10 + 4 x rows) x bands bytes per
    document / partitions: 11 MB for 1 M documents at 18 x 7). Raise it for 100 M documents."""
    shingle_cache_bytes: Annotated[int, Field(ge=0)] = 16 * 2**20
    """`disk` with `verify: exact`: the unique-sorted shingles of documents read back for verification
    stay cached up to this many bytes (least recently used dropped first), so a kept document that many
    later ones are compared with is read and sorted once. Unbounded it grew with the corpus (24 MB, 19,654
    documents, of the 90,013 of the 4x pipeline_scaling corpus). Decisions do not depend on it."""
    spill_dir: str | None = None
    """`disk`: where the run's temporary files go (default: the system's temp directory); removed
    when the stage ends."""
    redis: dict[str, Any] = Field(default_factory=lambda: {"host": "localhost", "port": 6379})
    """Passed to `redis.Redis(...)`; values may be `{env: NAME, default: ...}` as datasketch allows."""
    basename: str | None = None
    """Key prefix in Redis. Each run re-inserts the accepted-signature artifact, so give every run
    its own basename (shared by that run's workers), or leave it unset for a random one. Candidates
    another worker inserted have no local signature: they are counted (`unknown_candidates`) and
    not used, so cross-worker matches need a shared artifact, not only a shared index."""


class SimHashSettings(StrictModel):
    """`near.method: simhash` (dedup/simhash.py): 64-bit SimHash fingerprints (Charikar 2002) of the
    same shingles MinHash sees, weighted by term frequency; near duplicates are fingerprints within
    `max_distance` bits, found with Manku et al.'s (2007) block tables."""

    max_distance: Annotated[int, Field(ge=0, le=16)] = 3
    """Hamming distance (of 64 bits) at or below which two documents are near duplicates (Manku et
    al.: 3 for 8 B web pages). Similarity is reported as 1 - distance/64; the exclusion's value is the
    distance. Bits differ with probability angle/pi of the two term-frequency vectors, so 3 of 64 means
    a cosine of ~0.99: near copies, not the J >= 0.8 MinHash finds. Measured against exact Jaccard
    (benchmarks/RESULTS.md, Dedup section 4), recall at J >= 0.8 with `verify: exact` (precision 1.0):
    0.59-0.95 at 3, 0.87-0.98 at 6, 0.96-0.995 at 10 (MinHash: 0.98-1.00); with `verify: none`
    precision falls from 0.99 at 3 to 0.70-0.93 at 10."""
    blocks: Annotated[int, Field(ge=1, le=64)] | None = None
    """Blocks the 64 bits are cut into; more than `max_distance`, so two fingerprints within the
    distance agree on at least `blocks - max_distance` of them, one table per combination of those.
    Changes the speed only, never the result (every pair within the distance is found). Default:
    the cheapest for the number of documents by a measured cost model (simhash.choose_key_blocks):
    at 200k documents and distance 3, 5 blocks (10 tables) take 0.5 s where 4 blocks take 3.2 s."""

    @model_validator(mode="after")
    def _blocks(self) -> SimHashSettings:
        if self.blocks is not None:
            if self.blocks <= self.max_distance:
                raise ValueError(f"simhash.blocks ({self.blocks}) must exceed max_distance ({self.max_distance}): "
                                 "two fingerprints within the distance must agree on at least one block")
            tables = comb(self.blocks, self.max_distance)
            if tables > MAX_SIMHASH_TABLES:
                raise ValueError(f"simhash.blocks = {self.blocks} at max_distance = {self.max_distance} means "
                                 f"{tables:,} tables (at most {MAX_SIMHASH_TABLES:,}): use fewer blocks")
        return self


# a table is one sorted pass over every fingerprint (~80 ns each: 1M documents x 1,024 tables ~ 80 s);
# the automatic shapes use 4-20 tables at max_distance 3, 17-969 at 16
MAX_SIMHASH_TABLES = 1024


class NearSettings(StrictModel):
    enabled: bool = True
    method: Literal["minhash", "simhash"] = "minhash"
    """`minhash`: MinHash-LSH (the settings below), candidates verified as `verify` says. `simhash`:
    64-bit SimHash fingerprints within `simhash.max_distance` bits (8 B per document instead of
    4 x num_perm), then, with `verify: exact`, the same exact Jaccard test against `threshold`;
    `verify: none` trusts the distance. Rule `near_duplicate_simhash`."""
    simhash: SimHashSettings = SimHashSettings()
    shingles: ShingleSettings = ShingleSettings()
    num_perm: Annotated[int, Field(ge=16, le=1024)] = 128
    seed: Annotated[int, Field(ge=0)] = 1
    algorithm: Literal["one_permutation", "permutations"] = "one_permutation"
    """`one_permutation`: one hash per shingle, binned into `num_perm` slots (+ optimal
    densification): O(shingles) per document, ~45k docs/s/core on 2 KB docs (shingling included).
    `permutations`: the classic num_perm independent hashes, O(shingles x num_perm), ~6k docs/s."""
    threshold: Annotated[float, Field(gt=0.0, le=1.0)] = 0.8
    """Jaccard similarity (of shingle sets) at or above which two documents are near-duplicates."""
    lsh_threshold: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    """Threshold the LSH bands/rows are tuned for. Default: `threshold - 0.2` when candidates are
    verified (recall first, verification restores precision): at 128 slots that is b=18 x r=7, which
    finds a pair at J=0.8 with p=0.986 where the shape tuned for 0.8 itself (b=9 x r=13) has 0.40."""
    lsh_weights: tuple[float, float] = (0.5, 0.5)
    """(false-positive, false-negative) weights of datasketch's band/row optimisation."""
    bands: Annotated[int, Field(ge=1)] | None = None
    rows: Annotated[int, Field(ge=1)] | None = None
    """Explicit LSH shape (both or neither); bands x rows must not exceed num_perm."""
    verify: Literal["none", "estimated", "exact"] = "exact"
    """How LSH candidates are confirmed: `exact` Jaccard of the shingle sets (keeps 4 bytes per
    shingle of this run in memory), `estimated` from the signatures (512 B/doc, +-0.035 at J=0.8),
    or `none` (every LSH candidate is a duplicate)."""
    max_candidates: Annotated[int, Field(ge=1)] = 64
    """At most this many LSH candidates are verified per document, best-priority first: bounds the
    work when many mutually distinct documents share buckets."""
    storage: LshStorage = LshStorage()

    @model_validator(mode="after")
    def _shape(self) -> NearSettings:
        if (self.bands is None) != (self.rows is None):
            raise ValueError("set both `bands` and `rows`, or neither")
        if self.bands is not None and self.rows is not None and self.bands * self.rows > self.num_perm:
            raise ValueError(f"bands x rows = {self.bands * self.rows} exceeds num_perm = {self.num_perm}")
        if abs(sum(self.lsh_weights) - 1.0) > 1e-9 or min(self.lsh_weights) < 0:
            raise ValueError("lsh_weights must be two non-negative numbers summing to 1")
        if self.method == "simhash" and self.verify == "estimated":
            raise ValueError("method simhash: verify must be `none` (the distance decides) or `exact` "
                             "(Jaccard of the shingle sets too); the fingerprint is the estimate")
        if self.method == "simhash" and self.storage.type == "redis":
            raise ValueError("method simhash keeps its block tables in this process: storage.type "
                             "must be `disk` or `memory`")
        return self

    def signature_width(self) -> int:
        """uint32 words per document in the accepted-signature artifact: the MinHash slots, or the
        64-bit SimHash fingerprint as two words (little-endian halves)."""
        return self.num_perm if self.method == "minhash" else 2

    def effective_lsh_threshold(self) -> float:
        if self.lsh_threshold is not None:
            return self.lsh_threshold
        return round(max(0.05, self.threshold - 0.2), 6) if self.verify != "none" else self.threshold


class ImageNearSettings(StrictModel):
    """Near-duplicate images by the 64-bit perceptual hash ingest stores (`media[i].phash`)."""

    enabled: bool = True
    max_distance: Annotated[int, Field(ge=0, le=16)] = 4
    """Hamming distance (of 64 bits) at or below which two images are near duplicates; similarity is
    reported as 1 - distance/64. Measured on the 3,786 emoji PNGs of /work/mm/images/emoji (64 x 64,
    composited on white as ingest does), phash of each against a modified copy: upscaled to 256 px,
    downscaled to 48 or 32 px, or upscaled and saved as JPEG q75: within 4 for 99.1-99.4% (median 0,
    p99 4); JPEG q90 98.4%, JPEG q50 95.2%, +20 brightness 95.7% (97.5% / 98.7% within 6). Crops are
    out of reach of any useful value (2 px: median 8; 5% crop + resize: median 12). Different emoji:
    3,902 of 7.2 M pairs (0.054%) within 4, 505 at 0, 6,435 within 6. phash sees luminance only, so
    recolourings of one outline collide: on the 1,911 captioned emoji of /work/mm/images.jsonl this
    removes 155 (8.1%: hearts of other colours, man/woman variants, 36 of 259 flags), 35 at 0 and 225
    at 6; a smaller value loses re-encoded copies without curing that. Distances between phashes
    are even (all 3,786 have 32 bits set; only ties at the median, as in a blank image, differ), so
    4 and 5 are the same. The pair search costs more as this grows (bands get narrower): on 1M
    random hashes 0.3 s at 2, 1.2-1.6 s at 4, 5.8 s at 6, 20 s at 8 (dedup/image_near.py)."""


class DedupSettings(StrictModel):
    exact: ExactSettings = ExactSettings()
    near: NearSettings = NearSettings()
    images: ImageNearSettings = ImageNearSettings()
    """Perceptual-hash near-duplicate removal for image documents (rule `near_duplicate_image`); the
    split leak check uses the same `max_distance` whether or not this is enabled."""
    keep: Literal["oldest", "longest", "highest_quality"] = "oldest"
    """Which member of a duplicate cluster survives; ties are broken by id, then source."""
    quality_column: str = "quality"
    """Numeric column (or `struct.field`) ranked by `keep: highest_quality`; nulls rank last."""
    slice_bytes: Annotated[int, Field(gt=0)] = 8 * 2**20
    """Input batches (up to `io.batch_bytes`) are keyed and shingled in consecutive row slices of at
    most this much text (dedup/batch_slices.py): the text copies that keying makes are per slice, not
    per batch. Decisions and outputs do not depend on it."""
    malloc_mmap_threshold: Annotated[int, Field(ge=0, le=32 * 2**20)] | None = 128 * 2**10
    """glibc's M_MMAP_THRESHOLD, set (and so fixed) when the stage starts under Arrow's `system` memory
    pool (platform_assets/heap.py): allocations from this size up are mmapped and unmapped on free. glibc
    otherwise raises it to the size of each freed block, and per-batch temporaries stay resident as
    heap holes (600 MB of text, system pool: peak RSS 713 -> ~360 MB). Not applied under the default
    jemalloc pool (no gain measured there, +45% time). `null` leaves malloc as it is."""
    incremental: bool = False
    """Deduplicate new documents against the accepted-signature artifact of the previous run
    (accepted documents stay accepted) instead of recomputing over the whole corpus."""
    max_removed_fraction: Annotated[float, Field(ge=0, le=1)] = 0.5
    """Blocking bound of the `removal_rate_within_bounds` check: a broken rule (say, a shingle size
    of 1 making everything a near duplicate) cannot silently empty the dataset."""
