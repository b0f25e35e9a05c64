"""Split stage logic (Dagster-free): seeded-hash train/validation/test assignment and leak checks.

Entry points: `assignment.with_splits(table, settings, prior=None)` / `assign_splits(...)`,
`assignment.split_counts(...)`; `leakage.LeakageChecker(near, exact, settings.leakage)`
(`.add_batch`, `.finish() -> LeakageReport` with `.ok`, `.exact_pairs`, `.near_pairs`, `.image_pairs`,
`.summary()`).
"""
