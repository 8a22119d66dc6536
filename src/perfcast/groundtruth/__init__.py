"""Ground truth and its predictions: find and read the measured tables (``shared/groundtruth``), recognize a table
by its columns and predict every row of it with the layers below, and measure this machine's CPU as ground truth.

``perfcast.validate`` (error metrics, fitting) and ``perfcast.scenarios`` (the suite) both build on it; it imports
neither.
"""
