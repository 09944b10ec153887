"""The event engine: a SimPy event queue driving the same :class:`edgedp.agent.Agent` as devices.

Every node is a small state machine moved by callbacks on timed events: begin its round,
hand the messages to its uplink, take its neighbours' messages as they arrive, and end the
round once every neighbour's message is in, every missing neighbour is known to have moved
on, or the round deadline passes. The uplink sends one message at a time (size / bandwidth
each; rounds in flight at once take turns, first come first served); a message then travels
the link's latency. Loss, per-round dropouts, crashes with restart from the last
round-boundary snapshot and departures come from keyed draws of the scenario seed
(sim/links.py, sim/churn.py). A node restarted more than the receive window behind rejoins
as a device does (:meth:`edgedp.agent.Agent.rejoin`). A message costs one event, its
delivery (two with link observers and a finite bandwidth: they see it leave); a round about
one more, its deadline. There is no polling and no process per message: a callback per
event costs a fraction of a SimPy process switch.

Each message is encoded by the sender's Agent and decoded once by the real codec
(:func:`edgedp.wire.decode`); every recipient runs the receiver's checks on it
(:meth:`edgedp.agent.Agent.accept`: plan, sender, round window, shape, finite values within
the plan's bound). These frames come from the engine itself, never from a peer: hostile
frames are handled by ``Agent.receive`` and the device transports.

With zero latency, no loss and no faults, the models equal the batch engine's bit for bit.
A node whose message would be non-finite raises the Agent's
:class:`~edgedp.errors.NonFiniteMessageError` (naming the node and round) out of ``run``.
"""

from __future__ import annotations

import copy
import heapq
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import simpy

from edgedp import models, rng, streams, wire
from edgedp.agent import Agent
from edgedp.plan import NoisePlan
from sim import evaluation, initial
from sim.churn import Crash, Faults
from sim.datasets import FederatedData
from sim.links import LinkDraws, Network
from sim.observers import LinkObserver

__all__ = ["EventResult", "run", "uplink_schedule"]


@dataclass(slots=True)
class EventResult:
    models: np.ndarray  # (nodes, d) final models
    eval_rounds: list[int] = field(default_factory=list)
    test_loss: list[float] = field(default_factory=list)
    test_accuracy: list[float] = field(default_factory=list)
    consensus_distance: list[float] = field(default_factory=list)
    round_seconds: list[float] = field(default_factory=list)  # simulated wall-clock per round
    messages: int = 0
    bytes_sent: int = 0
    lost_messages: int = 0  # link loss
    offline_drops: int = 0  # delivered to a node that was down or sitting out that round
    rejected: int = 0  # refused by receivers (late / out-of-window / duplicate ...)
    missing: int = 0  # (node, round, neighbour) triples mixed by the dropout rule
    skipped_rounds: int = 0
    nonfinite: int = 0  # examples whose non-finite gradient was left out of a clipped sum
    crashes: int = 0
    events: int = 0
    simulated_seconds: float = 0.0

    @property
    def model_digest(self) -> str:
        return models.model_digest(self.models)

    @property
    def dropped_messages(self) -> int:
        return self.lost_messages + self.offline_drops + self.rejected


class _Clock(simpy.Environment):
    """A SimPy environment that also runs plain callbacks at absolute times.

    ``at(time, fn, *args)`` schedules one event whose only callback is ``fn(*args)``. The
    time is absolute, so a delivery lands at exactly ``emitted + latency`` whatever the
    moment it was planned (``now + (t - now)`` can differ from ``t`` in the last bit).
    """

    def at(self, time: float, fn: Callable, *args) -> simpy.Event:
        event = simpy.Event(self)
        event._ok, event._value = True, None
        event.callbacks.append(lambda _event: fn(*args))
        heapq.heappush(self._queue, (time, simpy.core.NORMAL, next(self._eid), event))
        return event


