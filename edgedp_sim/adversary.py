"""Adversary probes: what honest-but-curious nodes and eavesdroppers observe, in both engines.

Attackers (paper 004 §6.3, Fig. 11; paper 000 §4.2 and App. A):

* **honest-but-curious** colluding set 𝒜 (PNDP): sees every message its members send or
  receive, and its members' own gradients, noise and states;
* **eavesdropper** tapping one or more links, every link of a node, or all links: sees the
  messages crossing them (the LDP attacker when it taps all links);
* **encrypted transport** (CURVE): the eavesdropper sees only sizes and timing — nothing that
  depends on the data, so whatever it computes carries no information (MI 0).

A :class:`Probe` turns an :class:`Attacker` into an :class:`ObservationLog` with arrays shaped
``(trials, rounds, ...)``. It listens to either engine through one of two small interfaces:

* :class:`RoundObserver` — the batch engine calls ``observe(view)`` once per round with a
  :class:`RoundView` of every node and trial (messages, gradients, noise, state);
* :class:`LinkObserver` — the event engine calls ``on_message(...)`` for every message put
  on a link, with its wire frames and the simulated time (one trial), ``on_delivery(...)``
  when it reaches its recipient and ``on_round(...)`` when a node ends a round.

An eavesdropper sees what crosses its tapped links; a curious node sees what it sends and
what reaches it (a lost message never does). Both learn which neighbours' messages each node
mixed in each round (``ObservationLog.unmixed``: assumed known to the attacker, the
conservative choice), so an attack rebuilds a node's update only in the rounds it mixed
every message, and leaves the others out rather than filling them with wrong numbers.

Pass probes as ``observers=`` to :func:`edgedp_sim.batch.run` or :func:`edgedp_sim.engine.run`.
Algorithms that send one message per recipient (Zip-DL) are recorded per tapped link
(``link_messages``); the others per sender (``messages``).

:class:`GroundTruth` records the victims' private values (the mean clipped gradient) for
leakage and reconstruction metrics (:mod:`edgedp_sim.leakage`, :mod:`edgedp_sim.attacks`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgpack
import numpy as np

from edgedp import wire
from edgedp.plan import NoisePlan
from edgedp_sim.observers import LinkObserver, RoundObserver, RoundView

__all__ = [
    "Attacker",
    "GroundTruth",
    "LinkObserver",
    "ObservationLog",
    "Probe",
    "RoundObserver",
    "RoundView",
    "honest_but_curious",
    "parse_attacker",
    "tap_all",
    "tap_links",
    "tap_node",
]

_KINDS = ("hbc", "links", "node", "all")


@dataclass(frozen=True, slots=True)
class Attacker:
    """Who attacks: ``kind`` in {"hbc", "links", "node", "all"}; build with the helpers below."""

    kind: str
    nodes: tuple[int, ...] = ()
    links: tuple[tuple[int, int], ...] = ()
    encrypted: bool = False

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"Unknown attacker kind={self.kind!r}; expected one of {_KINDS}.")
        if self.kind == "hbc" and self.encrypted:
            raise ValueError(
                "An honest-but-curious node decrypts what it receives; drop encrypted."
            )

    @property
    def label(self) -> str:
        body = {
            "hbc": "hbc:" + ",".join(map(str, self.nodes)),
            "links": "eavesdropper:" + ",".join(f"{u}-{v}" for u, v in self.links),
            "node": f"eavesdropper:node:{self.nodes[0] if self.nodes else '?'}",
            "all": "eavesdropper:all",
        }[self.kind]
        return body + (":encrypted" if self.encrypted else "")

    def resolve(self, edges: np.ndarray, n: int):
        """``(directed links seen, senders whose messages are visible, members)``."""
        directed = sorted(
            {(int(u), int(v)) for u, v in edges} | {(int(v), int(u)) for u, v in edges}
        )
        nodes = set(self.nodes)
        if any(not 0 <= u < n for u in nodes | {x for link in self.links for x in link}):
            raise ValueError(f"Attacker {self.label} names a node outside 0..{n - 1}.")
        if self.kind == "all":
            seen = directed
        elif self.kind == "links":
            want = {(u, v) for u, v in self.links} | {(v, u) for u, v in self.links}
            missing = sorted(want - set(directed))
            if missing:
                raise ValueError(f"Attacker {self.label}: {missing} are not links of the graph.")
            seen = sorted(want)
        else:  # hbc and node: every link touching the nodes
            seen = [(u, v) for u, v in directed if u in nodes or v in nodes]
        senders = () if self.encrypted else tuple(sorted({u for u, _ in seen} | nodes))
        members = tuple(sorted(nodes)) if self.kind == "hbc" else ()
        return tuple(seen), senders, members


def honest_but_curious(*nodes: int) -> Attacker:
    """A colluding set of curious nodes (PNDP attacker)."""
    if not nodes:
        raise ValueError("Expected at least one honest-but-curious node.")
    return Attacker("hbc", nodes=tuple(sorted(set(int(u) for u in nodes))))


def tap_links(*links: tuple[int, int], encrypted: bool = False) -> Attacker:
    """An eavesdropper on the given (undirected) links."""
    if not links:
        raise ValueError("Expected at least one link to tap.")
    return Attacker("links", links=tuple((int(u), int(v)) for u, v in links), encrypted=encrypted)


def tap_node(node: int, *, encrypted: bool = False) -> Attacker:
    """An eavesdropper on every link of ``node``."""
    return Attacker("node", nodes=(int(node),), encrypted=encrypted)


def tap_all(*, encrypted: bool = False) -> Attacker:
    """An eavesdropper on every link (the LDP attacker when links are in the clear)."""
    return Attacker("all", encrypted=encrypted)


def parse_attacker(text: str) -> Attacker:
    """``hbc:1,2`` | ``eavesdropper:0-1,1-2`` | ``eavesdropper:node:3`` | ``eavesdropper:all``,
    each eavesdropper optionally followed by ``:encrypted``.

    >>> parse_attacker("eavesdropper:node:3:encrypted")
    Attacker(kind='node', nodes=(3,), links=(), encrypted=True)
    """
    parts = text.strip().split(":")
    encrypted = parts[-1] == "encrypted"
    parts = parts[:-1] if encrypted else parts
    try:
        if parts[0] == "hbc" and len(parts) == 2 and not encrypted:
            return honest_but_curious(*(int(u) for u in parts[1].split(",")))
        if parts[0] == "eavesdropper" and len(parts) == 2 and parts[1] == "all":
            return tap_all(encrypted=encrypted)
        if parts[0] == "eavesdropper" and len(parts) == 3 and parts[1] == "node":
            return tap_node(int(parts[2]), encrypted=encrypted)
        if parts[0] == "eavesdropper" and len(parts) == 2:
            pairs = [tuple(int(u) for u in p.split("-")) for p in parts[1].split(",")]
            if all(len(p) == 2 for p in pairs):
                return tap_links(*pairs, encrypted=encrypted)
    except ValueError:
        pass
    raise ValueError(
        f"Cannot parse attacker {text!r}; expected hbc:NODES, eavesdropper:U-V[,U-V...], "
        "eavesdropper:node:N or eavesdropper:all (eavesdroppers may end in :encrypted)."
    )


@dataclass(slots=True, eq=False)
class ObservationLog:
    """What one attacker observed, per trial and round.

    ``messages[:, t, i]`` is the message of ``senders[i]`` in round t (NaN when not seen;
    None when the links are encrypted); ``sizes``/``times`` are per tapped directed link
    (bytes on the wire, 0 when not seen; simulated send time in the event engine, the round
    index in the batch engine, where one row serves every trial: a read-only broadcast);
    ``own`` holds the members' own ``gradient`` (Σ clip(g) / B, the private value),
    ``noise`` (as drawn) and state entries at the start of each round,
    ``(trials, rounds, members, d)`` — batch engine only; ``batch_size`` is B.
    ``link_messages[:, t, i]`` is the message on ``links[i]`` in round t, recorded only for
    algorithms that send one message per recipient (Zip-DL; ``messages`` is then NaN).
    ``unmixed[(t, u)]`` are the neighbours whose round-t message node u did not mix (lost,
    late, or not sent; event engine only: in the batch engine every node mixes them all).
    """

    attacker: Attacker
    links: tuple[tuple[int, int], ...]
    senders: tuple[int, ...]
    members: tuple[int, ...]
    messages: np.ndarray | None
    sizes: np.ndarray
    times: np.ndarray
    own: dict[str, np.ndarray] = field(default_factory=dict)
    batch_size: int = 1
    link_messages: np.ndarray | None = None
    unmixed: dict[tuple[int, int], frozenset[int]] = field(default_factory=dict)

    def sent_by(self, node: int) -> np.ndarray:
        """``(trials, rounds, d)``: the messages of ``node`` (ValueError when not visible)."""
        if self.messages is None or node not in self.senders:
            raise ValueError(f"Attacker {self.attacker.label} does not see node {node}'s messages.")
        return self.messages[:, :, self.senders.index(node)]


def _by_round(shape: tuple[int, ...], fill: float = np.nan) -> np.ndarray:
    """An array ``(trials, rounds, ...)`` filled with ``fill``, stored round by round: the
    batch engine writes one round of every trial at a time, contiguously.

    Allocated without numpy's huge-page advice (restored at once): on a host whose memory is
    fragmented, ``MADV_HUGEPAGE`` makes the kernel compact memory before it maps each fresh
    log — Table 4's probes of 10 chunks of 500 trials × 1,000 rounds took 1.1 s CPU to set up
    against 0.26 s without (only speed: the array is the same)."""
    previous = None if _HUGEPAGE is None else _HUGEPAGE(False)
    try:
        return np.full((shape[1], shape[0], *shape[2:]), fill).swapaxes(0, 1)
    finally:
        if previous is not None:
            _HUGEPAGE(previous)


def _hugepage_switch():
    """numpy's ``_set_madvise_hugepage`` (returns the previous setting), or None."""
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy < 2
        from numpy.core import multiarray  # type: ignore[no-redef]
    return getattr(multiarray, "_set_madvise_hugepage", None)


