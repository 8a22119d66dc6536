"""perfcast: predict the performance of ML workloads on hardware you may not have.

The public API (every command of the CLI is a thin shell over these)::

    from perfcast import load_model, load_hardware, build_workload, predict, StepRequest

    step = predict(StepRequest(model="gpt2-large", hardware="a100-pcie-40gb", mode="inference",
                               batch_size=4, seq_len=1024))
    step.time_s, step.low_s, step.high_s
"""

from perfcast.catalog.hardware import Hardware, list_hardware, load_hardware
from perfcast.catalog.models import ModelConfig, list_models, load_model
from perfcast.compose.predict import StepRequest, predict
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
from perfcast.scenarios import run_scenario
from perfcast.workload.build import WorkloadSpec, build_workload
from perfcast.workload.types import Mode, Op, OpKind, Phase, Workload

__version__ = "0.1.0"

__all__ = [
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
