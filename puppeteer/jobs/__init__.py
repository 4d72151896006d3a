"""Jobs: configuration in, run directory out. Each builds its env, policy and trainer with
:mod:`puppeteer.jobs.builder`. Jobs sit above :mod:`puppeteer.train` and :mod:`puppeteer.analytics`
and below the command line (:mod:`puppeteer.cli`), which they never import.

* :mod:`puppeteer.jobs.train` — the training job behind ``puppeteer train``;
  :mod:`puppeteer.jobs.hydra_entry` runs it under Hydra, and :mod:`puppeteer.jobs.conductor_entry`
  runs the conductor track (``track=conductor``, GRPO) under Hydra.
* :mod:`puppeteer.jobs.sweep` — ``puppeteer sweep``: one training run per (lambda, seed), then the
  analysis of :mod:`puppeteer.analytics.sweep`.
* :mod:`puppeteer.jobs.quickstart` — ``puppeteer quickstart`` on real local models.
* :mod:`puppeteer.jobs.outcomes` — ``puppeteer outcomes build``: a pool's shipped outcome table.
"""
