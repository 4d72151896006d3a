"""The real-model experiment (issue 14, experiments/local-experiment/README.md): train, baselines, report.

The job is :mod:`puppeteer.jobs.local_experiment` (``--help`` for its options).

    python experiments/local-experiment/local_experiment.py --out runs/local-v2-exp                \
        # all three steps
    python experiments/local-experiment/local_experiment.py --out runs/local-v2-exp --steps report \
        # re-draw only
"""

from puppeteer.jobs.local_experiment import main

if __name__ == "__main__":
    main()
