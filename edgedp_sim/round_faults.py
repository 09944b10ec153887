"""Faults in round terms for the batch engine: keyed masks drawn as the event engine draws them.

With zero latency the event engine's faults reduce to three tables, each a pure function of
the scenario seed (``net_secret``, :func:`network_secret`), drawn from the very streams the
event engine reads:

* dropouts: ``Faults.dropout_table`` (node u sits round r out);
* message loss: the loss draw of :class:`edgedp_sim.links.LinkDraws` for each directed link
  (its latency draws first, so a table or random latency cannot shift the stream);
* crashes and churn: ``Faults.crash_schedule`` mapped to rounds by
  :func:`edgedp_sim.churn.crash_rounds` (the event engine's clock at zero latency).

A message u→v of round r is mixed by v iff u and v are both active in round r (neither
sitting out nor down) and the link did not lose it; a node that is not active in a round
keeps its state (its noise is drawn and discarded, as ``Agent.skip_round`` does). The masks
are ``(n, T)`` booleans (sitting out or down; redoing a round with its inbox lost) and the
losses ``(T, n·slots)`` packed 8 per byte.

The event engine at zero latency follows this round model as long as no deadline expires
before a message of its round that is still on its way (``EventResult.rejected == 0``) and
every crash finds the node and its neighbours on the clock of :func:`edgedp_sim.churn.crash_round`
(no earlier wait delayed them). It departs from it otherwise: a node waiting for a message
that never comes (lost, or sent by a neighbour that sat the round out and whose next
message did not reach it) waits for its deadline, and a neighbour whose own deadline comes
first mixes without the waiting node's next message.
"""

from __future__ import annotations

import math

import numpy as np

from edgedp import rng
from edgedp.plan import NoisePlan
from edgedp_sim.churn import Faults, crash_rounds
from edgedp_sim.links import Network

__all__ = ["RoundFaults", "faulty", "network_secret", "refusal", "timing"]


def faulty(faults: Faults, network: Network | None = None) -> bool:
    """Whether a run has faults to draw: dropouts, crashes, churn or message loss. Every
    engine and runner asks here (the batch engine draws them as round masks)."""
    return bool(
        faults.dropout
        or faults.crashes
        or faults.churn_rate_per_s
        or (network is not None and network.loss)
    )


def refusal(plan: NoisePlan, faults: Faults, network: Network | None = None) -> str | None:
    """Why no engine can run ``plan`` under ``faults`` (and ``network`` loss), or None. Every
    engine and front end asks here: an adaptive dome basis under faults (its spanning-tree
    aggregate needs every frame), ``reuse-last`` with a refreshed dome sketch (the kept
    message's coordinates are in an earlier basis; the Agent refuses it too)."""
    sketch = plan.sketch
    if sketch is not None and sketch.basis == "adaptive" and faulty(faults, network):
        return (
            "An adaptive dome basis needs every spanning-tree frame: dropouts, crashes, "
            "churn and message loss are not supported with it (use a block or gaussian basis)."
        )
    if faults.dropout_rule == "reuse-last" and sketch is not None and sketch.refresh:
        return (
            "dropout_rule='reuse-last' would mix a dome message from an earlier round, "
            "whose coordinates are in another sketch basis; use 'renormalize' or 'self' "
            "(or a plan with refresh=0)."
        )
    return None


def timing(network: Network) -> str | None:
    """Why timing matters on ``network`` (a latency that is not zero anywhere, a finite
    bandwidth), or None: only the event engine, which has a clock, can run it then."""
    lat = network.latency
    zero = lat.kind == "constant" and float(lat.params.get("ms", 0)) == 0
    zero |= lat.kind == "table" and not any(lat.table.values())
    zero &= lat.kind != "table" or float(lat.params.get("default_ms", 0)) == 0
    if not zero:
        return f"latency ({lat.kind}) makes timing matter"
    if math.isfinite(network.bandwidth_mbps):
        return f"bandwidth_mbps = {network.bandwidth_mbps:g} makes timing matter"
    return None


def network_secret(seed: int) -> bytes:
    """The secret of the scenario's network and fault draws (as the event engine derives it)."""
    return rng.derive_key(rng.seed_secret(seed), "network").hex().encode()


