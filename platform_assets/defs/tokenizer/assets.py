"""tokenizer: trained on the train split (byte-level BPE by default) or loaded from a local path."""

import dagster as dg

from platform_assets.defs.metadata import counts_table
from platform_assets.defs.resources import PipelineResource
from platform_assets.layout import asset_dir
from platform_assets.storage import manifest_version
from platform_assets.tokenize.stage import build_tokenizer

TOKENIZER_CHECKS = [
    dg.AssetCheckSpec("roundtrip_exact", asset="tokenizer", blocking=True,
                      description="decode(encode(text)) == text on a deterministic sample of documents of "
                                  "every split."),
    dg.AssetCheckSpec("special_tokens_sane", asset="tokenizer", blocking=True,
                      description="eos, pad and the chat tokens exist, each encodes to exactly one distinct id, and "
                                  "a special token written inside ordinary text is not split."),
    dg.AssetCheckSpec("bytes_per_token_in_range", asset="tokenizer",
                      description="Compression on the sample is between 1.5 and 8 UTF-8 bytes per token (GPT-2 on "
                                  "English ~4.2, on code ~3; below 1.5 the vocabulary barely merges anything)."),
]
BYTES_PER_TOKEN_RANGE = (1.5, 8.0)


@dg.asset(
    deps=["dataset_splits"],
    check_specs=TOKENIZER_CHECKS,
    group_name="tokens",
    kinds={"huggingface"},
    code_version="1",
    description="A tokenizer saved with save_pretrained (AutoTokenizer.from_pretrained(dir) loads it), with the "
                "chat template whose {% generation %} blocks define the assistant-only loss mask.",
)
def tokenizer(context: dg.AssetExecutionContext, pipeline: PipelineResource) -> dg.MaterializeResult:
    cfg = pipeline.config()
    storage = pipeline.storage(cfg)
    rel = asset_dir("tokenizer")
    try:
        result = build_tokenizer(storage, asset_dir("dataset_splits"), rel, cfg.tokenizer_settings(),
                                 cfg.dedup.batch_rows)
    except (ValueError, OSError) as err:
        raise dg.Failure(str(err)) from None
    sanity = result.sanity
    context.log.info(f"tokenizer: {result.source}, vocab {result.vocab_size}, "
                     f"{sanity.bytes_per_token:.2f} bytes/token")
    low, high = BYTES_PER_TOKEN_RANGE
    return dg.MaterializeResult(
        metadata={
            "uri": dg.MetadataValue.path(storage.uri(rel)),
            "source": result.source,
            "vocab_size": result.vocab_size,
            "bytes_per_token": round(sanity.bytes_per_token, 4),
            "tokenizer_sha256": result.tokenizer_sha256,
            "train_documents": result.train_documents,
            "train_bytes": result.train_bytes,
            "special_tokens": counts_table({f"{role} {v['token']}": v["id"] for role, v in
                                            sorted(result.special_tokens.items())}, "token", "id"),
        },
        data_version=dg.DataVersion(manifest_version(result.files)),
        check_results=[
            dg.AssetCheckResult(check_name="roundtrip_exact", passed=sanity.roundtrip_failures == 0,
                                metadata={"checked": sanity.roundtrip_checked, "failures": sanity.roundtrip_failures,
                                          "failed_ids": ", ".join(sanity.roundtrip_failed_ids) or "none"}),
            dg.AssetCheckResult(check_name="special_tokens_sane", passed=not sanity.special_token_problems,
                                metadata={"problems": "\n".join(sanity.special_token_problems) or "none"}),
            dg.AssetCheckResult(check_name="bytes_per_token_in_range", severity=dg.AssetCheckSeverity.WARN,
                                passed=low <= sanity.bytes_per_token <= high,
                                metadata={"bytes_per_token": round(sanity.bytes_per_token, 4),
                                          "range": f"{low}-{high}"}),
        ],
    )
