"""The event engine: a SimPy event queue driving the same :class:`edgedp.agent.Agent` as devices.

Every node runs the device's round loop, :func:`edgedp.rounds.rounds` (the daemon's too):
begin its round, hand the messages to its uplink, wait for its neighbours' messages (or the
round deadline, or until every missing neighbour is known to have moved on), end the round;
the scenario's dropout table is its skip policy. The uplink sends one message at a time (size /
bandwidth each; rounds in flight at once take turns, first come first served); a message
then travels the link's latency. Loss, per-round dropouts, crashes with restart from the
last round-boundary snapshot and departures come from keyed draws of the scenario seed
(edgedp_sim/links.py, edgedp_sim/churn.py). A node restarted more than the receive window
behind rejoins as a device does (:meth:`edgedp.agent.Agent.rejoin`). There is no polling.

Order of simultaneous events. The loop is written as callbacks on a :class:`edgedp_sim.clock.Clock`
rather than as SimPy processes, with one callback wherever a model with a SimPy process per
node, per transmission and per delivery (a ``Resource`` per uplink, a deadline timeout
armed at every wake-up) has an event that does something, in SimPy's (time, priority, id)
order. With zero or constant latency, where deliveries, deadlines, uplink turns and
crashes share instants, that order decides which messages a node mixes; tests pin it.
A message costs one heap event (its delivery), two with a finite bandwidth (and the end
of its uplink slot); a node's deadline stays one heap entry while it is re-armed at later
ids or times; wake-ups and uplink grants skip the heap when nothing else is due at their
instant. With continuous latencies and a finite bandwidth the uplinks' turns are planned
ahead (:class:`edgedp_sim.clock.Turns`), so a message is one heap event there too; a tie that
planning could misorder (:class:`edgedp_sim.clock.TieError`) restarts the run with slot events.

Each message is encoded by the sender's Agent and decoded once by the real codec
(:func:`edgedp.wire.decode`); its max/min, fingerprint and the check of its content (plan,
shape, finite values within the plan's bound: :func:`edgedp.mailbox.content_checked`) are
taken once too, and every recipient runs the rest of the receiver's checks on it
(:meth:`edgedp.agent.Agent.accept`: sender, round window, replays; the content again only
if its context holds it to something else) and keeps the decoded read-only view, not a
copy. These frames come from the engine itself, never from a peer: hostile frames are
handled by ``Agent.receive`` and the device transports.

With zero latency, no loss and no faults, the models equal the batch engine's bit for bit.
A node whose message would be non-finite raises the Agent's
:class:`~edgedp.errors.NonFiniteMessageError` (naming the node and round) out of ``run``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgedp import mailbox, models, rounds, runtime, wire
from edgedp.agent import Agent
from edgedp.plan import NoisePlan
from edgedp_sim import evaluation, initial, round_faults
from edgedp_sim.churn import Crash, Faults
from edgedp_sim.clock import Clock, TieError, Turns, Uplink
from edgedp_sim.datasets import FederatedData
from edgedp_sim.links import LinkDraws, Network
from edgedp_sim.observers import LinkObserver

__all__ = ["EventResult", "NodeProcess", "run"]


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
    events: int = 0  # callbacks taken from the event queue (heap)
    instants: int = 0  # callbacks run at their instant without the heap (edgedp_sim/clock.py)
    planned_uplinks: bool = False  # uplink turns planned ahead (edgedp_sim.clock.Turns)
    simulated_seconds: float = 0.0

    @property
    def model_digest(self) -> str:
        return models.model_digest(self.models)

    @property
    def dropped_messages(self) -> int:
        return self.lost_messages + self.offline_drops + self.rejected


class _Wait:
    """A node waiting in its round for a message or the deadline (one SimPy ``Condition``
    of a process-per-node model; ``done`` once it has fired)."""

    __slots__ = ("driver", "done")

    def __init__(self, driver: NodeProcess) -> None:
        self.driver, self.done = driver, False


class NodeProcess(rounds.Interpreter):
    """One incarnation of node ``u`` on the event engine: its Agent, the round loop driving it
    (:func:`edgedp.rounds.rounds`) and the round's wait (start, limit). One method per command
    of the loop (the engine's ``step``): each returns the loop's reply, or
    :data:`edgedp.rounds.SUSPEND` when the node now waits for an event of the clock."""

    __slots__ = ("sim", "u", "incarnation", "agent", "loop", "first", "start", "limit")

    def __init__(self, sim: _Sim, u: int, incarnation: int, agent: Agent, loop, first: bool):
        self.sim, self.u, self.incarnation, self.agent, self.loop = sim, u, incarnation, agent, loop
        self.first, self.start, self.limit = first, 0.0, 0.0

    def rejoined(self, cmd: rounds.Rejoined) -> None:
        """Fell past the receive window: the rounds skipped to the neighbours are over."""
        sim = self.sim
        sim.result.skipped_rounds += cmd.skipped
        for r in range(cmd.behind, cmd.target):
            sim.finish_round(self.u, r)
        sim.snapshot(self.u, self.agent)

    def skipped(self, cmd: rounds.Skipped) -> Any:
        """Sat the round out; the loop goes on in this instant (SimPy's ``timeout(0)``)."""
        sim = self.sim
        sim.result.skipped_rounds += 1
        sim.finish_round(self.u, cmd.round)
        sim.env.soon(sim.advance, self, None)
        return rounds.SUSPEND

    def send(self, cmd: rounds.Send) -> Any:
        """The messages go to the uplink (after ``compute_s`` of computing, if any)."""
        sim = self.sim
        if sim.network.compute_s:
            sim.env.at(sim.env.now + sim.network.compute_s, sim.computed, self, cmd.out)
            return rounds.SUSPEND
        sim.put_on_uplink(self, cmd.out)
        return None

    def wait(self, cmd: rounds.Wait) -> Any:
        """Armed until a message comes or the deadline; False when the deadline has passed."""
        sim = self.sim
        now = sim.env.now
        remaining = self.start + self.limit - now
        if remaining <= 0:  # the round ends
            return False
        wait = _Wait(self)  # not ready, and not every missing neighbour moved on
        sim.arrival[self.u] = _Arrival(wait)
        sim.arm(self.u, now + remaining, wait)
        return rounds.SUSPEND

    def ended(self, cmd: rounds.Ended) -> None:
        """The round is mixed: the observers see it, the snapshot and round end are noted."""
        sim, u, agent, report = self.sim, self.u, self.agent, cmd.report
        r = report.round
        sim.result.missing += len(report.missing)
        for obs in sim.round_observers:  # the round's private gradient, what it mixed
            obs.on_round(
                node=u,
                round=r,
                gradient=agent.last_gradient,
                batch_size=agent.schedule.batch_size,
                missing=report.missing,
            )
        sim.snapshot(u, agent)
        sim.finish_round(u, r)


class _Arrival:
    """A node's "a message came" event: triggered once; wakes the wait it was made for."""

    __slots__ = ("triggered", "wait")

    def __init__(self, wait: _Wait | None) -> None:
        self.triggered, self.wait = False, wait


class _Planned:
    """A message on its link: sender, recipient, round, the message tuple of
    :meth:`_Sim._message`, size; ``cancelled`` when :class:`edgedp_sim.clock.Turns`
    plans its slot again."""

    __slots__ = ("cancelled", "u", "v", "r", "message", "size", "lost", "marked")

    def __init__(self, u: int, v: int, r: int, message: tuple, size: int) -> None:
        self.cancelled, self.u, self.v, self.r = False, u, v, r
        self.message, self.size = message, size
        self.lost, self.marked = False, None  # marked: a delivery time noted on the clock


@dataclass(slots=True, eq=False)
class _Job:
    """One round's messages of one node, sent one after another."""

    sender: int
    round: int
    recipients: tuple[int, ...]
    out: object  # the Agent's outgoing round
    message: tuple | None = None  # the last made by _Sim._message (for recipient index)
    index: int = 0


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
        planned: bool = False,
        trial: int = 0,
    ) -> None:
        self.trial = trial
        self.gradient_transforms = dict(gradient_transforms or {})
        self.observers = tuple(observers)
        # ground-truth recorders: the observers that also want each node's round
        self.round_observers = tuple(o for o in self.observers if hasattr(o, "on_round"))
        # curious nodes: the observers that also want each message that reaches its node
        self.delivery_observers = tuple(o for o in self.observers if hasattr(o, "on_delivery"))
        self.plan, self.data, self.network, self.faults = plan, data, network, faults
        why = round_faults.refusal(plan, faults, network)
        if why is not None:  # before any agent is made
            raise ValueError(why)
        self.env = Clock(unique_times=planned)
        self.model = models.for_task(plan.task, data.features)
        self.keys = runtime.simulation_keys(plan)
        net_secret = round_faults.network_secret(seed)
        n, T = plan.n, plan.steps  # noqa: N806
        # one share per node (each hashes the whole plan), reused by restarts
        self.shares = [plan.share(u) for u in range(n)]
        # every node's noise and batch keys at once (the prefix hashed once); cross-agent
        # keys only for the plans that use them (their own derivation, per node)
        self.noise_keys = self.keys.per_trial("noise", nodes=n, trials=1, first_trial=trial)[0]
        self.batch_keys = self.keys.per_trial("batch", nodes=n, trials=1, first_trial=trial)[0]
        self.agents = [self._new_agent(u) for u in range(n)]
        start = initial.states(
            initial_state, self.keys, nodes=n, dim=self.model.dim, first_trial=trial
        )
        if start is not None:  # before the first snapshot: a restart resumes from it
            for u, agent in enumerate(self.agents):
                agent.theta = start[0, u]
        links = [(u, v) for u in range(n) for v in self.agents[u].neighbours]
        self.links = LinkDraws(network, links, T, net_secret)
        # per link (loss row, latency row): one lookup per message
        self._link = {k: (self.links.lost[k], self.links.latency[k]) for k in links}
        self.dropped = faults.dropout_table(n, T, net_secret)
        self._dropped = self.dropped.tolist()  # read per delivery: lists index faster
        self.crashes: list[Crash] = faults.crash_schedule(n, net_secret)
        self.up = [True] * n
        self.incarnation = [0] * n
        self.arrival = [_Arrival(None) for _ in range(n)]
        self.uplinks = [Uplink(self.env) for _ in range(n)]
        self.turns = (
            [
                Turns(
                    self.env,
                    length=_length,
                    delay=self._delay,
                    emit=self._emit_planned,
                    cancel=self._cancel,
                )
                for _ in range(n)
            ]
            if planned
            else None
        )
        # a node's deadline: the one armed last (time, id, wait) and its entry in the heap
        self.armed: list[tuple | None] = [None] * n
        self.live: list[tuple | None] = [None] * n
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
            self.shares[u],
            model=self.model,
            x=self.data.x[u],
            y=self.data.y[u],
            dropout_rule=self.faults.dropout_rule,
            memoize_noise=self.plan.factor.kind == "dense",
            gradient_transform=self.gradient_transforms.get(u),
            noise_digests=False,  # (a device's log of its noise; nothing here reads it)
            noise_key=self.noise_keys[u],
            batch_key=self.batch_keys[u],
            cross_keys=(
                None
                if self.shares[u].cross_agent is None
                else runtime.node_keys(
                    self.keys, u, self.shares[u].neighbours, trial=self.trial
                ).cross
            ),
        )

    def _record_eval(self, rounds_done: int, nodes) -> None:
        if rounds_done % self.eval_every == 0 or rounds_done == self.plan.steps:
            slot = self.evals.setdefault(rounds_done, {})
            for u in nodes:
                slot[u] = self.agents[u].theta

    def finish_round(self, u: int, r: int) -> None:
        self.round_end[u, r] = self.env.now
        self._record_eval(r + 1, (u,))
        self.done_pairs += 1
        if self.progress is not None and self.done_pairs % self.plan.n == 0:
            self.progress(self.done_pairs // self.plan.n)

    def snapshot(self, u: int, agent: Agent) -> None:
        if u in self.restarts:
            self.snapshots[u] = copy.deepcopy(agent.snapshot())

    # ------------------------------------------------------------------ a node
    def _start(self, u: int, incarnation: int, first: bool, agent: Agent) -> None:
        """Node ``u`` (this incarnation, on ``agent``) runs the device's round loop,
        :func:`edgedp.rounds.rounds`, with the scenario's dropouts as its skip policy."""
        dropped = self._dropped[u]
        loop = rounds.rounds(agent, skip=dropped.__getitem__)
        self.advance(NodeProcess(self, u, incarnation, agent, loop, first), None)

    def advance(self, node: NodeProcess, reply: bool | None) -> None:
        """Carry out ``node``'s commands (:meth:`NodeProcess.step`) until it has to wait for
        an event.

        A node that crashed in the instant of a skipped round still finishes its skips (and
        may begin one more round) on its agent, as a process that only checks for a crash
        when it wakes up."""
        send, step = node.loop.send, node.step
        while True:
            try:
                cmd = send(reply)
            except StopIteration:
                return
            # a wait (the command of nearly every message) without the dispatch
            reply = node.wait(cmd) if cmd is _WAIT else step(cmd)
            if reply is _SUSPEND:
                return

    def put_on_uplink(self, d: NodeProcess, out) -> None:
        """The round's messages go to the uplink; its wait starts now."""
        self.env.start(self._transmit, d.u, out)
        d.start = self.env.now
        d.limit = self.network.startup_timeout_s if d.first else self.network.round_timeout_s
        d.first = False

    def computed(self, d: NodeProcess, out) -> None:
        if self.incarnation[d.u] == d.incarnation:
            self.put_on_uplink(d, out)
            self.advance(d, None)

    def _wake(self, wait: _Wait) -> None:
        d = wait.driver
        if self.incarnation[d.u] == d.incarnation:
            self.advance(d, True)

    def _fire(self, wait: _Wait) -> None:
        if not wait.done:
            wait.done = True
            self.env.soon(self._wake, wait)

    def arm(self, u: int, time: float, wait: _Wait) -> None:
        """(Re)arm ``u``'s deadline. A timeout armed later at the same time has a later id:
        the heap entry already there is moved to that id when it comes up."""
        eid = self.env.next_id()
        armed = self.armed[u]
        if armed is None or armed[0] != time:  # (the same time again is marked already)
            self.env.mark(time)
        self.armed[u] = (time, eid, wait)
        live = self.live[u]
        if live is None or live[0] > time:
            self.live[u] = (time, eid)
            self.env.at_id(time, eid, self._deadline, u, time, eid)

    def _deadline(self, u: int, time: float, eid: int) -> None:
        if self.live[u] != (time, eid):
            return  # replaced by an earlier deadline
        self.live[u] = None
        at, armed_id, wait = self.armed[u]
        if wait.done:
            return
        if armed_id == eid:
            self._fire(wait)
        else:  # re-armed since: at its own time and id (never earlier than this one)
            self.live[u] = (at, armed_id)
            self.env.at_id(at, armed_id, self._deadline, u, at, armed_id)

    def _arrived(self, arrival: _Arrival) -> None:
        if arrival.wait is not None:
            self._fire(arrival.wait)

    def _notify(self, v: int) -> None:
        """Trigger ``v``'s arrival event (processed as an event of this instant)."""
        arrival = self.arrival[v]
        if not arrival.triggered:
            arrival.triggered = True
            if arrival.wait is not None and not arrival.wait.done:
                self.env.soon(self._arrived, arrival)

    # ------------------------------------------------------------------ links
    def _transmit(self, u: int, out) -> None:
        """A round's messages leave ``u`` one recipient after another."""
        job = _Job(u, out.round, out.recipients, out)
        if self.turns is not None:
            self.turns[u].request(job)
        else:
            self._send(job, 0)

    def _message(self, job: _Job, i: int) -> tuple:
        """``(frames, decoded, max_bytes, size, serialization s, extremes, fingerprint,
        checked)`` of message ``i``: one copy, one decode, one max/min, one fingerprint and
        one check of its content (:func:`edgedp.mailbox.content_checked`) for all recipients;
        per recipient only where frames differ (Zip-DL, DOME)."""
        out = job.out
        if job.message is not None and (out.per_recipient is None or job.index == i):
            return job.message
        frames = [bytes(f) for f in out.frames_for(job.recipients[i])]
        context = self.agents[job.recipients[i]].context
        max_bytes = context.max_bytes
        try:  # the real codec
            decoded = wire.decode(frames, max_bytes=max_bytes)
        except wire.WireError:
            decoded = None  # the recipient's receive() counts the rejection
        if decoded is None:
            extremes = fingerprint = checked = None
        else:
            extremes, fingerprint = _extremes(decoded), wire.fingerprint(decoded)
            checked = mailbox.content_checked(decoded, context, extremes)
        size = sum(len(f) for f in frames)
        delay = self.network.serialization_s(size)
        job.message = (frames, decoded, max_bytes, size, delay, extremes, fingerprint, checked)
        job.index = i
        return job.message

    def _send(self, job: _Job, first: int) -> None:
        for i in range(first, len(job.recipients)):
            message = self._message(job, i)
            size, delay = message[3], message[4]
            if delay:
                self.uplinks[job.sender].request(self._slot, job, i, message, size, delay)
                return
            self._emit(job, i, message, size)

    def _slot(self, job: _Job, i: int, message: tuple, size: int, delay: float) -> None:
        self.env.at(self.env.now + delay, self._sent, job, i, message, size)

    def _sent(self, job: _Job, i: int, message: tuple, size: int) -> None:
        self.uplinks[job.sender].release()
        self._emit(job, i, message, size)
        self._send(job, i + 1)

    def _emit(self, job: _Job, i: int, message: tuple, size: int) -> None:
        """Message ``i`` of ``job`` is on the link: count it, draw its fate."""
        u, v, r = job.sender, job.recipients[i], job.round
        self.result.messages += 1
        self.result.bytes_sent += size
        for obs in self.observers:  # on the link (a tap sees it even if it is lost later)
            obs.on_message(sender=u, recipient=v, round=r, frames=message[0], time=self.env.now)
        lost, latency = self._link[(u, v)]
        if lost[r]:
            self.result.lost_messages += 1
            return
        wire_s = float(latency[r])
        if wire_s:  # the delivery process would only set its timeout: the same id order
            self.env.at(self.env.now + wire_s, self._deliver, _Planned(u, v, r, message, size))
        else:  # a delivery process starting now
            self.env.start(self._deliver, _Planned(u, v, r, message, size))

    # planned uplinks (edgedp_sim.clock.Turns): the same counts and draws as _emit, at plan time
    def _delay(self, job: _Job, i: int) -> float:
        return self._message(job, i)[4]

    def _emit_planned(self, job: _Job, i: int, end: float) -> _Planned:
        message = self._message(job, i)  # (made by _delay just before)
        u, v, r, size = job.sender, job.recipients[i], job.round, message[3]
        planned = _Planned(u, v, r, message, size)
        result = self.result
        result.messages += 1
        result.bytes_sent += size
        lost, latency = self._link[(u, v)]
        if lost[r]:
            result.lost_messages += 1
            planned.lost = True
            return planned
        planned.marked = time = end + float(latency[r])
        self.env.at_unique(time, self._deliver, planned)
        return planned

    def _cancel(self, planned: _Planned) -> None:
        planned.cancelled = True
        self.result.messages -= 1
        self.result.bytes_sent -= planned.size
        if planned.lost:
            self.result.lost_messages -= 1
        if planned.marked is not None:
            self.env.unmark(planned.marked)

    def _deliver(self, planned: _Planned) -> None:
        if planned.cancelled:
            return
        v = planned.v
        if not self.up[v] or self._dropped[v][planned.r]:
            self.result.offline_drops += 1
            return
        agent = self.agents[v]
        frames, decoded, max_bytes, _, _, extremes, fingerprint, checked = planned.message
        for obs in self.delivery_observers:  # it reached v (v may still find it late)
            obs.on_delivery(sender=planned.u, recipient=v, round=planned.r, frames=frames)
        if decoded is None or agent.context.max_bytes != max_bytes:
            agent.receive(frames, authenticated_sender=planned.u)
        else:  # read-only views of bytes: every recipient may keep the same array
            agent.accept(
                decoded,
                authenticated_sender=planned.u,
                extremes=extremes,
                fingerprint=fingerprint,
                owned=True,
                checked=checked,
            )
        if self.env.alone():  # nothing can come between: its two hops are the next events
            arrival = self.arrival[v]
            if not arrival.triggered:
                arrival.triggered = True
                wait = arrival.wait
                if wait is not None and not wait.done:
                    wait.done = True
                    d = wait.driver
                    if self.incarnation[d.u] == d.incarnation:  # _wake
                        self.advance(d, True)
        else:
            self._notify(v)

    def _crash_start(self, c: Crash) -> None:
        self.env.at(self.env.now + c.at_s, self._crash, c)

    def _crash(self, c: Crash) -> None:
        u = c.node
        if not self.up[u] or self.agents[u].done:
            return
        self.up[u] = False
        self.incarnation[u] += 1
        self.result.crashes += 1
        self._notify(u)  # wakes the node's wait so it notices and ends
        if c.down_s != float("inf"):
            self.env.at(self.env.now + c.down_s, self._restart, u)

    def _restart(self, u: int) -> None:
        agent = self._new_agent(u)
        agent.restore(copy.deepcopy(self.snapshots[u]))
        self.agents[u] = agent
        self.up[u] = True
        self.env.start(self._start, u, self.incarnation[u], False, agent)

    def run(self) -> EventResult:
        env = self.env
        for u in range(self.plan.n):
            env.start(self._start, u, 0, True, self.agents[u])
        for c in self.crashes:
            env.start(self._crash_start, c)
        env.drain()
        res = self.result
        res.events, res.instants = env.events, env.instants
        res.planned_uplinks = self.turns is not None
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


_SUSPEND = rounds.SUSPEND
_WAIT = rounds.WAIT


def _extremes(msg: wire.Message) -> tuple:
    """:func:`edgedp.wire.extremes` of ``msg``: the reductions ``np.max`` / ``np.min`` run
    for an ndarray (decoded arrays are), without numpy's wrapper — the same values."""
    return tuple(
        (float(np.maximum.reduce(a, None)), float(np.minimum.reduce(a, None))) if a.size else None
        for a in msg.arrays
    )


def _length(job: _Job) -> int:
    return len(job.recipients)


def _distinct_times(network: Network) -> bool:
    """Whether the scenario's event times are (almost surely) distinct: continuous
    latencies and a finite bandwidth, so uplinks may be planned ahead (edgedp_sim.clock.Turns)."""
    p = network.latency.params
    continuous = (
        network.latency.kind == "lognormal" and p["sigma"] > 0 and p["median_ms"] > 0
    ) or (network.latency.kind == "uniform" and p["low_ms"] < p["high_ms"])
    return continuous and not math.isinf(network.bandwidth_mbps)


def _monotone(progress: Callable[[int], None]) -> Callable[[int], None]:
    """``progress`` called only with rounds beyond those already reported (a rerun)."""
    done = [0]

    def report(rounds: int) -> None:
        if rounds > done[0]:
            done[0] = rounds
            progress(rounds)

    return report


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
    plan_uplinks: bool = True,
    trial: int = 0,
) -> EventResult:
    """Simulate ``plan`` on ``data`` over ``network`` with ``faults`` (defaults: ideal).

    ``observers`` (adversary probes) get ``on_message(sender=, recipient=, round=, frames=,
    time=)`` for every message put on a link, before its loss draw and delivery; those that
    define them also ``on_delivery(sender=, recipient=, round=, frames=)`` when it reaches
    a recipient that is up, and ``on_round(node=, round=, gradient=, batch_size=,
    missing=)`` when a node ends a round (``missing``: the neighbours it mixed no message
    of, :mod:`edgedp_sim.observers`).
    ``initial_state`` is ``"model"`` or ``"normal[:STD]"`` (:mod:`edgedp_sim.initial`).
    ``trial`` picks the noise draw: every node stream (noise, batch order, cross-agent
    noise, initial state) is the plan's key for ``(trial, node)``, so trial ``t`` here draws
    what the batch engine's trial ``t`` draws; the network and faults come from ``seed``.
    ``gradient_transforms`` maps a node to the Agent's ``gradient_transform`` (privacy
    audits plant canaries with it).
    ``plan_uplinks=False`` makes every uplink slot an event (:class:`edgedp_sim.clock.Uplink`)
    even where turns could be planned ahead (:class:`edgedp_sim.clock.Turns`); the results are
    the same (``EventResult.planned_uplinks`` tells which ran).
    """
    if data.nodes != plan.n:
        raise ValueError(f"Expected data for n={plan.n} nodes, got {data.nodes}.")
    network = network or Network(latency=Network().latency)
    args = (
        plan,
        data,
        network,
        faults or Faults(),
        seed,
        eval_every,
        None if progress is None else _monotone(progress),
        observers,
        initial_state,
        gradient_transforms,
    )
    # observers see messages in the order they leave, and gradient transforms may keep
    # state: neither is run twice, so their runs keep the uplinks' events
    if plan_uplinks and _distinct_times(network) and not observers and not gradient_transforms:
        try:
            return _Sim(*args, planned=True, trial=trial).run()
        except TieError:  # two events at one instant: the order needs the full event model
            pass
    return _Sim(*args, trial=trial).run()