_HUGEPAGE = _hugepage_switch()


@functools.lru_cache(maxsize=1 << 14)
def _wire_size(round_: int, sender: int, dim: int) -> int:
    """Bytes of a model message on the wire (header size varies with round and sender ids)."""
    header = wire.encode(wire.Message(bytes(32), round_, sender, "model", (np.zeros(1),)))[0]
    return len(header) - len(msgpack.packb(1)) + len(msgpack.packb(dim)) + 8 * dim


class Probe:
    """Records one attacker's observations; a :class:`RoundObserver` and a :class:`LinkObserver`.

    Args:
      attacker: who attacks.
      plan: the run's plan (graph, rounds).
      trials: trials of the batch run (1 for the event engine).
      dim: model dimension d.
    """

    def __init__(self, attacker: Attacker, plan: NoisePlan, *, trials: int, dim: int) -> None:
        links, senders, members = attacker.resolve(plan.edges, plan.n)
        T = plan.steps  # noqa: N806 (paper letter)
        messages = None if attacker.encrypted else _by_round((trials, T, len(senders), dim))
        self.log = ObservationLog(
            attacker,
            links,
            senders,
            members,
            messages,
            *self._traffic(trials, T, len(links)),
        )
        self._link_index = {link: i for i, link in enumerate(links)}
        self._members = frozenset(members)
        self._dim = dim
        # slot of recipient v in sender u's padded mixing row (per-recipient messages)
        cross = plan.cross_agent
        self._per_recipient = cross is not None and cross.message_variance > 0
        self._slots = [
            int(np.flatnonzero(np.asarray(plan.mixing_index[u]) == v)[0]) for u, v in links
        ]

    def _traffic(self, trials: int, rounds: int, links: int) -> tuple[np.ndarray, np.ndarray]:
        """``sizes`` and ``times``: one row of rounds × links, shared by every trial of a
        batch run (a read-only broadcast: the same bytes and round in every trial)."""
        self._sizes = np.zeros((1, rounds, links))
        self._times = np.full((1, rounds, links), np.nan)
        if trials == 1:
            return self._sizes, self._times
        shape = (trials, rounds, links)
        return np.broadcast_to(self._sizes, shape), np.broadcast_to(self._times, shape)

    def _fit(self, width: int) -> None:
        """Messages narrower than the model (DOME's k-float sketches): resize once."""
        m = self.log.messages
        if m.shape[-1] != width:
            self.log.messages = _by_round(m.shape[:-1] + (width,))

    def _per_link(self, trials: int) -> np.ndarray:
        if self.log.link_messages is None:
            shape = (trials, self.log.sizes.shape[1], len(self.log.links), self._dim)
            self.log.link_messages = _by_round(shape)
        return self.log.link_messages

    def observe(self, view: RoundView) -> None:
        log, t = self.log, view.round
        if log.messages is not None:
            if view.messages.ndim == 3:  # one message per sender
                self._fit(view.messages.shape[-1])
                log.messages[:, t] = view.messages[:, list(log.senders)]
            else:  # (trials, nodes, slots, d): one message per recipient (Zip-DL)
                senders = [u for u, _ in log.links]
                self._per_link(view.messages.shape[0])[:, t] = view.messages[
                    :, senders, self._slots
                ]
        width = view.messages.shape[-1]  # d, or k for DOME's sketched messages
        self._sizes[0, t] = [_wire_size(t, u, width) for u, _ in log.links]
        self._times[0, t] = t
        if not log.members:
            return
        own = list(log.members)
        log.batch_size = view.batch_size
        grad = None if view.gradients is None else view.gradients / view.batch_size
        for name, value in [("gradient", grad), ("noise", view.noise), *view.state.items()]:
            if value is None:
                continue
            if name not in log.own:
                shape = (log.sizes.shape[0], log.sizes.shape[1], len(own), *value.shape[2:])
                log.own[name] = _by_round(shape)
            log.own[name][:, t] = value[:, own]

    def on_message(
        self, *, sender: int, recipient: int, round: int, frames: Sequence[bytes], time: float
    ) -> None:
        log = self.log
        i = self._link_index.get((sender, recipient))
        if i is None:
            return
        log.sizes[0, round, i] = sum(len(f) for f in frames)
        log.times[0, round, i] = time
        # a tap sees the message on the link; a curious node its own (what it receives:
        # on_delivery)
        if log.attacker.kind != "hbc" or sender in self._members:
            self._record(i, sender, round, frames)

    def on_delivery(
        self, *, sender: int, recipient: int, round: int, frames: Sequence[bytes]
    ) -> None:
        """Event engine: the message reached ``recipient`` (a curious node reads it)."""
        i = self._link_index.get((sender, recipient))
        if i is not None and recipient in self._members and sender not in self._members:
            self._record(i, sender, round, frames)

    def on_round(self, *, node: int, round: int, missing=(), **_) -> None:
        """Event engine: ``node`` ended ``round`` without the messages of ``missing``."""
        if missing:
            self.log.unmixed[(round, node)] = frozenset(int(v) for v in missing)

    def _record(self, i: int, sender: int, round: int, frames: Sequence[bytes]) -> None:
        log = self.log
        if log.messages is None:
            return
        payload = wire.decode(frames).arrays[0]
        if self._per_recipient:
            self._per_link(1)[0, round, i] = payload
        else:
            self._fit(payload.shape[-1])
            log.messages[0, round, log.senders.index(sender)] = payload


