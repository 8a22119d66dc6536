"""What happened to each request of a run: its first token, its finish, or its refusal with a reason.

Requests the deployment can never serve are refused at arrival (or when a preempted request outgrows the KV
cache), each with a reason in the same words for every request refused for it, so a run can count them.
"""

from __future__ import annotations

from enum import StrEnum

import numpy as np

from perfcast.errors import ConfigError
from perfcast.serving.request import Request

__all__ = ["RequestOutcomes", "RequestStatus", "count_reasons"]


class RequestStatus(StrEnum):
    """Where a request stands. A run's per-request status text is the status alone (``completed``) or the status
    with why (``rejected: <reason>: <its figures>``, ``incomplete: ...``); :meth:`of` reads it back."""

    PENDING = "pending"
    COMPLETED = "completed"
    REJECTED = "rejected"
    INCOMPLETE = "incomplete"

    @classmethod
    def of(cls, text: str) -> RequestStatus:
        """The status a status text starts with."""
        return cls(text.split(":", 1)[0])


def count_reasons(rejection: dict[int, tuple[str, str]]) -> dict[str, int]:
    """Requests refused per reason, the most frequent first (ties in the reason's order)."""
    counts: dict[str, int] = {}
    for reason, _ in rejection.values():
        counts[reason] = counts.get(reason, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


class RequestOutcomes:
    """Per request (indexed by id): times in s (NaN until they happen), tokens, replica and status."""

    def __init__(self, n: int) -> None:
        self.first_token_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        self.generated = np.zeros(n, dtype=np.int64)
        self.replica = np.full(n, -1, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.status: list[str] = [RequestStatus.PENDING.value] * n  # plain text: the run reports it
        self.rejection: dict[int, tuple[str, str]] = {}  # request id -> (the reason it was refused, its figures)

    def first_token(self, req: Request, now: float) -> None:
        """``req`` emitted its first token at ``now`` (s)."""
        req.first_token_s = now
        self.first_token_s[req.id] = now

    def finished(self, req: Request, now: float) -> None:
        """``req`` emitted its last token at ``now`` (s)."""
        req.finish_s = now
        self.finish_s[req.id] = now
        self.generated[req.id] = req.generated
        self.preemptions[req.id] = req.preemptions
        self.status[req.id] = RequestStatus.COMPLETED.value

    def refused(self, req: Request, reason: str, detail: str) -> None:
        """``req`` can never be served, for ``reason`` (``detail``: its own figures)."""
        self.status[req.id] = f"{RequestStatus.REJECTED}: {reason}: {detail}"
        self.rejection[req.id] = (reason, detail)

    def close(self) -> None:
        """The run ended: a ConfigError when every request was refused (nothing could be served, a workload
        that does not fit the deployment rather than a result); any request left is marked unfinished."""
        n = len(self.status)
        if n and len(self.rejection) == n:
            reasons = "; ".join(f"{k} {reason}" for reason, k in count_reasons(self.rejection).items())
            raise ConfigError(f"no request can be served: all {n} were rejected ({reasons}); the first: "
                              f"{self.rejection[0][1]}")
        for i in range(n):
            if self.status[i] == RequestStatus.PENDING:  # pragma: no cover - the loop drains every engine
                self.status[i] = f"{RequestStatus.INCOMPLETE}: the simulation ended with the request unfinished"

    def completed(self) -> np.ndarray:
        """Which requests completed (bool per request)."""
        return np.array([s == RequestStatus.COMPLETED for s in self.status], dtype=bool)
