"""A table of request lengths (and maybe arrival times): what every workload source produces."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Trace"]


@dataclass(frozen=True, eq=False)
class Trace:
    """Per-request token counts (int64, >= 1) and, when the trace has them, arrival times (float64, s)."""

    name: str
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    arrival_s: np.ndarray | None
    source: str

    @property
    def num_requests(self) -> int:
        """Number of rows (requests) in the trace."""
        return int(self.prompt_tokens.shape[0])
