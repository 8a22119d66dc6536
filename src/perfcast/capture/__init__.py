"""The user's own model as workload IR: a torch.nn.Module (torch.fx or torch.export) or an ONNX file.

``perfcast capture`` records a model's operators with their shapes and turns
them into the same :class:`~perfcast.workload.types.Op` values the catalog's
builders emit (through :class:`~perfcast.workload.graph.Graph`), so a captured
model predicts on any device of the catalog exactly like a built one. Identical
consecutive layers merge into ops with ``count`` = layers, as the builders write
them (:mod:`perfcast.capture.merge`), and a captured forward trains like a
catalog model (:mod:`perfcast.capture.training`). torch and onnx are imported
only when a capture runs.

A PyTorch execution trace (``ExecutionTraceObserver`` JSON: the host op tree with shapes) becomes workload ops
per step as well (:mod:`perfcast.capture.execution_trace` reads it, :mod:`perfcast.capture.execution_ops` prices
its operators), which ``perfcast replay`` composes on a device.
"""

from perfcast.capture.emit import Call, Emitter
from perfcast.capture.execution_ops import EtStep, execution_trace_steps
from perfcast.capture.execution_trace import ExecutionTrace, load_execution_trace
from perfcast.capture.io import load_factory, load_workload, save_workload, workload_from_dict, workload_to_dict
from perfcast.capture.merge import block_runs, merge_repeated
from perfcast.capture.onnx_graph import capture_onnx
from perfcast.capture.torch_graph import METHODS, capture_module
from perfcast.capture.training import (
    CapturedTraining,
    captured_model_config,
    cast_workload,
    training_forward,
    training_workload,
)

__all__ = ["METHODS", "Call", "CapturedTraining", "Emitter", "EtStep", "ExecutionTrace", "block_runs",
           "capture_module", "capture_onnx", "captured_model_config", "cast_workload", "execution_trace_steps",
           "load_execution_trace", "load_factory", "load_workload", "merge_repeated", "save_workload",
           "training_forward", "training_workload", "workload_from_dict", "workload_to_dict"]
