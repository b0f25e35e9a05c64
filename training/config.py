"""The run config of a training job: one YAML (or JSON) file, validated strictly.

An unknown key or a wrong type is an error that names it (``optimizer.lr: Input should be greater
than 0``); relative paths are relative to the config file. Overrides (from the command line or from
the Dagster Pipes extras) are dotted keys merged into the raw mapping *before* validation, so they
are checked exactly like the file.

The transformers-specific part of `model.overrides` (does `LlamaConfig` know `hidden_sise`?) is
checked when the model is built (training/model.py), which needs the transformers config class.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class RunConfigError(ValueError):
    """The run config is missing, unparsable or invalid; the message names the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AugmentSettings(_Strict):
    """Image augmentation seeded by (data.seed, epoch, sample id): a resumed run sees the same pixels."""

    random_resized_crop_scale: tuple[Annotated[float, Field(gt=0.0, le=1.0)],
                                     Annotated[float, Field(gt=0.0, le=1.0)]] | None = None
    """Area share range of torchvision's RandomResizedCrop, e.g. [0.5, 1.0]; None = no crop."""
    random_resized_crop_ratio: tuple[Annotated[float, Field(gt=0.0)], Annotated[float, Field(gt=0.0)]] = (0.75, 4 / 3)
    hflip_probability: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    brightness: Annotated[float, Field(ge=0.0)] = 0.0
    contrast: Annotated[float, Field(ge=0.0)] = 0.0
    saturation: Annotated[float, Field(ge=0.0)] = 0.0


class ImageSettings(_Strict):
    """The image processor (a CLIPImageProcessor built from these, nothing downloaded)."""

    size: Annotated[int, Field(gt=0)] = 224
    """Shortest edge resized to this, then a centre crop of size x size: the vision tower's image_size."""
    mean: tuple[float, float, float] = (0.48145466, 0.4578275, 0.40821073)  # CLIP's
    std: tuple[float, float, float] = (0.26862954, 0.26130258, 0.27577711)
    augment: AugmentSettings = AugmentSettings()
    """Training only: evaluation sees the unaugmented image."""


class MediaDataSettings(_Strict):
    """How media samples (media_shards: images, PDF pages, audio) become model inputs."""

    tokenizer_path: str
    """A local tokenizer directory (the platform's packed_shards/_all/tokenizer, or any save_pretrained
    one with a chat template that marks assistant turns with {% generation %})."""
    modalities: list[Literal["image", "pdf", "audio"]] | None = None
    """The modalities the model takes; None: those of the model family (speech: audio; vision-language:
    image and pdf)."""
    batching: Literal["mixed", "per_modality"] = "mixed"
    """mixed: batches draw from every stream by the mixture; per_modality: each optimizer step one modality."""
    max_text_tokens: Annotated[int, Field(gt=0)] = 128
    """Per sample: the chat (image placeholders included) or the transcript's target tokens."""
    image: ImageSettings = ImageSettings()
    caption_prompt: str = "Describe the image."
    """The user turn of a caption sample (its caption is the assistant turn); chat samples keep theirs."""
    page_prompt: str = "Read the page."


class CacheSettings(_Strict):
    """A local cache for a remote shard set (data_dir s3://bucket/prefix): training/data/remote_reader.py.
    The S3 keys mirror the platform's `storage.s3` (endpoint_url, region, max_attempts)."""

    dir: str
    """Local directory of the cache (relative to the config file); managed by the loader, one per run."""
    max_bytes: Annotated[int, Field(gt=0)]
    """Shard bytes held at once by one rank (its main process and DataLoader workers), in its own folder:
    ranks sharing `dir` on a node need ranks-per-node x max_bytes of disk. Must hold one block of
    `block_shards` shards per source and what the workers' prefetched micro-batches read (shuffle: block)."""
    prefetch_steps: Annotated[int, Field(ge=0)] = 4
    """Optimizer steps ahead whose shards are downloaded in the background."""
    download_attempts: Annotated[int, Field(ge=1)] = 5
    """Attempts per file (transient error or sha256 mismatch), backoff 0.2 s doubling."""
    endpoint_url: str | None = None
    """S3 endpoint (MinIO, moto); None: AWS_ENDPOINT_URL or AWS."""
    region: str = "us-east-1"
    max_attempts: Annotated[int, Field(ge=1)] = 5
    """Attempts per S3 request inside pyarrow (AWS's standard retry mode), as the platform's storage.s3."""


