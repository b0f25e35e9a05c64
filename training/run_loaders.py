"""The training run's loaders from its config: the `data` section as the training loader, the
`validation` split as the evaluation loader (packed token shards, or media shards collated for the
model family)."""

from __future__ import annotations

from training.config import RunConfig, RunConfigError
from training.data.loader import CacheConfig, LoaderConfig, PackedLoader
from training.data.media_loader import MediaLoader
from training.distributed import DistEnv
from training.media_training import MediaInputs, media_loader_config


def loader_config(cfg: RunConfig, split: str | None = None) -> LoaderConfig:
    data = cfg.data
    if split is None:
        return LoaderConfig(
            data_dir=data.data_dir, split=data.split, global_batch_size=data.global_batch_size,
            micro_batch_size=data.micro_batch_size, seed=data.seed, weights=data.weights,
            samples_per_epoch=data.samples_per_epoch, num_workers=data.num_workers,
            verify=data.verify, on_corrupt=data.on_corrupt, collate=data.collate,
            pad_to_multiple_of=data.pad_to_multiple_of,
            shuffle=data.shuffle, block_shards=data.block_shards, cache=cache_config(cfg),
        )
    # Evaluation: the split's natural mixture (weights name training sources), no workers (a few
    # batches, read once per eval), the same batch geometry and corruption handling as training.
    return LoaderConfig(
        data_dir=data.data_dir, split=split, global_batch_size=data.global_batch_size,
        micro_batch_size=data.micro_batch_size, seed=data.seed, collate=data.collate,
        pad_to_multiple_of=data.pad_to_multiple_of,
        verify=data.verify, on_corrupt=data.on_corrupt, cache=cache_config(cfg),
    )


def cache_config(cfg: RunConfig) -> CacheConfig | None:
    c = cfg.data.cache
    if c is None:
        return None
    return CacheConfig(dir=c.dir, max_bytes=c.max_bytes, prefetch_steps=c.prefetch_steps,
                       max_attempts=c.download_attempts, endpoint_url=c.endpoint_url, region=c.region,
                       request_attempts=c.max_attempts)


def open_loader(loader_cfg: LoaderConfig, env: DistEnv, section: str,
                 media: MediaInputs | None = None, train: bool = True) -> PackedLoader | MediaLoader:
    """The loader's own errors name the field; say which section of the run config it came from.
    `media`: a media shard set, read with the media loader and collated for the model family."""
    try:
        if media is None:
            return PackedLoader(loader_cfg, rank=env.rank, world_size=env.world_size)
        collate = media.train_collate if train else media.eval_collate
        return MediaLoader(media_loader_config(loader_cfg, media), collate, rank=env.rank, world_size=env.world_size)
    except ValueError as err:  # LoaderConfigError, ShardIndexError, MediaIndexError, MixtureError
        raise RunConfigError(f"{section} (split {loader_cfg.split!r} of {loader_cfg.data_dir}): {err}") from err
