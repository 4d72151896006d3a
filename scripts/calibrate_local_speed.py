"""Single-stream prefill and decode speed of the embedded models: ``puppeteer pool calibrate``.

The measurement is :mod:`puppeteer.jobs.calibrate`; this script passes its arguments to the command
(``--json PATH`` is ``--out PATH``).

    python scripts/calibrate_local_speed.py --json runs/speed.json
"""

import sys

from puppeteer.cli import main

if __name__ == "__main__":
    sys.exit(main(["pool", "calibrate", *sys.argv[1:]]))