class DataSettings(_Strict):
    """What the training loader reads: the fields of `training.data.loader.LoaderConfig` (token shards)
    or `training.data.media_loader.MediaLoaderConfig` (media shards, with `media`)."""

    data_dir: str
    """A `flat` shard directory holding index.json (platform_assets/packing/SHARD_FORMAT.md), or for a
    speech or vision-language model a media format directory (media_shards/_all/webdataset)."""
    media: MediaDataSettings | None = None
    """Required by speech and vision-language models (model.model_type whisper, llava), unused by causal LMs."""
    split: str = "train"
    weights: dict[str, Annotated[float, Field(gt=0.0)]] | None = None
    """Mixture weight per source; None = proportional to each source's sample count."""
    seed: Annotated[int, Field(ge=0)] = 0
    """Seed of the data order only (the model's init and dropout use the top-level `seed`)."""
    global_batch_size: Annotated[int, Field(gt=0)] = 8
    """Samples per optimizer step over all ranks = micro_batch_size * accumulation * world size."""
    micro_batch_size: Annotated[int, Field(gt=0)] = 1
    """Samples per forward pass per rank."""
    samples_per_epoch: Annotated[int, Field(gt=0)] | None = None
    num_workers: Annotated[int, Field(ge=0)] = 0
    verify: Literal["none", "first_open", "always"] = "none"
    """When shard files are hashed against the index: never (sizes only), on each process's first open of a
    shard, or on every open (every epoch)."""
    on_corrupt: Literal["stop", "skip"] = "stop"
    """A shard that differs from the index: stop with an error naming it, or leave it out on every rank
    (decided when the loader is built; logged and counted in the loader state)."""
    collate: Literal["packed", "padded"] = "packed"
    pad_to_multiple_of: Annotated[int, Field(ge=1)] | None = None
    """collate: padded: each micro-batch's width, its longest sample, rounded up to a multiple of this (e.g. 8
    or 64 for tensor-core tiles); None: exactly the longest. Unpadded `flat_varlen` shards are padded this way too."""
    shuffle: Literal["full", "block"] = "full"
    """Each pass of a source: a full permutation, or a block shuffle of `block_shards` shards at a time
    (what a cache smaller than the shard set needs)."""
    block_shards: Annotated[int, Field(ge=1)] = 4
    cache: CacheSettings | None = None
    """Required when data_dir is s3://bucket/prefix: shards are read through this bounded local cache."""


class ValidationSettings(_Strict):
    split: str = "validation"
    eval_interval: Annotated[int, Field(ge=0)] = 0
    """Evaluate every this many optimizer steps (and after the last one); 0 = never."""
    eval_batches: Annotated[int, Field(gt=0)] = 8
    """Global batches (of `data.global_batch_size` samples) per evaluation: always the same first
    samples of the split's epoch 0, so eval losses of different steps (and runs) are comparable."""


class LoraSettings(_Strict):
    """LoRA adapters through `peft` (training/pretrained.py): only the adapters train, the base stays frozen."""

    r: Annotated[int, Field(gt=0)] = 8
    """Rank of each adapter's A (r x in) and B (out x r) matrices."""
    alpha: Annotated[float, Field(gt=0.0)] = 16.0
    """The adapter's output is scaled by alpha / r."""
    dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    """Dropout on the adapter's input (seeded like the model's dropout)."""
    target_modules: list[Annotated[str, Field(min_length=1)]] | Literal["all-linear"] = "all-linear"
    """Module names (suffixes, e.g. [q_proj, v_proj]) that get adapters; all-linear: every linear layer but
    the output head."""
    bias: Literal["none"] = "none"
    """Biases stay frozen (peft's bias="none")."""


