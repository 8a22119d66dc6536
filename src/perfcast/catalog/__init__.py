"""Catalogs: hardware and model descriptions shipped as data files.

Hardware is one YAML file per device under ``perfcast/data/hardware`` (base SI units,
each with its ``source``); models are Hugging Face ``config.json`` files under
``perfcast/data/models`` with a sidecar YAML naming their source and aliases. Users add
their own by passing a file path, or by placing files in the user catalog: ``~/.perfcast/catalog``, or the
directories listed in ``PERFCAST_CATALOG`` instead (``<dir>/hardware/*.yaml``, ``<dir>/models/*.json``).
"""

from perfcast.catalog.hardware import Hardware, Interconnect, PeakFlops, list_hardware, load_hardware
from perfcast.catalog.models import ModelConfig, list_models, load_model

__all__ = [
    "Hardware",
    "Interconnect",
    "ModelConfig",
    "PeakFlops",
    "list_hardware",
    "list_models",
    "load_hardware",
    "load_model",
]
