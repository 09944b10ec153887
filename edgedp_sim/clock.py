"""The event engine's clock: SimPy's event queue running plain callbacks in SimPy's order.

SimPy handles events by (time, priority, id): ids grow in the order events are scheduled,
and a process start (``Initialize``) is URGENT, ahead of every NORMAL event of its
instant. The event engine (:mod:`edgedp_sim.engine`) moves its nodes with callbacks instead of
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

Planning uplinks ahead (:class:`Turns`) schedules a message's delivery when its sender's
uplink turn is planned instead of when its slot ends: the delivery gets an earlier id, and
the slot end is no event at all. That changes nothing as long as no delivery shares its
instant with another event (where the ids would decide) and no job reaches an uplink at
the instant one of its slots ends. ``Clock(unique_times=True)`` checks the first:
:meth:`at_unique` times (deliveries) must differ from each other and from every time given
to :meth:`at` or :meth:`mark` (deadlines, crashes, compute steps: these may share instants
with each other, as they are scheduled in the same order either way); a clash raises
:class:`TieError`. Times are remembered until the clock passes them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from heapq import heappop, heappush

import simpy

__all__ = ["Clock", "TieError", "Turns", "Uplink"]

URGENT, NORMAL = simpy.core.URGENT, simpy.core.NORMAL


class TieError(Exception):
    """Two events at one instant on a clock made with ``unique_times=True``."""


class Clock(simpy.Environment):
    """:class:`simpy.Environment` whose queue holds ``(time, priority, id, fn, args)``."""

    def __init__(self, *, unique_times: bool = False) -> None:
        super().__init__()
        self._urgent: deque = deque()
        self._normal: deque = deque()
        self.events = 0
        self.instants = 0
        # with unique_times: the times of at_unique events, and of the others
        self._unique: set[float] | None = set() if unique_times else None
        self._times: set[float] = set()
        self._left = 1 << 16  # marks until the past is forgotten

    def mark(self, time: float) -> None:
        """Note an event at ``time`` (> now) that must not meet an :meth:`at_unique` one.

        A no-op unless the clock was made with ``unique_times=True``."""
        if self._unique is not None:
            if time in self._unique:
                raise TieError(f"an event at t = {time!r} meets a delivery")
            self._times.add(time)
            self._left -= 1
            if not self._left:
                self._prune()

    def at_unique(self, time: float, fn: Callable, *args) -> None:
        """:meth:`at` for a time (> now) no other event may have; else :class:`TieError`."""
        unique = self._unique
        if unique is not None:
            if time in unique or time in self._times:
                raise TieError(f"two events at t = {time!r}")
            unique.add(time)
            self._left -= 1
            if not self._left:
                self._prune()
        heappush(self._queue, (time, NORMAL, next(self._eid), fn, args))

    def unmark(self, time: float) -> None:
        """Forget an :meth:`at_unique` time whose event was cancelled."""
        if self._unique is not None:
            self._unique.discard(time)

    def _prune(self) -> None:
        """Forget the past (amortised O(1) per mark: the next prune comes after as many
        marks as times are kept, and at least 65,536)."""
        assert self._unique is not None
        now = self._now
        self._unique = {t for t in self._unique if t > now}
        self._times = {t for t in self._times if t > now}
        self._left = max(1 << 16, len(self._unique) + len(self._times))

    def next_id(self) -> int:
        """The id an event scheduled now would get (for :meth:`at_id`)."""
        return next(self._eid)

    def at(self, time: float, fn: Callable, *args) -> None:
        if time <= self._now:  # SimPy: a timeout ending now is an event of this instant
            self._normal.append((fn, args))
        else:
            if self._unique is not None:
                self.mark(time)
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


class Turns:
    """An uplink served first come first served, planned ahead: one heap event per message.

    The same turns as :class:`Uplink` (each job asks for its next slot when its previous
    one ends; jobs waiting at that instant go first), computed as a pure schedule when a
    job arrives: ``emit(job, i, end)`` is called at once for every slot the uplink will
    serve, with the time ``end`` its message leaves, and returns a handle. A job arriving
    while others are still sending changes the turns after the slot in progress: those
    slots are handed back to ``cancel(handle)`` and planned again. A job arriving at the
    instant a slot ends would need the ids to order the two (:class:`Uplink`): it raises
    :class:`TieError`. A slot's end is no event: it changes only this uplink's turns.

    ``length(job)`` is the number of messages of a job, ``delay(job, i)`` the (> 0)
    serialization time of its message ``i``.
    """

    __slots__ = ("clock", "length", "delay", "emit", "cancel", "slots")

    def __init__(
        self,
        clock: Clock,
        *,
        length: Callable[[object], int],
        delay: Callable[[object, int], float],
        emit: Callable[[object, int, float], object],
        cancel: Callable[[object], None],
    ) -> None:
        self.clock, self.length, self.delay = clock, length, delay
        self.emit, self.cancel = emit, cancel
        # planned slots not yet ended: [start, end, job, i, waiting requests, handle]
        self.slots: deque[list] = deque()

    def request(self, job: object) -> None:
        """``job`` asks now for its first slot."""
        now, slots = self.clock.now, self.slots
        while slots and slots[0][1] < now:
            slots.popleft()
        if not slots:  # idle: the job is served at once
            self._plan(None, now, deque([(job, 0)]))
            return
        current = slots.popleft()
        end = current[1]
        if not now < end:  # (start == now: a job of this instant was served first)
            raise TieError(f"a job reaches an uplink at t = {now!r} as a slot ends")
        for slot in slots:  # the turns after the slot in progress change
            self.clock.unmark(slot[1])
            self.cancel(slot[5])
        slots.clear()
        current[4] = (*current[4], (job, 0))
        slots.append(current)
        self._plan((current[2], current[3]), end, deque(current[4]))

    def _plan(self, holder: tuple | None, end: float, queue: deque) -> None:
        """Serve ``queue`` after ``holder``'s slot ends at ``end``, until nothing is left."""
        slots, length, delay, emit = self.slots, self.length, self.delay, self.emit
        while True:
            if holder is not None and holder[1] + 1 < length(holder[0]):
                queue.append((holder[0], holder[1] + 1))  # asks again after its release
            if not queue:
                return
            job, i = holder = queue.popleft()
            start, end = end, end + delay(job, i)
            slots.append([start, end, job, i, tuple(queue), emit(job, i, end)])
