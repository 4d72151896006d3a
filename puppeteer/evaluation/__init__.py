"""Evaluation: the evaluator (evaluate.py), several evaluations at once, paired statistics."""
