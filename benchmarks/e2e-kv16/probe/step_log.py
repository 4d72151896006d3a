"""Run a script with every decode step of the batched engine logged (a probe, not part of the package).

    STEP_LOG=steps.jsonl python step_log.py experiments/baselines-local/baselines_table.py ARGS...

Each line of ``STEP_LOG``: [perf_counter at the start, model, sequences in the batch, tokens in the
batch, seconds the step took]. A step with more tokens than sequences holds prompt tokens (prefill).
"""

import json
import os
import runpy
import sys
import time

from puppeteer.backends.llamacpp import continuous

_SINK = open(os.environ["STEP_LOG"], "w")  # noqa: SIM115 - open for the life of the process
_STEP = continuous.ContinuousBatcher._step


def _logged_step(self: continuous.ContinuousBatcher) -> None:
    entries = self._batch()  # what the step will decode (the step builds the same batch again)
    if not entries:
        return
    start = time.perf_counter()
    _STEP(self)
    seconds = time.perf_counter() - start
    tokens = sum(len(e.tokens) for _, e in entries)
    _SINK.write(json.dumps([round(start, 3), self.name, len(entries), tokens, round(seconds, 4)]) + "\n")
    _SINK.flush()


continuous.ContinuousBatcher._step = _logged_step  # type: ignore[method-assign]
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
