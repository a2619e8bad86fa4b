"""A rate measured over sample windows, and the throttle time a rate above its quota implies.

This follows Kafka's sampled ``Rate`` (quota.window.num samples of quota.window.size.seconds):
a sample starts at the first value recorded after the previous one is complete, samples older
than all the windows together are dropped, and the rate is the sum of the samples over the time
since the oldest one began, counted as at least ``samples - 1`` full windows. That floor keeps
a client that just started from looking infinitely fast; it also lets a new client send about
``(samples - 1) x window`` worth of quota at once before it is throttled, as in Kafka.

With ``simple=True`` it is Kafka's ``SimpleRate`` instead (the replication quotas' measure): the
time since the oldest sample, at least one window, with no ``samples - 1`` floor, so a replica
that starts copying is held to its quota from the first second on.

Times are milliseconds from any monotonic clock, passed in, so tests can use a fake clock.
"""

from __future__ import annotations

#: The largest throttle time a response can carry (an int32).
MAX_THROTTLE_MS = 2**31 - 1


class WindowedRate:
    """Values per second over `samples` windows of `window_ms` each."""

    __slots__ = ("samples", "window_ms", "simple", "_starts", "_values", "_current", "last_record_ms")

    def __init__(self, samples: int, window_ms: int, now_ms: float, simple: bool = False) -> None:
        if samples < 1 or window_ms < 1:
            raise ValueError("a rate needs at least one sample window of at least 1 ms")
        self.samples = samples
        self.window_ms = window_ms
        self.simple = simple
        self._starts: list[float] = [now_ms]
        self._values: list[float] = [0.0]
        self._current = 0
        self.last_record_ms = now_ms

    def record(self, value: float, now_ms: float) -> None:
        """Add `value` at `now_ms` (negative values take back an earlier record)."""
        i = self._current
        if now_ms >= self._starts[i] + self.window_ms:
            # The current sample is complete: start the next one, reusing the oldest slot.
            if len(self._starts) < self.samples:
                self._starts.append(now_ms)
                self._values.append(0.0)
                i = len(self._starts) - 1
            else:
                i = (i + 1) % self.samples
                self._starts[i] = now_ms
                self._values[i] = 0.0
            self._current = i
        self._values[i] += value
        self.last_record_ms = now_ms

    def _purge(self, now_ms: float) -> None:
        expire = self.samples * self.window_ms
        for i, start in enumerate(self._starts):
            if now_ms - start >= expire:
                self._starts[i] = now_ms
                self._values[i] = 0.0

    def window_size_ms(self, now_ms: float) -> float:
        """The time the rate is averaged over: since the oldest sample, at least samples-1 windows
        (``simple``: at least one window)."""
        self._purge(now_ms)
        elapsed = now_ms - min(self._starts)
        if self.simple:
            return max(elapsed, float(self.window_ms))
        full = int(elapsed // self.window_ms)
        floor = self.samples - 1
        if full < floor:
            elapsed += (floor - full) * self.window_ms
        return elapsed

    def surely_within(self, quota: float) -> bool:
        """True when the rate cannot be above ``quota`` whatever the time: every sample held,
        expired or not, over the shortest time the rate is ever averaged over. The check on
        every request of a client far below its quota, without looking at the samples' ages."""
        shortest_ms = self.window_ms if self.simple else (self.samples - 1) * self.window_ms
        values = self._values
        # A negative sample (a record taken back) could hide an expired positive one: not sure then.
        return shortest_ms > 0 and min(values) >= 0 and sum(values) * 1000.0 <= quota * shortest_ms

    def total(self, now_ms: float) -> float:
        self._purge(now_ms)
        return sum(self._values)

    def rate(self, now_ms: float) -> float:
        """Values per second."""
        size = self.window_size_ms(now_ms)
        return sum(self._values) / (size / 1000.0) if size > 0 else 0.0


def throttle_time_ms(rate: WindowedRate, quota: float, now_ms: float) -> int:
    """How long a client must wait for `rate` to fall back to `quota` (0 when within it).

    Kafka's formula: over quota by a fraction f of the quota, the client waits f x the window
    the rate was measured over (about the time the excess bytes would take at the quota rate).
    """
    if quota > 0 and rate.surely_within(quota):
        return 0
    size_ms = rate.window_size_ms(now_ms)
    total = rate.total(now_ms)
    if quota <= 0:
        # Only reachable through a hand-written node (AlterClientQuotas refuses it): no rate is
        # acceptable, so the caller's upper bound applies.
        return MAX_THROTTLE_MS if total > 0 else 0
    if size_ms <= 0:
        return 0
    observed = total / (size_ms / 1000.0)
    if observed <= quota:
        return 0
    return min(max(round((observed - quota) / quota * size_ms), 0), MAX_THROTTLE_MS)
