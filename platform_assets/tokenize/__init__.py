"""Tokenizer and tokenization stage logic (Dagster-free).

Entry points for the asset wrappers:
- `stage.build_tokenizer(storage, splits_rel, out_rel, TokenizerSettings) -> TokenizerBuildResult`
  (vocab size, special ids, tokenizer sha256, `.sanity`: round-trip failures, bytes/token,
  special-token problems; `.files` manifest);
- `stage.tokenize_outputs(storage, splits_rel, tokenizer_rel, out_rel, TokenizeSettings, ...)
  -> TokenizeStageResult` (rows, documents, tokens and loss tokens per (split, source), encode
  stats, exclusions, parts, manifest);
- `encode.DocumentEncoder(TokenizerArtifact, TokenizeSettings).encode(record_batch) -> EncodedBatch`
  (`.batch` in `tokenized_schema()`, `.exclusions` in exclusion_rules.EXCLUSIONS_SCHEMA, `.stats`);
- `tokenizer_artifact.TokenizerArtifact.load(storage, rel)`: the saved tokenizer, as packing and
  training need it (vocab size, eos/pad/bos ids, tokenizer sha256).

Modules: settings (config), tokenizer_build (train / load / save / sanity), tokenizer_artifact (the
saved directory), chat_template (ChatML with generation blocks, rendering into masked segments),
chat_template_choice (a pretrained tokenizer's own template, ChatML or a given one), chat_turn_spans
(the assistant turns of a template without generation blocks, from rendered prefixes), conversations
(meta["messages"] validation), sequences (BOS/EOS, truncation, chunking as offset arithmetic), encode
(record batch -> token rows), exclusion_rules, stage.
"""
