"""One partition per configured source: adding a source to the YAML needs no code.

The sensor `source_files_sensor` (and the CLI's `run`, and the daily schedule) register every
configured source as a partition key; keys are the sources' names.
"""

import dagster as dg

source_partitions = dg.DynamicPartitionsDefinition(name="source")
