"""One partition per configured source: adding a source to the YAML needs no code.

The sensor `source_files_sensor` (and the CLI's `run`, and the daily schedule) register every
configured source as a partition key; keys are the sources' names, or `<name>.00` ... for a source
split into file partitions (`file_partitions`; platform_assets/ingest/file_partitions.py), in the same
dimension, so no asset downstream changes shape.

The registered keys follow the config both ways: a key the config no longer has (a removed source, the
unsplit key of a source since split, or a bucket of an old split) is deleted from the partition set,
so the UI and backfills offer only partitions that can run (raw_documents refuses any other key). Its
runs and materialization events stay in the event log, and its output folder stays on storage, read
by nothing downstream (they read the config's keys); a key the config names again is registered again.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import dagster as dg

source_partitions = dg.DynamicPartitionsDefinition(name="source")


@dataclass(frozen=True)
class KeyChanges:
    """What registering a config's keys changes in the instance's `source` partition set."""

    added: list[str]
    retired: list[str]

    def requests(self) -> list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest]:
        """As a sensor's dynamic_partitions_requests (shown on its tick in the UI)."""
        return ([source_partitions.build_add_request(self.added)] if self.added else []) + \
            ([source_partitions.build_delete_request(self.retired)] if self.retired else [])


def key_changes(instance: dg.DagsterInstance, config_keys: Sequence[str]) -> KeyChanges:
    """The keys to add (in config order) and to retire (sorted) for the partition set to be `config_keys`."""
    known = instance.get_dynamic_partitions(source_partitions.name)
    wanted = set(config_keys)
    return KeyChanges([k for k in config_keys if k not in set(known)], sorted(k for k in known if k not in wanted))


def sync_source_keys(instance: dg.DagsterInstance, config_keys: Sequence[str]) -> KeyChanges:
    """Make the instance's partition set the config's keys now (the schedule and the CLI; the sensor
    returns `key_changes(...).requests()` instead)."""
    changes = key_changes(instance, config_keys)
    if changes.added:
        instance.add_dynamic_partitions(source_partitions.name, changes.added)
    for key in changes.retired:
        instance.delete_dynamic_partition(source_partitions.name, key)
    return changes
