"""Outcome tables that the project did not build itself: read, check and import logged outcomes.

- :mod:`puppeteer.outcomes.table`: the :class:`LoggedTable` value (prompts x models: score, cost),
  read from a long or wide CSV / JSONL / Parquet file and checked;
- :mod:`puppeteer.outcomes.importer`: a checked table written as a pool, a suite and the table
  they replay (``puppeteer outcomes import``), all at once or not at all.
"""

from puppeteer.outcomes.table import LoggedTable, ReadOptions, read_logged

__all__ = ["LoggedTable", "ReadOptions", "read_logged"]
