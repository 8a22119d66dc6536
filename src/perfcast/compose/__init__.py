"""Layer 2: one device's step time from its kernels (fusion, launch and host overhead, intervals),
the step request; a step over several GPUs is system's (perfcast.system.predict)."""

from perfcast.compose.predict import StepRequest, predict
from perfcast.compose.step import predict_step
from perfcast.compose.types import OpTime, StepTime

__all__ = ["OpTime", "StepRequest", "StepTime", "predict", "predict_step"]
