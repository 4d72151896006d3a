"""Jobs: configuration in, run directory out. Each builds its env, policy and trainer with
:mod:`puppeteer.jobs.builder`.

* :mod:`puppeteer.jobs.train` — the training job behind ``puppeteer train`` / ``scripts/train.py``;
  :mod:`puppeteer.jobs.hydra_entry` runs it under Hydra (the conductor track dispatches to
  :mod:`puppeteer.train.conductor_entry`).
* :mod:`puppeteer.jobs.quickstart` — ``puppeteer quickstart`` on real local models.
* :mod:`puppeteer.jobs.study` and :mod:`puppeteer.jobs.offline_study` — the simulator studies
  behind ``scripts/sim_study.py`` and ``scripts/offline_study.py``.
"""
