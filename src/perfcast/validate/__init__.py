"""Validation: ground-truth tables, prediction of every row, error metrics, fitting.

No layer imports this package; it imports the layers it checks.
"""
