"""Where a serving workload's requests come from, in one place: shipped and user traces
(:mod:`~perfcast.serving.sources.traces`), MLPerf presets as synthetic length tables
(:mod:`~perfcast.serving.sources.mlperf`), arrival processes (:mod:`~perfcast.serving.sources.arrivals`), all
producing the :class:`~perfcast.serving.sources.trace.Trace` value of :mod:`~perfcast.serving.sources.trace`.

A source never calls up into the simulator or an experiment built on it.
"""

__all__: list[str] = []
