"""The event engine: SimPy processes driving the same :class:`edgedp.agent.Agent` as devices.

Every node is a process ``node(u)``: begin its round, hand the frames to its uplink, wait
for its neighbours' messages (or the round deadline, or until every missing neighbour is
known to have moved on), end the round. Messages are real wire frames; a transmission is
a process that holds the sender's uplink for the serialization delay (size / bandwidth) and
then waits the link's latency before ``receive``. Loss, per-round dropouts, crashes with
restart from the last round-boundary snapshot and departures come from keyed draws of the
scenario seed (sim/links.py, sim/churn.py). A node restarted more than the receive window
behind rejoins as a device does (:meth:`edgedp.agent.Agent.rejoin`). The number of events
is linear in the number of messages: there is no polling.

With zero latency, no loss and no faults, the models equal the batch engine's bit for bit.
A node whose message would be non-finite raises the Agent's
:class:`~edgedp.errors.NonFiniteMessageError` (naming the node and round) out of ``run``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import simpy

from edgedp import models, rng, streams
from edgedp.agent import Agent
from edgedp.plan import NoisePlan
from sim import evaluation, initial
from sim.churn import Crash, Faults
from sim.datasets import FederatedData
from sim.links import LinkDraws, Network
from sim.observers import LinkObserver

__all__ = ["EventResult", "run"]


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
        self.env = simpy.Environment()
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
        self.arrival = [self.env.event() for _ in range(n)]
        self.uplink = [simpy.Resource(self.env, 1) for _ in range(n)]
        self.snapshots = [a.snapshot() for a in self.agents]
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

    # ---------------------------------------------------------------- processes
    def node(self, u: int, incarnation: int, first: bool):
        env, agent = self.env, self.agents[u]
        while not agent.done:
            target = agent.rejoin_target()
            if target is not None:  # fell past the receive window: skip to the neighbours
                behind = agent.round
                self.result.skipped_rounds += agent.rejoin(target)
                for r in range(behind, target):
                    self._finish_round(u, r)
                self.snapshots[u] = copy.deepcopy(agent.snapshot())
            r = agent.round
            if self.dropped[u, r]:
                agent.skip_round()
                self.result.skipped_rounds += 1
                self._finish_round(u, r)
                yield env.timeout(0)
                continue
            out = agent.begin_round()
            if self.network.compute_s:
                yield env.timeout(self.network.compute_s)
                if self.incarnation[u] != incarnation:
                    return
            env.process(self.transmit(u, out))
            start = env.now
            limit = self.network.startup_timeout_s if first else self.network.round_timeout_s
            while not agent.ready():
                missing = agent.missing()
                if missing and set(agent.hopeless()) == set(missing):
                    break
                remaining = start + limit - env.now
                if remaining <= 0:
                    break
                self.arrival[u] = env.event()
                yield self.arrival[u] | env.timeout(remaining)
                if self.incarnation[u] != incarnation:
                    return  # crashed while waiting: this process dies with the node
            report = agent.end_round()
            self.result.missing += len(report.missing)
            for obs in self.round_observers:  # the round's private gradient
                obs.on_round(node=u, round=r, gradient=agent.last_gradient, batch_size=agent.batch)
            self.snapshots[u] = copy.deepcopy(agent.snapshot())
            self._finish_round(u, r)
            first = False

    def transmit(self, u: int, out):
        # one copy for all recipients; per recipient only where frames differ (Zip-DL, DOME)
        per_recipient = out.per_recipient is not None
        frames = None if per_recipient else [bytes(f) for f in out.frames]
        for v in out.recipients:
            if per_recipient:
                frames = [bytes(f) for f in out.frames_for(v)]
            size = sum(len(f) for f in frames)
            delay = self.network.serialization_s(size)
            if delay:
                with self.uplink[u].request() as req:
                    yield req
                    yield self.env.timeout(delay)
            self.result.messages += 1
            self.result.bytes_sent += size
            for obs in self.observers:  # on the link (a tap sees it even if it is lost later)
                obs.on_message(
                    sender=u, recipient=v, round=out.round, frames=frames, time=self.env.now
                )
            if self.links.lost[(u, v)][out.round]:
                self.result.lost_messages += 1
                continue
            self.env.process(
                self.deliver(u, v, frames, out.round, float(self.links.latency[(u, v)][out.round]))
            )
        if False:  # pragma: no cover  (makes this a generator even with no recipients)
            yield

    def deliver(self, u: int, v: int, frames, round_: int, latency: float):
        if latency:
            yield self.env.timeout(latency)
        if not self.up[v] or self.dropped[v, round_]:
            self.result.offline_drops += 1
            return
        if not self.agents[v].receive(frames, authenticated_sender=u):
            self.result.rejected += 1
        if not self.arrival[v].triggered:
            self.arrival[v].succeed()

    def crash(self, c: Crash):
        yield self.env.timeout(c.at_s)
        u = c.node
        if not self.up[u] or self.agents[u].done:
            return
        self.up[u] = False
        self.incarnation[u] += 1
        self.result.crashes += 1
        if not self.arrival[u].triggered:
            self.arrival[u].succeed()  # wake the process so it notices and ends
        if c.down_s == float("inf"):
            return
        yield self.env.timeout(c.down_s)
        agent = self._new_agent(u)
        agent.restore(copy.deepcopy(self.snapshots[u]))
        self.agents[u] = agent
        self.up[u] = True
        self.env.process(self.node(u, self.incarnation[u], first=False))

    def run(self) -> EventResult:
        for u in range(self.plan.n):
            self.env.process(self.node(u, 0, first=True))
        for c in self.crashes:
            self.env.process(self.crash(c))
        events = 0
        while True:
            try:
                self.env.step()
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
