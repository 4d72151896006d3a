"""``python -m puppeteer``: the same command line as ``puppeteer``."""

import sys

from puppeteer.cli import main

sys.exit(main())