@dataclass(slots=True, eq=False)
class _Job:
    """One round's messages of one node waiting for (or on) its uplink."""

    sender: int
    arrival: float
    round: int
    recipients: tuple[int, ...]
    frames: list  # per recipient: the frames
    decoded: list  # per recipient: the decoded message (None: decode refused it)
    sizes: list[int]
    delays: list[float]


@dataclass(slots=True, eq=False)
class _Send:
    """One message planned on an uplink: its slot, and what was done for it (undone if the
    plan changes before it starts)."""

    job: _Job
    index: int
    start: float
    end: float
    emitted: bool = False
    lost: bool = False
    live: bool = True


def uplink_schedule(jobs: Sequence[tuple[float, Sequence[float]]]) -> list[tuple]:
    """Start and end of every message of ``jobs`` on one first-come-first-served uplink.

    ``jobs`` are ``(arrival, delays)`` in arrival order; a job asks for its next message's
    slot when the previous one ends (SimPy ``Resource(capacity=1)``: concurrent jobs take
    turns). Returns ``[(job, index, start, end)]`` in service order. A job arriving at the
    instant a slot ends queues before the job that held it.

    >>> uplink_schedule([(0.0, [1.0, 1.0]), (0.5, [1.0])])
    [(0, 0, 0.0, 1.0), (1, 0, 1.0, 2.0), (0, 1, 2.0, 3.0)]
    """
    out: list[tuple] = []
    queue: deque[tuple[int, int]] = deque()
    k, held = 0, None  # held: the (job, index) on the uplink; out[-1] is its slot

    def grant(job: int, index: int, now: float) -> tuple[int, int]:
        out.append((job, index, now, now + jobs[job][1][index]))
        return job, index

    while k < len(jobs) or held is not None:
        if held is not None and (k == len(jobs) or jobs[k][0] > out[-1][3]):
            (j, i), now = held, out[-1][3]  # its slot ends: the queue's head goes next
            held = grant(*queue.popleft(), now) if queue else None
            if i + 1 < len(jobs[j][1]):  # then it asks for its next slot
                if held is None:
                    held = grant(j, i + 1, now)
                else:
                    queue.append((j, i + 1))
        elif held is None:
            held, k = grant(k, 0, jobs[k][0]), k + 1
        else:
            queue.append((k, 0))
            k += 1
    return out


