"""What a CPU entry of the hardware catalog adds: efficiencies fitted by ``perfcast calibrate``.

A GPU is priced from its datasheet and global coefficients; a CPU's achieved
rates depend on its vector units, caches, threads and BLAS library, so its
entry carries the rates ``perfcast calibrate`` measured with microbenchmarks on
that machine (GEMM, elementwise, reductions, convolutions, fused attention).
All values are base SI units: seconds, bytes, bytes/s, FLOP/s.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["LOCAL_CPU_ID", "CpuEfficiency"]

LOCAL_CPU_ID = "local-cpu"  # the entry `perfcast calibrate` writes for the machine it runs on


class CpuEfficiency(BaseModel):
    """Fitted CPU cost model (see :mod:`perfcast.kernel.cpu` for the formulas that use it).

    GEMM: ``time = fixed + smooth_max(flops / (peak * eff), memory)`` with
    ``eff = m/(m+m0) * n/(n+n0) * k/(k+k0)`` and ``peak`` the hardware's fitted
    ``peak_flops_per_s``. Memory: ``bytes / cache_bandwidth`` up to
    ``cache_bytes`` and ``bytes / memory_bandwidth`` beyond (the hardware's
    ``memory_bandwidth_Bps``). Vector kernels: ``fixed + memory * op_factor``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    threads: int = Field(ge=1, description="torch intra-op threads the rates were measured with")
    gemm_fixed_s: float = Field(ge=0, description="fixed cost of one GEMM call (dispatch, packing), seconds")
    gemm_m0: float = Field(ge=0, description="rows at which GEMM efficiency halves")
    gemm_n0: float = Field(ge=0, description="columns at which GEMM efficiency halves")
    gemm_k0: float = Field(ge=0, description="reduction length at which GEMM efficiency halves")
    cache_bandwidth_Bps: float = Field(gt=0, description="streaming bandwidth of data that fits in cache")
    cache_bytes: float = Field(gt=0, description="bytes streamed at cache bandwidth before DRAM takes over")
    vector_fixed_s: float = Field(ge=0, description="fixed cost of one elementwise or reduction call, seconds")
    op_factor: dict[str, float] = Field(default_factory=dict,
                                        description="time relative to a streaming add of the same bytes, by op class "
                                                    "(stream, transcendental, reduction, pool, gather)")
    conv_efficiency: float = Field(gt=0, description="convolution speed relative to the GEMM of its implicit GEMM")
    conv_pointwise_efficiency: float = Field(gt=0, description="the same for 1x1 convolutions (a plain GEMM)")
    conv_fixed_s: float = Field(ge=0, description="fixed cost of one convolution call, seconds")
    conv_m0: float | None = Field(None, ge=0, description="rows of the implicit GEMM (batch x output pixels) at "
                                                          "which convolution efficiency halves (oneDNN's direct "
                                                          "kernels block differently from the BLAS GEMM; None: "
                                                          "gemm_m0)")
    conv_n0: float | None = Field(None, ge=0, description="output channels at which it halves (None: gemm_n0)")
    conv_k0: float | None = Field(None, ge=0, description="input channels x kernel area at which it halves "
                                                          "(None: gemm_k0)")
    gemm_in_out_factor: float = Field(1.0, gt=0,
                                      description="time of a product whose weight is stored (in, out), as GPT-2's "
                                                  "Conv1D calls addmm(x, W), relative to nn.Linear's (out, in) "
                                                  "weight at the same shape")
    attention_efficiency: float = Field(gt=0, description="fused attention (SDPA) FLOP rate relative to the GEMM peak")
    attention_fixed_s: float = Field(ge=0, description="fixed cost of one SDPA call, seconds")
    attention_causal_factor: float = Field(1.0, gt=0,
                                           description="time of a causal SDPA call relative to the FLOPs of its "
                                                       "causal (query, key) pairs at attention_efficiency: about 2 "
                                                       "when the causal mask is passed as a tensor (as transformers "
                                                       "does), so the kernel computes every pair")
    page_fault_s: float = Field(0.0, ge=0, description="seconds to map one 4 KiB page of fresh memory on its first "
                                                        "write (the kernel's page fault and zeroing)")
    fresh_output_bytes: float = Field(32 * 2**20, gt=0,
                                      description="outputs at least this large are written to freshly mapped "
                                                  "pages on every call (glibc malloc serves them with mmap and "
                                                  "unmaps them when freed), bytes")
    fit_error_frac: dict[str, float] = Field(default_factory=dict,
                                             description="median relative error of the fit per benchmark family")