class ModelSettings(_Strict):
    model_type: str | None = None
    """A transformers model type (`llama`, `gpt2`, ...): the config is `AutoConfig.for_model(model_type,
    **overrides)` and the weights are freshly initialised; nothing is downloaded."""
    model_path: str | None = None
    """Or a local directory holding a saved `config.json` (its weights are loaded only with `init: pretrained`)."""
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2", "flash_attention_3"] = "sdpa"
    """How attention keeps packed documents apart: sdpa/eager get a 4-D block-diagonal causal mask,
    flash attention gets varlen cu_seqlens (training/packed_attention.py)."""
    overrides: dict[str, Any] = {}
    """transformers config fields, e.g. hidden_size, num_hidden_layers, num_attention_heads,
    intermediate_size. vocab_size, max_position_embeddings and the pad/eos/bos ids default to the
    shard index's."""

    init: Literal["random", "pretrained"] = "random"
    """random: fresh weights from the config (under the run's `seed`); pretrained: the weights saved in
    `model_path` (a save_pretrained directory: safetensors or .bin, sharded or not; local only, never a
    download). A pretrained model takes only `overrides` that change no weight's shape (dropout fields)."""
    lora: LoraSettings | None = None
    """Train LoRA adapters (peft) instead of every weight; None: full training."""

    @model_validator(mode="after")
    def _one_source(self) -> ModelSettings:
        if self.init == "pretrained" and self.model_path is None:
            raise ValueError("model.init is pretrained but model.model_path is not set: give the local "
                             "save_pretrained directory to start from (model_type alone has no weights)")
        if (self.model_type is None) == (self.model_path is None):
            raise ValueError("set exactly one of model_type and model_path")
        return self


class OptimizerSettings(_Strict):
    """The optimizer (training/optimizers.py) and its hyperparameters."""

    name: Literal["adamw", "adafactor", "adamw_8bit", "paged_adamw_8bit"] = "adamw"
    """adamw (fused on CUDA); adafactor (transformers', explicit lr driven by the schedule, no first moment;
    betas and eps do not apply); adamw_8bit / paged_adamw_8bit (bitsandbytes, CUDA only: the `gpu` extra)."""
    lr: Annotated[float, Field(gt=0.0)] = 3e-4
    """Peak learning rate, reached at the end of the warm-up."""
    betas: tuple[Annotated[float, Field(ge=0.0, lt=1.0)], Annotated[float, Field(ge=0.0, lt=1.0)]] = (0.9, 0.95)
    eps: Annotated[float, Field(gt=0.0)] = 1e-8
    weight_decay: Annotated[float, Field(ge=0.0)] = 0.1
    """Applied to matrices (embeddings, projections) only, never to norms and biases."""
    grad_clip: Annotated[float, Field(ge=0.0)] = 1.0
    """Maximum global L2 norm of the gradients; 0 = no clipping (the norm is still reported)."""


class ScheduleSettings(_Strict):
    """Linear warm-up from 0 to `optimizer.lr`, then cosine decay to `min_lr_ratio * lr`."""

    warmup_steps: Annotated[int, Field(ge=0)] = 0
    decay_steps: Annotated[int, Field(gt=0)] | None = None
    """Step at which the cosine reaches its floor (then stays there); None = `max_steps`."""
    min_lr_ratio: Annotated[float, Field(ge=0.0, le=1.0)] = 0.1


class CheckpointSettings(_Strict):
    dir: str
    """Holds step-<n>/ directories, the `latest` pointer and (by default) metrics.jsonl."""
    interval: Annotated[int, Field(gt=0)] = 1000
    """Save every this many optimizer steps, and always after the last step and on SIGTERM/SIGINT."""
    keep_last: Annotated[int, Field(gt=0)] = 3
    resume: bool = True
    """Resume from the newest valid checkpoint in `dir` when there is one. False: start fresh, which
    requires a `dir` without checkpoints (keep_last would otherwise prune the new run's first ones)."""
    allow_dataset_change: bool = False
    """Resume a checkpoint written for another `dataset_version` (the data order then differs)."""


Precision = Literal["auto", "bf16", "fp16", "fp32"]


