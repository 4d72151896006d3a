"""Run a list of baselines on a pool and suites, write a markdown table to runs/baselines/<pool>/table.md.

The job is :mod:`puppeteer.jobs.baselines_table` (``--help`` for its options).

    python scripts/baselines_table.py                                  # real models: slow
    python scripts/baselines_table.py --pool sim-paper --suites arith mix-math-mmlu --n 100
    python scripts/baselines_table.py --pool sim-paper --specs vote:3 oracle single:gpt5-cot
"""

import sys
from pathlib import Path

from puppeteer.jobs.baselines_table import main

if __name__ == "__main__":
    sys.exit(main(root=Path(__file__).resolve().parent.parent))
