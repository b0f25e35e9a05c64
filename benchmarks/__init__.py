"""Benchmarks: our implementation vs a peer library, on the same input, in the same run.

``python -m benchmarks list`` names them; ``python -m benchmarks run NAME --corpus PATH`` runs one.
See README.md here and harness.py for the protocol; each other module defines one benchmark.
"""