class _Sim:
    def __init__(
        self,
        plan: NoisePlan,
        data: FederatedData,
        network: Network,
        faults: Faults,
        seed: int,
        eval_every: int,
        progress: Callable[[int], None] | None,
        observers: Sequence[LinkObserver] = (),
        initial_state: str = "model",
        gradient_transforms: Mapping[int, Callable] | None = None,
    ) -> None:
        self.gradient_transforms = dict(gradient_transforms or {})
        self.observers = tuple(observers)
        # ground-truth recorders: the observers that also want each node's round
        self.round_observers = tuple(o for o in self.observers if hasattr(o, "on_round"))
        self.plan, self.data, self.network, self.faults = plan, data, network, faults
        adaptive = plan.sketch is not None and plan.sketch.basis == "adaptive"
        if adaptive and (
            faults.dropout or faults.crashes or faults.churn_rate_per_s or network.loss
        ):
            raise ValueError(
                "An adaptive dome basis needs every spanning-tree frame: dropouts, crashes, "
                "churn and message loss are not supported with it (use a block or gaussian "
                "basis)."
            )
        self.env = _Clock()
        self.model = models.for_task(plan.task, data.features)
        self.keys = streams.RunKeys.simulation(plan)
        net_secret = rng.derive_key(rng.seed_secret(seed), "network").hex().encode()
        n, T = plan.n, plan.steps  # noqa: N806
        self.agents = [self._new_agent(u) for u in range(n)]
        start = initial.states(initial_state, self.keys, nodes=n, dim=self.model.dim)
        if start is not None:  # before the first snapshot: a restart resumes from it
            for u, agent in enumerate(self.agents):
                agent.theta = start[0, u]
        links = [(u, v) for u in range(n) for v in self.agents[u].neighbours]
        self.links = LinkDraws(network, links, T, net_secret)
        self.dropped = faults.dropout_table(n, T, net_secret)
        self.crashes: list[Crash] = faults.crash_schedule(n, net_secret)
        self.up = [True] * n
        self.incarnation = [0] * n
        # per node while it waits inside a round: [incarnation, start, limit, deadline event]
        self.waiting: list[list | None] = [None] * n
        self.uplink: list[list[_Send]] = [[] for _ in range(n)]  # the current busy period
        # snapshots are read only by restarts: kept for the nodes that crash and come back
        self.restarts = {c.node for c in self.crashes if c.down_s != float("inf")}
        self.snapshots = {u: self.agents[u].snapshot() for u in self.restarts}
        self.round_end = np.full((n, T), np.nan)
        self.eval_every = eval_every
        self.evals: dict[int, dict[int, np.ndarray]] = {}
        self.result = EventResult(models=np.empty((n, self.model.dim)))
        self.progress, self.done_pairs = progress, 0
        self._record_eval(0, range(n))

    def _new_agent(self, u: int) -> Agent:
        return Agent(
            self.plan.share(u),
            model=self.model,
            x=self.data.x[u],
            y=self.data.y[u],
            dropout_rule=self.faults.dropout_rule,
            memoize_noise=self.plan.factor.kind == "dense",
            gradient_transform=self.gradient_transforms.get(u),
            **self.keys.agent(u, self.plan.share(u).neighbours),
        )

    def _record_eval(self, rounds_done: int, nodes) -> None:
        if rounds_done % self.eval_every == 0 or rounds_done == self.plan.steps:
            slot = self.evals.setdefault(rounds_done, {})
            for u in nodes:
                slot[u] = self.agents[u].theta

    def _finish_round(self, u: int, r: int) -> None:
        self.round_end[u, r] = self.env.now
        self._record_eval(r + 1, (u,))
        self.done_pairs += 1
        if self.progress is not None and self.done_pairs % self.plan.n == 0:
            self.progress(self.done_pairs // self.plan.n)

    def _snapshot(self, u: int) -> None:
        if u in self.restarts:
            self.snapshots[u] = copy.deepcopy(self.agents[u].snapshot())

    # ------------------------------------------------------------------ a node
    def _rounds(self, u: int, incarnation: int, first: bool) -> None:
        """Run node ``u`` from the start of its current round until it must wait."""
        if self.incarnation[u] != incarnation:
            return
        env, agent = self.env, self.agents[u]
        if agent.done:
            return
        target = agent.rejoin_target()
        if target is not None:  # fell past the receive window: skip to the neighbours
            behind = agent.round
            self.result.skipped_rounds += agent.rejoin(target)
            for r in range(behind, target):
                self._finish_round(u, r)
            self._snapshot(u)
        r = agent.round
        if self.dropped[u, r]:
            agent.skip_round()
            self.result.skipped_rounds += 1
            self._finish_round(u, r)
            env.at(env.now, self._rounds, u, incarnation, first)
            return
        out = agent.begin_round()
        if self.network.compute_s:
            env.at(env.now + self.network.compute_s, self._computed, u, incarnation, first, out)
        else:
            self._computed(u, incarnation, first, out)

    def _computed(self, u: int, incarnation: int, first: bool, out) -> None:
        if self.incarnation[u] != incarnation:
            return
        self._transmit(u, out)
        limit = self.network.startup_timeout_s if first else self.network.round_timeout_s
        self.waiting[u] = [incarnation, self.env.now, limit, None]
        self._wake(u)

    def _wake(self, u: int) -> None:
        """Node ``u`` waits in its round: end it if it can, else (re)arm the deadline."""
        wait, agent, now = self.waiting[u], self.agents[u], self.env.now
        if not agent.ready():
            missing = agent.missing()
            remaining = wait[1] + wait[2] - now
            if not (missing and set(agent.hopeless()) == set(missing)) and remaining > 0:
                deadline = now + remaining
                if wait[3] != deadline:  # the deadline float moved: one more event
                    wait[3] = deadline
                    self.env.at(deadline, self._deadline, u, wait, deadline)
                return
        self.waiting[u] = None
        r = agent.round
        report = agent.end_round()
        self.result.missing += len(report.missing)
        for obs in self.round_observers:  # the round's private gradient
            obs.on_round(node=u, round=r, gradient=agent.last_gradient, batch_size=agent.batch)
        self._snapshot(u)
        self._finish_round(u, r)
        self._rounds(u, wait[0], False)

    def _deadline(self, u: int, wait: list, deadline: float) -> None:
        if self.waiting[u] is wait and wait[3] == deadline:
            self._wake(u)

    # ------------------------------------------------------------------ links
    def _transmit(self, u: int, out) -> None:
        """Hand one round's messages to ``u``'s uplink."""
        per_recipient = out.per_recipient is not None
        frames = decoded = None
        job = _Job(u, self.env.now, out.round, out.recipients, [], [], [], [])
        for v in out.recipients:
            if per_recipient or frames is None:
                frames = [bytes(f) for f in out.frames_for(v)]
                try:  # the real codec, once per distinct message
                    decoded = wire.decode(frames, max_bytes=self.agents[v].context.max_bytes)
                except wire.WireError:
                    decoded = None  # the recipient's receive() counts the rejection
            size = sum(len(f) for f in frames)
            job.frames.append(frames)
            job.decoded.append(decoded)
            job.sizes.append(size)
            job.delays.append(self.network.serialization_s(size))
        if not job.recipients:
            return
        if not job.delays[0]:  # no serialization delay: every message leaves now
            for i in range(len(job.recipients)):
                self._emit(_Send(job, i, job.arrival, job.arrival))
            return
        self._plan_uplink(u, job)

    def _plan_uplink(self, u: int, job: _Job) -> None:
        """Add ``job`` to ``u``'s uplink; re-plan the slots that have not started yet."""
        now, sends = self.env.now, self.uplink[u]
        if not sends or sends[-1].end <= now:
            sends = self.uplink[u] = []  # idle: a new busy period
        jobs = list(dict.fromkeys(s.job for s in sends)) + [job]
        plan = uplink_schedule([(j.arrival, j.delays) for j in jobs])
        kept = {(s.job, s.index): s for s in sends}
        self.uplink[u] = []
        for j, i, start, end in plan:
            old = kept.get((jobs[j], i))
            if old is not None and old.start == start and old.end == end:
                self.uplink[u].append(old)
                continue
            if old is not None:  # it had not started: take back what was done for it
                self._retract(old)
            send = _Send(jobs[j], i, start, end)
            self.uplink[u].append(send)
            if self.observers:  # observers see it at the moment it leaves
                self.env.at(end, self._emit, send)
            else:  # its fate is known now; taken back if the slot moves
                self._emit(send)

    def _emit(self, send: _Send) -> None:
        """Message ``send`` leaves its uplink at ``send.end``: count it, draw its fate."""
        if not send.live:
            return
        job, i = send.job, send.index
        u, v = job.sender, job.recipients[i]
        send.emitted = True
        self.result.messages += 1
        self.result.bytes_sent += job.sizes[i]
        for obs in self.observers:  # on the link (a tap sees it even if it is lost later)
            obs.on_message(
                sender=u, recipient=v, round=job.round, frames=job.frames[i], time=send.end
            )
        if self.links.lost[(u, v)][job.round]:
            self.result.lost_messages += 1
            send.lost = True
            return
        arrival = send.end + float(self.links.latency[(u, v)][job.round])
        self.env.at(arrival, self._deliver, send, u)

    def _retract(self, send: _Send) -> None:
        """Take back a planned message whose slot moved (a pending delivery is dropped)."""
        send.live = False
        if send.emitted:
            self.result.messages -= 1
            self.result.bytes_sent -= send.job.sizes[send.index]
            self.result.lost_messages -= send.lost

    def _deliver(self, send: _Send, u: int) -> None:
        if not send.live:
            return
        job, i = send.job, send.index
        v = job.recipients[i]
        if not self.up[v] or self.dropped[v, job.round]:
            self.result.offline_drops += 1
            return
        agent = self.agents[v]
        if job.decoded[i] is None:
            agent.receive(job.frames[i], authenticated_sender=u)
        else:
            agent.accept(job.decoded[i], authenticated_sender=u)
        if self.waiting[v] is not None:
            self._wake(v)

    def _crash(self, c: Crash) -> None:
        u = c.node
        if not self.up[u] or self.agents[u].done:
            return
        self.up[u] = False
        self.incarnation[u] += 1
        self.waiting[u] = None  # what it was doing dies with it
        self.result.crashes += 1
        if c.down_s != float("inf"):
            self.env.at(self.env.now + c.down_s, self._restart, u)

    def _restart(self, u: int) -> None:
        agent = self._new_agent(u)
        agent.restore(copy.deepcopy(self.snapshots[u]))
        self.agents[u] = agent
        self.up[u] = True
        self._rounds(u, self.incarnation[u], False)

    def run(self) -> EventResult:
        env = self.env
        for u in range(self.plan.n):
            env.at(0.0, self._rounds, u, 0, True)
        for c in self.crashes:
            env.at(c.at_s, self._crash, c)
        events = 0
        while True:
            try:
                env.step()
            except simpy.core.EmptySchedule:
                break
            events += 1
        res = self.result
        res.events = events
        res.simulated_seconds = float(np.nanmax(self.round_end)) if self.plan.steps else 0.0
        res.models = np.stack([a.theta for a in self.agents])
        res.rejected = sum(sum(a.metrics.rejected.values()) for a in self.agents)
        res.nonfinite = sum(a.metrics.nonfinite for a in self.agents)
        ends = np.nanmax(self.round_end, axis=0)
        res.round_seconds = [float(x) for x in np.diff(np.concatenate([[0.0], ends]))]
        x, y = self.data.x_test, self.data.y_test
        for r in sorted(self.evals):
            thetas = np.stack(list(self.evals[r].values()))
            losses, accs = evaluation.evaluate(self.model, thetas, x, y)
            res.eval_rounds.append(r)
            res.test_loss.append(float(np.mean(losses)))
            if accs is not None:
                res.test_accuracy.append(float(np.mean(accs)))
            mean = thetas.mean(axis=0)
            res.consensus_distance.append(float(np.mean(np.sum((thetas - mean) ** 2, axis=1))))
        return res


def run(
    plan: NoisePlan,
    data: FederatedData,
    *,
    network: Network | None = None,
    faults: Faults | None = None,
    seed: int = 0,
    eval_every: int = 10,
    progress: Callable[[int], None] | None = None,
    observers: Sequence[LinkObserver] = (),
    initial_state: str = "model",
    gradient_transforms: Mapping[int, Callable] | None = None,
) -> EventResult:
    """Simulate ``plan`` on ``data`` over ``network`` with ``faults`` (defaults: ideal).

    ``observers`` (adversary probes) get ``on_message(sender=, recipient=, round=, frames=,
    time=)`` for every message put on a link, before its loss draw and delivery.
    ``initial_state`` is ``"model"`` or ``"normal[:STD]"`` (:mod:`sim.initial`; trial 0 of
    the plan's keys, as the batch engine's first trial). ``gradient_transforms`` maps a node
    to the Agent's ``gradient_transform`` (privacy audits plant canaries with it).
    """
    if data.nodes != plan.n:
        raise ValueError(f"Expected data for n={plan.n} nodes, got {data.nodes}.")
    sim = _Sim(
        plan,
        data,
        network or Network(latency=Network().latency),
        faults or Faults(),
        seed,
        eval_every,
        progress,
        observers,
        initial_state,
        gradient_transforms,
    )
    return sim.run()