class RunConfig(_Strict):
    data: DataSettings
    model: ModelSettings
    checkpoint: CheckpointSettings
    dataset_version: Annotated[str, Field(min_length=1)]
    """The data version (DVC md5 of the shard set) this run trains on; recorded in every checkpoint
    and metric record."""
    max_steps: Annotated[int, Field(gt=0)]
    """Optimizer steps of the whole run (a resumed run continues to the same total)."""
    validation: ValidationSettings = ValidationSettings()
    optimizer: OptimizerSettings = OptimizerSettings()
    schedule: ScheduleSettings = ScheduleSettings()
    precision: Precision = "auto"
    """auto: bf16 autocast on a CUDA device that supports it, else fp16 autocast with a GradScaler on
    CUDA, fp32 on CPU. Weights and optimizer state stay fp32 in every mode."""
    gradient_checkpointing: bool = False
    compile: bool = False
    """torch.compile the model (the first steps are slower while it compiles)."""
    compile_backend: Literal["inductor", "aot_eager"] = "inductor"
    """inductor generates fused kernels (the point of compiling); aot_eager traces the same forward and
    backward graphs without generating code: it tells a tracing problem from a code-generation one, and
    compiles in seconds instead of minutes."""
    seed: Annotated[int, Field(ge=0)] = 0
    """Seed of the weight init and of dropout (per rank: seed + rank)."""
    log_interval: Annotated[int, Field(gt=0)] = 10
    metrics_file: str | None = None
    """JSON lines, one record per logged step and per evaluation; None = `<checkpoint.dir>/metrics.jsonl`."""
    log_sample_ids: bool = False
    """Also write every step's sample ids per rank to `<checkpoint.dir>/samples-rank<r>.jsonl`, to
    compare the data order of two runs."""
    deterministic: bool = False
    """torch.use_deterministic_algorithms(True): bit-identical reruns on CPU, slower on GPU."""
    cpu_threads: Annotated[int, Field(gt=0)] | None = None
    """torch intra-op threads per process; None = torch's default (all cores)."""

    @model_validator(mode="after")
    def _batch_divides(self) -> RunConfig:
        if self.data.global_batch_size % self.data.micro_batch_size:
            raise ValueError(
                f"data.global_batch_size ({self.data.global_batch_size}) must be a multiple of "
                f"data.micro_batch_size ({self.data.micro_batch_size})"
            )
        return self

    @property
    def metrics_path(self) -> Path:
        return Path(self.metrics_file) if self.metrics_file else Path(self.checkpoint.dir) / "metrics.jsonl"

    def to_json_dict(self) -> dict[str, Any]:
        """The validated config as plain JSON types (recorded in every checkpoint)."""
        return self.model_dump(mode="json")


# Keys holding paths: made absolute against the config file's directory (URLs such as s3:// are kept).
_PATH_KEYS = (("data", "data_dir"), ("data", "cache", "dir"), ("data", "media", "tokenizer_path"),
              ("model", "model_path"), ("checkpoint", "dir"), ("metrics_file",))


def _format_errors(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        where = "".join(f"[{k}]" if isinstance(k, int) else ("." if i else "") + str(k) for i, k in enumerate(e["loc"]))
        msg = "unknown key" if e["type"] == "extra_forbidden" else e["msg"]
        lines.append(f"  {where or '<top level>'}: {msg}")
    return "invalid run config:\n" + "\n".join(lines)


def _apply_overrides(raw: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    merged = json.loads(json.dumps(raw))  # a deep copy that cannot alias the caller's lists
    for dotted, value in overrides.items():
        *parents, leaf = dotted.split(".")
        node = merged
        for i, part in enumerate(parents):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise RunConfigError(f"override {dotted!r}: {'.'.join(parents[: i + 1])} is not a mapping")
            node = child
        node[leaf] = value
    return merged


def _resolve_paths(raw: dict[str, Any], base_dir: Path) -> None:
    for keys in _PATH_KEYS:
        node: Any = raw
        for key in keys[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(node.get(keys[-1]), str) and "://" not in node[keys[-1]]:
            node[keys[-1]] = str((base_dir / os.path.expanduser(node[keys[-1]])).resolve())


def parse_run_config(
    raw: Any, base_dir: str | os.PathLike[str], overrides: Mapping[str, Any] | None = None
) -> RunConfig:
    """Validate a raw mapping; relative paths (also in `overrides`) are taken against `base_dir`."""
    if not isinstance(raw, dict):
        raise RunConfigError(f"invalid run config: the top level must be a mapping, got {type(raw).__name__}")
    merged = _apply_overrides(raw, overrides or {})
    _resolve_paths(merged, Path(base_dir))
    try:
        return RunConfig.model_validate(merged)
    except ValidationError as err:
        raise RunConfigError(_format_errors(err)) from None


def load_run_config(path: str | os.PathLike[str], overrides: Mapping[str, Any] | None = None) -> RunConfig:
    """Load a YAML or JSON run config file (JSON is valid YAML) and validate it."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise RunConfigError(f"cannot read run config {path}: {err.strerror}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise RunConfigError(f"run config {path} is not valid YAML/JSON: {err}") from None
    return parse_run_config(raw, path.parent, overrides)


def parse_override(text: str) -> tuple[str, Any]:
    """`key.sub=value` from the command line; the value is parsed as YAML (`3`, `true`, `[1, 2]`)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise RunConfigError(f"override {text!r}: expected key=value, e.g. optimizer.lr=1e-3")
    return key.strip(), yaml.safe_load(value)
