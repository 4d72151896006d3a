"""Answering live questions: the orchestrator behind `puppeteer run` and the OpenAI-compatible endpoint."""