class GroundTruth:
    """Records the private values of ``nodes``: ``gradient`` (Σ clip(g) / B; NaN in rounds
    without a gradient, e.g. Muffliato's gossip-only rounds) and ``noise`` (as drawn;
    ``(trials, rounds, len(nodes), slots, d)`` for per-recipient noise, ``(..., k)`` for
    DOME's noise in the sketch space), ``(trials, rounds,
    len(nodes), d)`` — a :class:`RoundObserver` for scoring attacks."""

    def __init__(self, nodes: Sequence[int], *, trials: int, steps: int, dim: int) -> None:
        self.nodes = tuple(int(u) for u in nodes)
        shape = (trials, steps, len(self.nodes), dim)
        self.gradient = _by_round(shape)
        self.noise = _by_round(shape, 0.0)

    def observe(self, view: RoundView) -> None:
        nodes = list(self.nodes)
        if view.gradients is not None:
            if self.gradient.shape[3:] != view.gradients.shape[2:]:  # DOME: sketched (R^k)
                self.gradient = _by_round(self.gradient.shape[:3] + view.gradients.shape[2:])
            self.gradient[:, view.round] = view.gradients[:, nodes] / view.batch_size
        if view.noise is not None:
            if self.noise.shape[3:] != view.noise.shape[2:]:  # per-recipient or sketched noise
                self.noise = _by_round(self.noise.shape[:3] + view.noise.shape[2:], 0.0)
            self.noise[:, view.round] = view.noise[:, nodes]

    def on_message(self, **_) -> None:
        """Event engine: traffic carries no ground truth."""

    def on_round(self, *, node: int, round: int, gradient, batch_size: int, **_) -> None:
        """Event engine (one trial): ``node`` ended ``round`` having used ``gradient``."""
        if node in self.nodes and gradient is not None:
            self.gradient[0, round, self.nodes.index(node)] = gradient / batch_size

    def of(self, node: int) -> np.ndarray:
        """``(trials, rounds, d)`` private gradients of ``node``."""
        return self.gradient[:, :, self.nodes.index(node)]
