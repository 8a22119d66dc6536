"""The benchmark client of a run: it sends each request at its arrival time, or in a closed loop later.

Requests arrive in a pre-generated, sorted stream read with a cursor (not pushed on the event heap). In a
closed loop (``concurrency`` = ``c``, a benchmark client's ``--max-concurrency``) at most ``c`` requests are
in the system (sent, neither finished nor rejected): when one leaves, the slot goes to the next request not
yet sent and not yet given a slot, sent at once if its time has passed.
"""

from __future__ import annotations

import math

__all__ = ["Client"]


class Client:
    """Sends the run's requests in order; ``times_s`` ends as the times they were sent (s)."""

    __slots__ = ("_limit", "_limit_n", "in_system", "n", "next_id", "times_s")

    def __init__(self, arrival_s: list[float], concurrency: int | None) -> None:
        self.times_s = arrival_s  # plain floats: the loop reads one per arrival
        self.n = len(arrival_s)
        self.next_id = 0  # the next request to send
        self._limit = concurrency or 0
        self._limit_n = self._limit or self.n + 1
        self.in_system = 0

    @property
    def closed_loop(self) -> bool:
        """Whether requests wait for a free slot."""
        return self._limit > 0

    def next_s(self) -> float:
        """When the next request is sent (s; inf when none is left or every slot is taken)."""
        i = self.next_id
        return self.times_s[i] if i < self.n and self.in_system < self._limit_n else math.inf

    def send(self) -> int:
        """Send the next request: its id."""
        i = self.next_id
        self.next_id = i + 1
        self.in_system += 1
        return i

    def release(self, now: float) -> None:
        """A request left the system at ``now`` (s): the first ``limit - in_system`` unsent requests hold the
        free slots, and the one that just got its slot is sent now if it was due."""
        self.in_system -= 1
        j = self.next_id + self._limit - self.in_system - 1
        if j < self.n and self.times_s[j] < now:
            self.times_s[j] = now
