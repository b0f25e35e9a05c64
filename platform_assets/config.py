"""The pipeline config: one YAML file for sources, stage parameters and storage locations.

Validation is strict (unknown keys and wrong types are errors) and errors name the offending key,
e.g. ``sources[1] (name='web').text_field: Input should be a valid string``. Structure is checked
when the file is loaded; paths are checked by :meth:`PipelineConfig.check_source_paths` just before
a source is read, so a missing path fails that run fast with the source's name, while the Dagster
code location (which loads the config for sensors and partitions) keeps loading.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from platform_assets.cleaning.language_tags import normalised_language_keys
from platform_assets.cleaning.recipes import Recipe, recipe_names, resolve_recipe
from platform_assets.cleaning.settings import CleaningSettings
from platform_assets.contracts import SOURCE_NAME_PATTERN, IOSettings, StrictModel
from platform_assets.dedup.settings import DedupSettings
from platform_assets.ingest.file_partitions import SourcePartition, parse_partition_key, partition_keys
from platform_assets.ingest.settings import (
    CsvSource,
    FolderSource,
    HuggingFaceSource,
    IngestSettings,
    JsonlSource,
    ParquetSource,
    SourceConfig,
    SourceConfigType,
    TextSource,
)
from platform_assets.media.settings import MediaSettings
from platform_assets.media_shards.settings import MediaShardSettings
from platform_assets.packing.settings import PackingSettings
from platform_assets.splits.settings import SplitSettings
from platform_assets.stats.settings import StatisticsSettings
from platform_assets.storage import S3_MAX_ATTEMPTS, S3Settings
from platform_assets.tokenize.settings import TokenizerSettings, TokenizeSettings
from platform_assets.training_launch.settings import TrainingLaunchSettings
from platform_assets.versioning.settings import VersioningSettings

DEFAULT_CONFIG_ENV = "PLATFORM_CONFIG"
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG_PATH = REPO_ROOT / "configs" / "sample.yaml"

__all__ = [  # the source models live with ingest; importable from here as before
    "SOURCE_NAME_PATTERN", "CsvSource", "FolderSource", "HuggingFaceSource", "JsonlSource", "ParquetSource",
    "TextSource", "IngestSettings", "IOSettings",
]

# Keys that moved to the `io:` section: one batch size, compression and part size for every stage.
MOVED_TO_IO = {
    "ingest": ("batch_rows", "batch_bytes", "part_max_bytes", "compression"),
    "dedup": ("batch_rows",),
    "tokenize": ("batch_rows",),
}


class ConfigError(ValueError):
    """The config file is missing, unparsable or invalid; the message names the key."""


class S3Options(StrictModel):
    endpoint_url: str | None = None
    """For MinIO or a local moto server; credentials come from the standard AWS environment."""
    region: str = "us-east-1"
    max_attempts: Annotated[int, Field(ge=1)] = S3_MAX_ATTEMPTS
    """Attempts per S3 request, with exponential backoff (AWS's standard retry mode): 5 ride out a few
    seconds of a refused or resetting endpoint; a longer outage fails the step and its retry policy re-runs it."""


class StorageConfig(StrictModel):
    root: str = "../data"
    """Where every asset writes: a local directory (relative to the config file) or s3://bucket/prefix."""
    s3: S3Options = S3Options()


class CleaningGates(StrictModel):
    """Bounds of the blocking checks on cleaned_documents: a broken rule cannot silently empty a source."""

    max_removal_rate: Annotated[float, Field(ge=0, le=1)] = 0.9
    """Share of a source's documents that cleaning may remove in all."""
    max_rule_removal_rate: Annotated[float, Field(ge=0, le=1)] = 0.6
    """Share of the documents entering a rule group (c4, gopher_quality, language, ...) it may remove."""
    rule_bounds: dict[str, Annotated[float, Field(ge=0, le=1)]] = {}
    """Per rule group or full rule name (`language`, `c4.curly_bracket`): overrides the default."""
    language_shares: dict[str, tuple[float, float]] = {}
    """Expected (min, max) share of kept documents per language, e.g. `en: [0.5, 1.0]`. Keys are
    BCP-47 tags read like `cleaning.language.allow` entries (language_tags.py): `NB` is `nb`, `no`
    counts nb and nn, `zh-Hans` the simplified Chinese (and shared-character) documents; a language
    with no kept document has share 0."""

    @field_validator("language_shares")
    @classmethod
    def _shares_by_reported_tag(cls, shares: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
        for key, (lo, hi) in shares.items():
            if not (0 <= lo <= 1 and 0 <= hi <= 1):
                raise ValueError(f"language_shares.{key}: shares are between 0 and 1, got [{lo}, {hi}]")
            if lo > hi:
                raise ValueError(f"language_shares.{key}: min {lo} is above max {hi}")
        return normalised_language_keys(shares, "cleaning_gates.language_shares")  # type: ignore[return-value]


class PipelineConfig(StrictModel):
    storage: StorageConfig = StorageConfig()
    sources: list[SourceConfig]
    io: IOSettings = IOSettings()
    ingest: IngestSettings = IngestSettings()
    media: MediaSettings = MediaSettings()
    cleaning: CleaningSettings = CleaningSettings()
    cleaning_gates: CleaningGates = CleaningGates()
    dedup: DedupSettings = DedupSettings()
    splits: SplitSettings = SplitSettings()
    statistics: StatisticsSettings = StatisticsSettings()
    tokenizer: TokenizerSettings = TokenizerSettings()
    tokenize: TokenizeSettings = TokenizeSettings()
    packing: PackingSettings = PackingSettings()
    media_shards: MediaShardSettings = MediaShardSettings()
    versioning: VersioningSettings = VersioningSettings()
    training: TrainingLaunchSettings = TrainingLaunchSettings()
    config_dir: Path = Field(default=Path("."), exclude=True)
    """Directory of the config file: relative paths resolve against it. Set by the loader."""

    @field_validator("sources")
    @classmethod
    def _names_unique(cls, sources: list[Any]) -> list[Any]:
        seen: set[str] = set()
        for s in sources:
            if s.name in seen:
                raise ValueError(f"source name {s.name!r} is used twice")
            seen.add(s.name)
        return sources

    @model_validator(mode="after")
    def _source_recipes_known(self) -> PipelineConfig:
        for s in self.sources:
            if s.recipe is not None and s.recipe not in recipe_names(self.cleaning):
                raise ValueError(f"source {s.name!r}: unknown cleaning recipe {s.recipe!r} "
                                 f"(known: {', '.join(recipe_names(self.cleaning))})")
        return self

    def source(self, name: str) -> SourceConfigType:
        for s in self.sources:
            if s.name == name:
                return s
        raise KeyError(f"no source named {name!r} in the config (known: {', '.join(self.source_names())})")

    def source_names(self) -> list[str]:
        return [s.name for s in self.sources]

    def partition_keys(self) -> list[str]:
        """Every per-source partition key: a source's name, or its file partitions' keys
        (`file_partitions`; ingest/file_partitions.py), in config order."""
        return partition_keys(self.sources)

    def source_partition(self, key: str) -> SourcePartition:
        """The source (and file partition) a partition key names; PartitionKeyError if it is not one
        of this config's keys."""
        return parse_partition_key(self.sources, key)

    def resolve(self, path: str) -> str:
        """A config path made absolute: URIs as they are, local paths against the config's folder."""
        if "://" in path:
            return path
        p = Path(os.path.expanduser(path))
        return str(p if p.is_absolute() else (self.config_dir / p).resolve())

    @property
    def storage_root(self) -> str:
        return self.resolve(self.storage.root)

    def cleaning_recipe(self, source: str | None = None) -> Recipe:
        """The cleaning recipe of `source` (None: the default recipe), paths resolved (cleaning_settings)."""
        recipe = resolve_recipe(self.cleaning, self.source(source).recipe if source is not None else None)
        return replace(recipe, settings=self.cleaning_settings(recipe.settings))

    def cleaning_settings(self, settings: CleaningSettings | None = None) -> CleaningSettings:
        """The cleaning settings (the global block unless given) with a relative blocklist path resolved
        against the config's folder."""
        settings = settings if settings is not None else self.cleaning
        path = settings.blocklist.path
        if path is None or "://" in path:
            return settings
        blocklist = settings.blocklist.model_copy(update={"path": self.resolve(path)})
        return settings.model_copy(update={"blocklist": blocklist})

    def tokenizer_settings(self) -> TokenizerSettings:
        """The tokenizer settings with a local `path` and a chat_template file made absolute; a hub id stays
        as it is."""
        tokenizer = self.tokenizer
        template_file = tokenizer.chat_template_file()
        if template_file is not None:
            tokenizer = tokenizer.model_copy(update={"chat_template": self.resolve(template_file)})
        path = tokenizer.path
        if path is None or "://" in path or os.path.isabs(path):
            return tokenizer
        local = self.resolve(path)
        if not os.path.exists(local) and not path.startswith((".", "~")) and path.count("/") <= 1:
            return tokenizer  # `org/name`: a hub id, looked up in the local Hugging Face cache
        return tokenizer.model_copy(update={"path": local})

    def s3_settings(self) -> S3Settings:
        return S3Settings(endpoint_url=self.storage.s3.endpoint_url, region=self.storage.s3.region,
                          max_attempts=self.storage.s3.max_attempts)

    def source_location(self, name: str) -> str:
        src = self.source(name)
        if isinstance(src, HuggingFaceSource) and src.is_remote():
            return src.path  # a hub id, resolved by `datasets`
        return self.resolve(src.path)

    def check_source_paths(self, names: list[str] | None = None) -> None:
        """Fail fast, naming the source, when a local source path does not exist."""
        for name in names or self.source_names():
            src = self.source(name)
            if src.is_remote():
                continue
            location = self.resolve(src.path)
            if _has_glob(location):
                import glob

                if not glob.glob(location, recursive=True):
                    raise ConfigError(f"source {name!r}: no file matches {src.path!r} (resolved to {location})")
            elif not Path(location).exists():
                raise ConfigError(f"source {name!r}: path {src.path!r} does not exist (resolved to {location})")


def _has_glob(path: str) -> bool:
    return any(c in path for c in "*?[")


def _format_errors(err: ValidationError, raw: dict[str, Any]) -> str:
    lines = []
    for e in err.errors():
        parts: list[str] = []
        loc = list(e["loc"])
        node: Any = raw
        i = 0
        while i < len(loc):
            key = loc[i]
            if isinstance(key, int):
                label = f"[{key}]"
                if isinstance(node, list) and key < len(node):
                    node = node[key]
                    if isinstance(node, dict) and "name" in node:
                        label += f" (name={node['name']!r})"
                    # pydantic inserts the union tag (e.g. 'jsonl') after a list index: skip it
                    if i + 1 < len(loc) and isinstance(node, dict) and loc[i + 1] == node.get("format"):
                        i += 1
                parts.append(label)
            else:
                parts.append(("." if parts else "") + str(key))
                node = node.get(key) if isinstance(node, dict) else None
            i += 1
        where = "".join(parts) or "<top level>"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        lines.append(f"  {where}: {msg}")
    return "invalid pipeline config:\n" + "\n".join(lines)


def parse_config(raw: dict[str, Any], config_dir: Path) -> PipelineConfig:
    if not isinstance(raw, dict):
        raise ConfigError("invalid pipeline config: the top level must be a mapping")
    moved = [f"  {section}.{key}: moved to io.{key}" for section, keys in MOVED_TO_IO.items()
             for key in keys if isinstance(raw.get(section), dict) and key in raw[section]]
    if moved:
        raise ConfigError("invalid pipeline config:\n" + "\n".join(moved))
    try:
        cfg = PipelineConfig.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(_format_errors(err, raw)) from None
    return cfg.model_copy(update={"config_dir": config_dir.resolve()})


def load_config(path: str | os.PathLike[str] | None = None) -> PipelineConfig:
    """Load and validate the config at `path`, $PLATFORM_CONFIG, or configs/sample.yaml."""
    path = Path(path or os.environ.get(DEFAULT_CONFIG_ENV) or DEFAULT_CONFIG_PATH)
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"cannot read pipeline config {path}: {err.strerror}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"pipeline config {path} is not valid YAML: {err}") from None
    return parse_config(raw, path.parent)


def default_config_path() -> str:
    return str(os.environ.get(DEFAULT_CONFIG_ENV) or DEFAULT_CONFIG_PATH)

