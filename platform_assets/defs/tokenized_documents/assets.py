"""tokenized_documents: token ids (and assistant-only loss masks for chat data) per document."""

import dagster as dg
import pyarrow as pa

from platform_assets.defs.metadata import arrow_table
from platform_assets.defs.resources import PipelineResource
from platform_assets.defs.stage_asset import TRANSIENT_RETRY, run_stage, stage_context, stage_result
from platform_assets.layout import asset_dir
from platform_assets.stats.histograms import tokenized_length_stats
from platform_assets.stats.report import histograms_markdown, lengths_json
from platform_assets.tokenize.stage import tokenize_outputs

LOSS_CHECK_EXAMPLES = 10
"""Rows named in chat_documents_have_loss_tokens' metadata; the rest are counted only."""

TOKENIZED_CHECKS = [
    dg.AssetCheckSpec("every_split_has_tokens", asset="tokenized_documents", blocking=True,
                      description="Each split present in dataset_splits produced tokens (a broken template or "
                                  "filter cannot silently empty one)."),
    dg.AssetCheckSpec("chat_documents_have_loss_tokens", asset="tokenized_documents", blocking=True,
                      description="Every chat row has at least one assistant (loss) token; plain rows count every "
                                  "token. A template without generation markers would train on nothing."),
]


@dg.asset(
    retry_policy=TRANSIENT_RETRY,  # transient faults re-run the step (defs/stage_asset.py)
    deps=["dataset_splits", "tokenizer"],
    check_specs=TOKENIZED_CHECKS,
    group_name="tokens",
    kinds={"parquet"},
    code_version="1",
    description="Documents encoded in batches by the Rust tokenizer (EOS appended), chat documents through the chat "
                "template with a loss mask on assistant turns only; per (split, source) Parquet parts.",
)
def tokenized_documents(context: dg.AssetExecutionContext, pipeline: PipelineResource) -> dg.MaterializeResult:
    ctx = stage_context(pipeline, "tokenized_documents")
    storage, rel = ctx.storage, ctx.rel
    result = run_stage("tokenized_documents", lambda: tokenize_outputs(
        storage, ctx.input_dir("dataset_splits"), ctx.input_dir("tokenizer"), rel, ctx.cfg.tokenize, ctx.cfg.io))
    sets = pa.Table.from_pylist([{k: s[k] for k in ("split", "source", "rows", "documents", "tokens", "loss_tokens")}
                                 for s in result.sets])
    context.log.info(f"tokenized {result.documents} documents into {result.tokens} tokens")
    metadata = {"tokens_per_split_and_source": arrow_table(sets)}
    lengths = tokenized_length_stats(storage, rel, ctx.cfg.statistics)  # stats/histograms.py: counts only
    metadata["token_length_histogram"] = dg.MetadataValue.md(histograms_markdown(
        "document length (tokens)", {k: v.tokens for k, v in lengths.items()}))
    metadata["output_length_histogram"] = dg.MetadataValue.md(histograms_markdown(
        "output length (loss tokens; sets with masked tokens)",
        {k: v.output for k, v in lengths.items() if v.has_masked_tokens}))
    metadata["length_histograms"] = dg.MetadataValue.json(lengths_json(lengths))
    splits_in = _splits_in(storage)
    empty = sorted(s for s in splits_in if not any(x["split"] == s and x["tokens"] > 0 for x in result.sets))
    no_loss, no_loss_examples = _rows_without_loss_tokens(storage, rel)
    return stage_result(
        ctx, result, metadata,
        checks=[
            dg.AssetCheckResult(check_name="every_split_has_tokens", passed=not empty,
                                metadata={"splits": ", ".join(sorted(splits_in)), "empty": ", ".join(empty) or "none"}),
            dg.AssetCheckResult(check_name="chat_documents_have_loss_tokens", passed=not no_loss,
                                metadata={"rows_without_loss_tokens": no_loss,
                                          "examples": ", ".join(no_loss_examples) or "none",
                                          "chat_chunks_dropped_for_lack_of_assistant_tokens":
                                              result.stats.dropped_chunks}),
        ],
    )


def _rows_without_loss_tokens(storage, rel: str) -> tuple[int, list[str]]:
    """How many output rows have a loss mask that counts nothing, and the `id#chunk` of the first
    LOSS_CHECK_EXAMPLES (re-read: an independent check). Counted per batch, not gathered: a broken
    template zeroes every chat row, and a list of all their ids grew with the input (the check's
    metadata showed 10 of them)."""
    import pyarrow.compute as pc

    from platform_assets.parquet_parts import read_batches

    count, examples = 0, []
    for batch in read_batches(storage, rel, ["id", "chunk", "loss_tokens"]):
        zero = batch.filter(pc.equal(batch.column("loss_tokens"), 0))
        count += zero.num_rows
        room = LOSS_CHECK_EXAMPLES - len(examples)
        if room > 0 and zero.num_rows:
            head = zero.slice(0, room)
            examples += [f"{i}#{c}" for i, c in zip(head.column("id").to_pylist(), head.column("chunk").to_pylist(),
                                                    strict=True)]
    return count, examples


def _splits_in(storage) -> set[str]:
    import pyarrow.compute as pc

    from platform_assets.parquet_parts import read_batches

    splits: set[str] = set()
    for batch in read_batches(storage, asset_dir("dataset_splits"), ["split"]):
        splits.update(pc.unique(batch.column("split")).to_pylist())
    return splits
