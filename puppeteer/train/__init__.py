"""Trainers: REINFORCE for the step-wise puppeteer (:mod:`~puppeteer.train.reinforce`), GRPO for the
conductor (:mod:`~puppeteer.train.grpo`), sb3 MaskablePPO (:mod:`~puppeteer.train.sb3`), and the typed
training config. Trainers sit above the core and analytics and below the jobs that run them
(tests/test_layering.py). Offline RWR from logged trajectories is a study module, not installed
(experiments/analytics/offline.py).
"""
