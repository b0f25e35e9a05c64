"""One partition per configured source: adding a source to the YAML needs no code.

The sensor `source_files_sensor` (and the CLI's `run`, and the daily schedule) register every
configured source as a partition key; keys are the sources' names, or `<name>.00` ... for a source
split into file partitions (`file_partitions`; platform_assets/ingest/file_partitions.py), in the same
dimension, so no asset downstream changes shape.
"""

import dagster as dg

source_partitions = dg.DynamicPartitionsDefinition(name="source")
