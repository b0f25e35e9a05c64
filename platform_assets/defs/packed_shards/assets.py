"""packed_shards: fixed-length packed sequences in flat / Parquet / WebDataset shards with an index."""

import dagster as dg
import pyarrow as pa

from platform_assets.charts import bar_chart_markdown
from platform_assets.contracts import MANIFEST_FILE
from platform_assets.defs.metadata import arrow_table
from platform_assets.defs.packed_shards.checks import PACKED_CHECKS, evaluate_packed_checks
from platform_assets.defs.resources import PipelineResource
from platform_assets.defs.stage_asset import TRANSIENT_RETRY, run_stage, stage_context, stage_result
from platform_assets.packing.stage import pack_outputs
from platform_assets.tokenize.tokenizer_artifact import TokenizerArtifact


def tokenizer_info(storage, rel: str) -> dict:
    artifact = TokenizerArtifact.load(storage, rel)
    return {"vocab_size": artifact.vocab_size, "pad_id": artifact.pad_id, "eos_id": artifact.eos_id,
            # the asset's path under the storage root, not its absolute location: the index (and so
            # the dataset version) must not change when the same data is built in another checkout
            "bos_id": artifact.bos_id, "name": rel, "sha256": artifact.tokenizer_sha256}


def tokenizer_files(storage, rel: str) -> dict[str, bytes]:
    """The tokenizer's saved files, shipped inside the shard set as `tokenizer/` (a few MB): the DVC
    version then holds everything a consumer needs to decode it (AutoTokenizer.from_pretrained)."""
    root = storage.path(rel)
    names = [e.path[len(root) + 1:] for e in storage.list_files(rel)]
    return {f"tokenizer/{n}": storage.read_bytes(f"{rel}/{n}") for n in names if n != MANIFEST_FILE}


@dg.asset(
    retry_policy=TRANSIENT_RETRY,  # transient faults re-run the step (defs/stage_asset.py)
    deps=["tokenized_documents", "tokenizer"],
    check_specs=PACKED_CHECKS,
    group_name="tokens",
    kinds={"parquet", "numpy"},
    code_version="1",
    description="Tokenized documents packed into seq_len samples per (split, source) by the configured strategy, "
                "written as flat token files (np.memmap), Parquet and WebDataset tars, each with index.json (counts, "
                "sha256 per shard), plus provenance.parquet (which document piece is in which sample).",
)
def packed_shards(context: dg.AssetExecutionContext, pipeline: PipelineResource) -> dg.MaterializeResult:
    ctx = stage_context(pipeline, "packed_shards")
    cfg, storage, rel = ctx.cfg, ctx.storage, ctx.rel
    tokenizer_rel = ctx.input_dir("tokenizer")
    # a ConservationError is a bug, not bad input: it keeps its traceback (USER_ERRORS do not hold it)
    result = run_stage("packed_shards", lambda: pack_outputs(
        storage, ctx.input_dir("tokenized_documents"), rel, cfg.packing, tokenizer_info(storage, tokenizer_rel),
        cfg.io, cfg.packing.max_tokens_in_memory, extra_files=tokenizer_files(storage, tokenizer_rel)))
    totals = result.totals
    sets = pa.Table.from_pylist([s.as_dict() for s in result.sets])
    context.log.info(f"packed {totals.tokens} tokens into {totals.sequences} sequences "
                     f"({totals.efficiency:.4%} non-padding)")
    data_bytes = sum(int(v["bytes"]) for k, v in result.files.items() if k != MANIFEST_FILE)
    metadata = {
        "seq_len": cfg.packing.seq_len,
        "strategy": cfg.packing.strategy,
        "bytes": data_bytes,
        "files": len(result.files),
        "per_split_and_source": arrow_table(sets),
        "sequences_per_set": dg.MetadataValue.md(bar_chart_markdown(
            "sequences per split/source", [f"{s.split}/{s.source}" for s in result.sets],
            [s.sequences for s in result.sets])),
    }
    return stage_result(ctx, result, metadata, evaluate_packed_checks(storage, rel, result, cfg.packing))
