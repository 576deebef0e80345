"""Token buckets: a rate limit with a burst, as pure arithmetic over the caller's clock.

A bucket holds at most ``burst`` tokens and refills at ``rate`` tokens per second; a request takes one. A request
that finds less than one token is refused, and told how long until one is there: ``(1 - tokens) / rate``
(the classic token bucket; RFC 2697 / RFC 4115 describe the same meter for traffic policing).
``Buckets`` keeps one bucket per key (a viewer, an API key), forgetting the least recently used past ``max_keys``:
a forgotten key starts again with a full bucket, which errs on the side of the client.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass


@dataclass
class TokenBucket:
    """``tokens`` available at time ``updated`` (seconds, any monotonic clock)."""

    rate: float  # tokens per second, > 0
    burst: float  # capacity, >= 1
    tokens: float
    updated: float

    @classmethod
    def full(cls, rate: float, burst: float, now: float) -> TokenBucket:
        if rate <= 0 or burst < 1:
            raise ValueError(f"a token bucket needs rate > 0 and burst >= 1, got rate={rate}, burst={burst}")
        return cls(rate, burst, burst, now)

    def refill(self, now: float) -> None:
        """Add the tokens earned since ``updated`` (never above ``burst``; a clock going back adds none)."""
        if now > self.updated:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def take(self, now: float, cost: float = 1.0) -> float:
        """Take ``cost`` tokens if there are enough: 0.0. Otherwise take nothing and return the seconds until
        there will be (the ``Retry-After``)."""
        self.refill(now)
        if self.tokens >= cost:
            self.tokens -= cost
            return 0.0
        return (cost - self.tokens) / self.rate


class Buckets:
    """One ``TokenBucket`` per key, all with the same rate and burst; at most ``max_keys`` kept (LRU)."""

    def __init__(self, rate: float, burst: float, max_keys: int = 100_000) -> None:
        TokenBucket.full(rate, burst, 0.0)  # validates
        self.rate, self.burst, self.max_keys = rate, burst, max_keys
        self._buckets: collections.OrderedDict[str, TokenBucket] = collections.OrderedDict()

    def take(self, key: str, now: float) -> float:
        """``TokenBucket.take`` on ``key``'s bucket (a new key's is full)."""
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket.full(self.rate, self.burst, now)
            if len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        return bucket.take(now)

    def __len__(self) -> int:
        return len(self._buckets)
