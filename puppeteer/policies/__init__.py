"""Policies: what picks the next agent (step mode) or writes the workflow (workflow mode).

The protocol (:mod:`puppeteer.policies.protocol`), the spec registry (:mod:`puppeteer.policies.registry`),
the learned step-wise puppeteer (:mod:`~puppeteer.policies.puppeteer`), the conductor LM
(:mod:`~puppeteer.policies.conductor`), baselines and external (sb3) policies. Policies are core:
they import no trainer, job, analytics or CLI module (tests/test_layering.py).
"""
