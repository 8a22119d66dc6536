"""Replay a PyTorch profiler (Kineto) trace, on its own GPU or repriced for another (``perfcast replay``)."""
