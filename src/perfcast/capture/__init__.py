"""The user's own model as workload IR: a torch.nn.Module (torch.fx or torch.export) or an ONNX file.

``perfcast capture`` records a model's operators with their shapes and turns
them into the same :class:`~perfcast.workload.types.Op` values the catalog's
builders emit (through :class:`~perfcast.workload.graph.Graph`), so a captured
model predicts on any device of the catalog exactly like a built one. torch and
onnx are imported only when a capture runs.
"""

from perfcast.capture.emit import Call, Emitter
from perfcast.capture.io import load_factory, load_workload, save_workload, workload_from_dict, workload_to_dict
from perfcast.capture.onnx_graph import capture_onnx
from perfcast.capture.torch_graph import METHODS, capture_module

__all__ = ["METHODS", "Call", "Emitter", "capture_module", "capture_onnx", "load_factory", "load_workload",
           "save_workload", "workload_from_dict", "workload_to_dict"]
