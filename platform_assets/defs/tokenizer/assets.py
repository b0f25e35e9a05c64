"""tokenizer: trained on the train split (byte-level BPE by default) or loaded from a local path (keeping its
own chat template and vocabulary unless tokenizer.chat_template says otherwise)."""

import dagster as dg

from platform_assets.defs.metadata import counts_table
from platform_assets.defs.resources import PipelineResource
from platform_assets.defs.stage_asset import TRANSIENT_RETRY, run_stage, stage_context, stage_result
from platform_assets.tokenize.stage import build_tokenizer

TOKENIZER_CHECKS = [
    dg.AssetCheckSpec("roundtrip_exact", asset="tokenizer", blocking=True,
                      description="decode(encode(text)) == text on a deterministic sample of documents of "
                                  "every split."),
    dg.AssetCheckSpec("special_tokens_sane", asset="tokenizer", blocking=True,
                      description="eos, pad and the chat tokens exist, each encodes to exactly one distinct id, "
                                  "a special token written inside ordinary text is not split, and the chat "
                                  "template marks assistant text on a two-turn conversation."),
    dg.AssetCheckSpec("document_encoder_exact", asset="tokenizer", blocking=True,
                      description="Where tokenized_documents encodes documents with tiktoken (tokenize.encoder: "
                                  "auto, a GPT-2-style byte-level BPE), tiktoken's ids equal tokenizers' on the "
                                  "round-trip sample. On a failure, set tokenize.encoder: tokenizers."),
    dg.AssetCheckSpec("bytes_per_token_in_range", asset="tokenizer",
                      description="Compression on the sample is between 1.5 and 8 UTF-8 bytes per token (GPT-2 on "
                                  "English ~4.2, on code ~3; below 1.5 the vocabulary barely merges anything)."),
]
BYTES_PER_TOKEN_RANGE = (1.5, 8.0)


@dg.asset(
    retry_policy=TRANSIENT_RETRY,  # transient faults re-run the step (defs/stage_asset.py)
    deps=["dataset_splits"],
    check_specs=TOKENIZER_CHECKS,
    group_name="tokens",
    kinds={"huggingface"},
    code_version="1",
    description="A tokenizer saved with save_pretrained (AutoTokenizer.from_pretrained(dir) loads it), with its "
                "chat template: a pretrained tokenizer's own (no token added) or ChatML; the assistant-only loss "
                "mask is what its {% generation %} blocks hold, or each assistant turn found by rendering "
                "prefixes of the conversation.",
)
def tokenizer(context: dg.AssetExecutionContext, pipeline: PipelineResource) -> dg.MaterializeResult:
    ctx = stage_context(pipeline, "tokenizer")
    result = run_stage("tokenizer", lambda: build_tokenizer(
        ctx.storage, ctx.input_dir("dataset_splits"), ctx.rel, ctx.cfg.tokenizer_settings(), ctx.cfg.io,
        ctx.cfg.tokenize.encoder))
    sanity = result.sanity
    context.log.info(f"tokenizer: {result.source}, vocab {result.vocab_size}, "
                     f"{sanity.bytes_per_token:.2f} bytes/token")
    low, high = BYTES_PER_TOKEN_RANGE
    return stage_result(
        ctx, result,
        metadata={
            "special_tokens": counts_table({f"{role} {v['token']}": v["id"] for role, v in
                                            sorted(result.special_tokens.items())}, "token", "id"),
        },
        checks=[
            dg.AssetCheckResult(check_name="roundtrip_exact", passed=sanity.roundtrip_failures == 0,
                                metadata={"checked": sanity.roundtrip_checked, "failures": sanity.roundtrip_failures,
                                          "failed_ids": ", ".join(sanity.roundtrip_failed_ids) or "none"}),
            dg.AssetCheckResult(check_name="special_tokens_sane", passed=not sanity.special_token_problems,
                                metadata={"problems": "\n".join(sanity.special_token_problems) or "none"}),
            dg.AssetCheckResult(check_name="document_encoder_exact", passed=sanity.encoder_mismatches == 0,
                                metadata={"document_encoder": sanity.document_encoder,
                                          "checked": sanity.encoder_checked,
                                          "mismatches": sanity.encoder_mismatches,
                                          "mismatched_ids": ", ".join(sanity.encoder_mismatch_ids) or "none"}),
            dg.AssetCheckResult(check_name="bytes_per_token_in_range", severity=dg.AssetCheckSeverity.WARN,
                                passed=low <= sanity.bytes_per_token <= high,
                                metadata={"bytes_per_token": round(sanity.bytes_per_token, 4),
                                          "range": f"{low}-{high}"}),
        ],
    )
