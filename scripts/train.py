"""Train the step-wise puppeteer (Hydra): python scripts/train.py pool=sim-paper suite=mix-paper lam=0.2"""

import sys

from puppeteer.errors import UserError
from puppeteer.jobs.hydra_entry import hydra_main

if __name__ == "__main__":
    try:
        hydra_main()
    except (UserError, ValueError) as e:
        sys.exit(f"error: {e}")
