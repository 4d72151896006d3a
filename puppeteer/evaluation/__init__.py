"""Evaluation: the evaluator (evaluate.py), where its items run (executors.py), several evaluations at once,
paired statistics."""
