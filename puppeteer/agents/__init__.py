"""Agents and pools: pool files, agent cards, reasoning patterns and program-of-thought, availability."""
