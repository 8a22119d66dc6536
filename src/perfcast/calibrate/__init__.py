"""This machine's CPU as a catalog device: microbenchmarks with PyTorch, a fit, a hardware YAML.

``perfcast calibrate`` runs :func:`~perfcast.calibrate.bench.run_microbenchmarks`
(GEMMs at several shapes, elementwise ops, reductions, convolutions, fused
attention), fits :class:`perfcast.catalog.cpu.CpuEfficiency` to them with
:func:`~perfcast.calibrate.fit.fit_cpu`, and writes ``local-cpu.yaml`` with the
fitted peaks and the measurements as its source. The fit sees only the
microbenchmarks; whole models are for validation (``perfcast validate --local``).
torch is imported only when benchmarks run.
"""

from perfcast.calibrate.fit import CpuFit, Measurement, fit_cpu
from perfcast.calibrate.machine import LOCAL_CPU_ID, MachineInfo, build_hardware, default_path, probe_machine

__all__ = ["LOCAL_CPU_ID", "CpuFit", "MachineInfo", "Measurement", "build_hardware", "default_path", "fit_cpu",
           "probe_machine"]
