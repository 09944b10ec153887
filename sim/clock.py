"""The event engine's clock: SimPy's event queue running plain callbacks in SimPy's order.

SimPy handles events by (time, priority, id): ids grow in the order events are scheduled,
and a process start (``Initialize``) is URGENT, ahead of every NORMAL event of its
instant. The event engine (:mod:`sim.engine`) moves its nodes with callbacks instead of
SimPy processes, and schedules one callback wherever a process-per-message model schedules
an event that does something, so simultaneous events (zero or constant latency) are
handled in the same order:

* ``at(time, fn, *args)``: a timeout ending at ``time`` (NORMAL, next id);
* ``soon(fn, *args)``: an event triggered now (``succeed()``, ``timeout(0)``): NORMAL;
* ``start(fn, *args)``: a process starting now: URGENT.

Callbacks of the current instant wait in two FIFOs rather than in the heap. The first one
runs directly when nothing in the heap comes before it (with continuous latencies nearly
always); otherwise all of them move to the heap with ids in the order they were made.
``events`` counts the callbacks taken from the heap, ``instants`` those run directly.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from heapq import heappop, heappush

import simpy

__all__ = ["Clock", "Uplink"]

URGENT, NORMAL = simpy.core.URGENT, simpy.core.NORMAL


class Clock(simpy.Environment):
    """:class:`simpy.Environment` whose queue holds ``(time, priority, id, fn, args)``."""

    def __init__(self) -> None:
        super().__init__()
        self._urgent: deque = deque()
        self._normal: deque = deque()
        self.events = 0
        self.instants = 0

    def next_id(self) -> int:
        """The id an event scheduled now would get (for :meth:`at_id`)."""
        return next(self._eid)

    def at(self, time: float, fn: Callable, *args) -> None:
        if time <= self._now:  # SimPy: a timeout ending now is an event of this instant
            self._normal.append((fn, args))
        else:
            heappush(self._queue, (time, NORMAL, next(self._eid), fn, args))

    def at_id(self, time: float, eid: int, fn: Callable, *args) -> None:
        """A timeout ending at ``time`` >= now with an id drawn earlier by :meth:`next_id`."""
        heappush(self._queue, (time, NORMAL, eid, fn, args))

    def soon(self, fn: Callable, *args) -> None:
        self._normal.append((fn, args))

    def start(self, fn: Callable, *args) -> None:
        self._urgent.append((fn, args))

    def alone(self) -> bool:
        """Nothing else is due at this instant: an event scheduled now would be next."""
        return not (self._urgent or self._normal) and (
            not self._queue or self._queue[0][0] > self._now
        )

    def peek(self) -> float:
        if self._urgent or self._normal:
            return self._now
        return self._queue[0][0] if self._queue else simpy.core.Infinity

    def _to_heap(self) -> None:
        queue, now, eid = self._queue, self._now, self._eid
        for fn, args in self._urgent:
            heappush(queue, (now, URGENT, next(eid), fn, args))
        for fn, args in self._normal:
            heappush(queue, (now, NORMAL, next(eid), fn, args))
        self._urgent.clear()
        self._normal.clear()

    def drain(self) -> None:
        """:meth:`step` until nothing is scheduled (the same order, in one loop)."""
        queue, urgent, normal = self._queue, self._urgent, self._normal
        events = instants = 0
        try:
            while True:
                if urgent or normal:
                    head = queue[0] if queue and queue[0][0] == self._now else None
                    if urgent and (head is None or head[1] != URGENT):
                        fn, args = urgent.popleft()
                        instants += 1
                        fn(*args)
                        continue
                    if not urgent and head is None:
                        fn, args = normal.popleft()
                        instants += 1
                        fn(*args)
                        continue
                    self._to_heap()
                if not queue:
                    return
                self._now, _, _, fn, args = heappop(queue)
                events += 1
                fn(*args)
        finally:
            self.events += events
            self.instants += instants

    def step(self) -> None:
        queue = self._queue
        if self._urgent or self._normal:
            head = queue[0] if queue and queue[0][0] == self._now else None
            if self._urgent and (head is None or head[1] != URGENT):
                fn, args = self._urgent.popleft()
            elif not self._urgent and head is None:
                fn, args = self._normal.popleft()
            else:
                fn = None
                self._to_heap()
            if fn is not None:
                self.instants += 1
                fn(*args)
                return
        try:
            self._now, _, _, fn, args = heappop(queue)
        except IndexError:
            raise simpy.core.EmptySchedule() from None
        self.events += 1
        fn(*args)


class Uplink:
    """A sender's uplink: one message at a time, requests served first come first served.

    The callbacks of ``simpy.Resource(capacity=1)``: ``request`` queues and, if the uplink
    is free, grants the head at once; the holder resumes when the grant is processed
    (``soon``); ``release`` frees the uplink, and the head of the queue is granted when
    the release is processed — or at once, if the releasing sender asks again first. (A
    release with nobody waiting schedules nothing: a request made before it would be
    processed finds the uplink free.)
    """

    __slots__ = ("clock", "busy", "queue")

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.busy = False
        self.queue: deque = deque()

    def request(self, fn: Callable, *args) -> None:
        self.queue.append((fn, args))
        self._grant()

    def release(self) -> None:
        self.busy = False
        if self.queue:  # with nobody waiting the release event grants nothing
            self.clock.soon(self._grant)

    def _grant(self) -> None:
        if not self.busy and self.queue:
            self.busy = True
            fn, args = self.queue.popleft()
            self.clock.soon(fn, *args)
