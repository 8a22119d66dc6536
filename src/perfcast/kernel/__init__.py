"""Layer 1: per-op time on one device, from its public specs and fitted coefficients.

The model is a roofline refined by what real GPUs do: the clock a device can
sustain under its power limit, GEMM tiles and waves across SMs, the fixed cost
of the K loop, memory-bound vector kernels at a fitted fraction of peak
bandwidth, fused attention, state-space scans (Mamba's selective scan, Mamba-2's SSD) as a roofline of their
vector and matrix FLOPs against the bytes they stream (:mod:`perfcast.kernel.ssm`), and a minimum kernel time.
Coefficients are global (fitted on the visible kernel tables by ``perfcast fit``); nothing is tuned per
device, so an unseen GPU is predicted from its YAML alone.
"""

from perfcast.coefficients.kernel import Coefficients, load_coefficients
from perfcast.kernel.predict import KernelTime, predict_kernel, predict_ops

__all__ = ["Coefficients", "KernelTime", "load_coefficients", "predict_kernel", "predict_ops"]
