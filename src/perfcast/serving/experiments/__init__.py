"""Experiments built on the serving simulator: the max-QPS search (:mod:`~perfcast.serving.experiments.search`),
two models sharing GPUs (:mod:`~perfcast.serving.experiments.colocation`), MLPerf scenarios
(:mod:`~perfcast.serving.experiments.mlperf`) and an RLHF iteration (:mod:`~perfcast.serving.experiments.rlhf`)."""

__all__: list[str] = []
