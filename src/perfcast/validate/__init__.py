"""Validation: error metrics of the predicted ground-truth tables, fitting of coefficients, validation.json.

The tables are read and predicted by :mod:`perfcast.groundtruth`. No layer imports this package; it imports the
layers it checks.
"""