class RoundFaults:
    """Per-round masks of a plan under ``faults`` and ``network`` loss, scenario ``seed``."""

    def __init__(self, plan: NoisePlan, faults: Faults, network: Network, seed: int) -> None:
        n, T = plan.n, plan.steps  # noqa: N806 (docs/NOTATION.md)
        secret = network_secret(seed)
        idx = np.asarray(plan.mixing_index)
        self.rule = faults.dropout_rule
        why = refusal(plan, faults, network)
        if why is not None:
            raise ValueError(why)
        self.real = idx != np.arange(n)[:, None]  # (n, slots): a neighbour, not self/padding
        self.inactive = faults.dropout_table(n, T, secret)  # (n, T): sits out or is down
        self.dropped_rounds = int(self.inactive.sum())
        crashes = faults.crash_schedule(n, secret)
        self.crash = (
            crash_rounds(
                crashes,
                network.compute_s,
                n=n,
                rounds=T,
                round_timeout_s=network.round_timeout_s,
                startup_timeout_s=network.startup_timeout_s,
            )
            if crashes
            else None
        )
        self.deaf = np.zeros((n, T), dtype=bool) if self.crash is None else self.crash.deaf
        if self.crash is not None:
            self.inactive |= self.crash.down
        self.crashes = 0 if self.crash is None else self.crash.count
        # loss of message v→u (u's slot j holds v) in round r; packed over the n·slots links
        self._lost = np.zeros((T, (idx.size + 7) // 8), dtype=np.uint8)
        if network.loss > 0:
            lost = np.zeros((T, *idx.shape), dtype=bool)
            for u, j in zip(*np.nonzero(self.real), strict=True):
                v = int(idx[u, j])
                gen = rng.generator(rng.derive_key(secret, "link", v, int(u)), 0)
                network.latency.sample(gen, T, (v, int(u)))  # drawn first by LinkDraws
                lost[:, u, j] = gen.random(T) < network.loss
            self._lost = np.packbits(lost.reshape(T, -1), axis=1)
        self.shape = idx.shape
        self.index = idx
        self.weight = np.asarray(plan.mixing_weight, dtype=np.float64)
        self.sent = self.lost_count = self.offline = self.missing_count = 0
        self.has_last = np.zeros(idx.shape, dtype=bool)  # reuse-last: a message kept per slot
        self.last = np.zeros((1, *idx.shape, 1))  # (trials, n, slots, d) once one came

    def lost(self, r: int) -> np.ndarray:
        """(n, slots): the link lost the message of round r to this slot."""
        size = self.shape[0] * self.shape[1]
        return np.unpackbits(self._lost[r], count=size).reshape(self.shape).astype(bool)

    @property
    def nbytes(self) -> int:
        """Bytes held by the masks (dropouts/downtime, redone rounds, packed losses)."""
        return self.inactive.nbytes + self.deaf.nbytes + self._lost.nbytes

    def crash_down(self, u: int, r: int) -> bool:
        """Node u is down (crashed, not yet restarted) in round r."""
        return self.crash is not None and bool(self.crash.down[u, r])

    def active(self, r: int) -> np.ndarray:
        """(n,): the node runs round r (neither sitting out nor down)."""
        return ~self.inactive[:, r]

    def received(self, r: int) -> np.ndarray:
        """(n, slots): the neighbour's round-r message reached this node in time."""
        act = self.active(r)
        hear = act & ~self.deaf[:, r]
        return self.real & act[self.index] & hear[:, None] & ~self.lost(r)

    def fill(self, result, trials: int) -> None:
        """Put the fault counts (and the messages actually sent) into a BatchResult."""
        result.messages = self.sent * trials
        result.lost_messages = self.lost_count
        result.offline_drops = self.offline
        result.missing = self.missing_count
        result.skipped_rounds = int(self.inactive.sum())
        result.crashes = self.crashes


def receive(rf: RoundFaults, algo, r: int, before: dict, sent: dict, gathered, ctx) -> dict:
    """Round r's mixing under the faults: the Agent's dropout rule
    (``edgedp.dropout.mixing_terms``) for the slots whose message did not come, and the
    state of every inactive node kept.

    ``before``/``sent``: the algorithm state before and after ``send``; ``gathered``
    ``(trials, n, slots, d)`` the messages in each node's padded-row order.
    """
    act = rf.active(r)
    lost = rf.lost(r)
    got = rf.real & act[rf.index] & (act & ~rf.deaf[:, r])[:, None] & ~lost
    missing = rf.real & ~got & act[:, None]
    sender = rf.real & act[rf.index]  # messages put on a link
    rf.sent += int(sender.sum())
    rf.lost_count += int((sender & lost).sum())
    rf.offline += int((sender & ~lost & ~act[:, None]).sum())
    rf.missing_count += int(missing.sum())
    weights = np.asarray(rf.weight, dtype=np.float64)
    if missing.any():
        n = weights.shape[0]
        own_slot = np.argmax(rf.index == np.arange(n)[:, None], axis=1)
        own = gathered[:, np.arange(n), own_slot][:, :, None, :]
        vectors = gathered
        zero = missing
        if rf.rule == "reuse-last":
            reuse = missing & rf.has_last
            vectors = np.where(reuse[None, :, :, None], rf.last, vectors)
            zero = missing & ~rf.has_last
        vectors = np.where(zero[None, :, :, None], own, vectors)
        if rf.rule in ("renormalize", "reuse-last"):
            weights = np.where(zero, 0.0, weights)
            total = np.zeros(n)
            for j in range(weights.shape[1]):  # in slot order, as Python's sum(weights)
                total = total + weights[:, j]
            rows = missing.any(axis=1) & (total != 1.0)
            weights = np.where(
                rows[:, None], weights / np.where(rows, total, 1.0)[:, None], weights
            )
        gathered = vectors
    state = algo.receive(sent, weights, gathered, ctx)
    if rf.rule == "reuse-last":  # the messages that came are the last seen from now on
        rf.last = np.where(got[None, :, :, None], gathered, rf.last)
        rf.has_last |= got
    if act.all():
        return state
    keep = ~act
    return {
        k: np.where(keep.reshape((1, -1) + (1,) * (v.ndim - 2)), before[k], v)
        for k, v in state.items()
    }
