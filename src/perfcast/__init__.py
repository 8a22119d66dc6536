"""perfcast: predict the performance of ML workloads on hardware you may not have.

The public API (every command of the CLI is a thin shell over these)::

    from perfcast import load_model, load_hardware, build_workload, predict, StepRequest

    step = predict(StepRequest(model="gpt2-large", hardware="a100-pcie-40gb", mode="inference",
                               batch_size=4, seq_len=1024))
    step.time_s, step.low_s, step.high_s
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the real imports, for type checkers; at run time names load on first use
    from perfcast.catalog.hardware import Hardware, list_hardware, load_hardware
    from perfcast.catalog.models import ModelConfig, list_models, load_model
    from perfcast.coefficients.bundle import Calibration
    from perfcast.compose.predict import StepRequest
    from perfcast.compose.step import predict_step
    from perfcast.compose.types import OpTime, StepTime
    from perfcast.dtypes import DType
    from perfcast.errors import (
        CatalogError,
        ConfigError,
        DataError,
        PerfcastError,
        UnknownNameError,
        UnsupportedError,
    )
    from perfcast.kernel.predict import KernelTime, predict_kernel, predict_ops
    from perfcast.scenarios.run import run_scenario
    from perfcast.system.predict import predict
    from perfcast.workload.build import WorkloadSpec, build_workload
    from perfcast.workload.types import Mode, Op, OpKind, Phase, Workload

_WHERE = {
    "Hardware": "perfcast.catalog.hardware", "list_hardware": "perfcast.catalog.hardware",
    "load_hardware": "perfcast.catalog.hardware", "ModelConfig": "perfcast.catalog.models",
    "list_models": "perfcast.catalog.models", "load_model": "perfcast.catalog.models",
    "Calibration": "perfcast.coefficients.bundle",
    "StepRequest": "perfcast.compose.predict", "predict": "perfcast.system.predict",
    "predict_step": "perfcast.compose.step", "OpTime": "perfcast.compose.types", "StepTime": "perfcast.compose.types",
    "DType": "perfcast.dtypes", "CatalogError": "perfcast.errors", "ConfigError": "perfcast.errors",
    "DataError": "perfcast.errors", "PerfcastError": "perfcast.errors", "UnknownNameError": "perfcast.errors",
    "UnsupportedError": "perfcast.errors", "KernelTime": "perfcast.kernel.predict",
    "predict_kernel": "perfcast.kernel.predict", "predict_ops": "perfcast.kernel.predict",
    "run_scenario": "perfcast.scenarios.run", "WorkloadSpec": "perfcast.workload.build",
    "build_workload": "perfcast.workload.build", "Mode": "perfcast.workload.types", "Op": "perfcast.workload.types",
    "OpKind": "perfcast.workload.types", "Phase": "perfcast.workload.types", "Workload": "perfcast.workload.types",
}


def __getattr__(name: str) -> Any:
    """Load a public name on first use (keeps ``import perfcast`` and the CLI start-up light)."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'perfcast' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__version__ = "0.1.0"

__all__ = [
    "Calibration",
    "CatalogError",
    "ConfigError",
    "DType",
    "DataError",
    "Hardware",
    "KernelTime",
    "Mode",
    "ModelConfig",
    "Op",
    "OpKind",
    "OpTime",
    "PerfcastError",
    "Phase",
    "StepRequest",
    "StepTime",
    "UnknownNameError",
    "UnsupportedError",
    "Workload",
    "WorkloadSpec",
    "build_workload",
    "list_hardware",
    "list_models",
    "load_hardware",
    "load_model",
    "predict",
    "predict_kernel",
    "predict_ops",
    "predict_step",
    "run_scenario",
]
