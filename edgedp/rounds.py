"""The round loop of a node, once: a generator of commands that each runtime interprets.

:func:`rounds` drives one :class:`~edgedp.agent.Agent` through its plan and says what the
runtime must do — the way SimPy's ``RealtimeEnvironment`` differs from ``Environment`` only
in how it waits, the device daemon (``firmware_py.daemon``: ZeroMQ, wall-clock deadlines,
durable records before each send) and the simulators differ only in how they carry out
these commands:

* :class:`Rejoined` — the node fell past its neighbours' receive window and skipped to
  ``target`` (nothing sent for the skipped rounds, their noise drawn and discarded);
* :class:`Skipped` — the node sat round ``round`` out (the ``skip`` policy said so: the
  simulator's dropout table);
* :class:`Send` — the round's messages, to be put on the links (``first``: the first round
  this runtime begins, which waits ``startup`` instead of the round timeout);
* :class:`Wait` — wait for a message or the round's deadline; the runtime resumes the
  generator with True when something was delivered to the agent, False when the deadline
  passed (the agent is told — :meth:`~edgedp.agent.Agent.deadline_passed`: what the missing
  neighbours sent past the window may then justify a rejoin — and the round ends with the
  dropout rule for the missing neighbours);
* :class:`Ended` — the round is mixed and over (its report).

A round policy is one function around this loop (e.g. a ``skip`` predicate), not a change to
every runtime. The generator raises what the Agent raises (a non-finite message or state);
a runtime that stops in a :class:`Wait` simply does not resume it.

A runtime is an :class:`Interpreter`: one method per command (as SimPy's environments differ
in ``step``), dispatched by :meth:`Interpreter.step`. Every method is abstract, so a new
command is a TypeError at the first use of every runtime that has no method for it, never a
command that falls through to another's branch; :meth:`~Interpreter.step` refuses anything
that is not a command.

>>> cmds = rounds(_Scripted(rounds_left=1))
>>> [type(c).__name__ for c in cmds]
['Send', 'Wait', 'Ended']
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "COMMANDS",
    "SUSPEND",
    "WAIT",
    "Ended",
    "Interpreter",
    "Rejoined",
    "Send",
    "Skipped",
    "Wait",
    "rounds",
]


@dataclass(frozen=True, slots=True)
class Rejoined:
    """Rounds ``behind .. target - 1`` were skipped (``skipped`` of them)."""

    behind: int
    target: int
    skipped: int


@dataclass(frozen=True, slots=True)
class Skipped:
    """Round ``round`` was sat out (nothing sent, nothing mixed)."""

    round: int


@dataclass(frozen=True, slots=True)
class Send:
    """Put ``out`` (an :class:`~edgedp.agent.Outgoing`) on the links."""

    out: Any
    first: bool


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait for a delivery or the deadline (resume with True / False)."""


@dataclass(frozen=True, slots=True)
class Ended:
    """The round is over: ``report`` is the Agent's :class:`~edgedp.agent.RoundReport`."""

    report: Any


Command = Rejoined | Skipped | Send | Wait | Ended
#: Every command :func:`rounds` yields (an :class:`Interpreter` has one method for each).
COMMANDS: tuple[type, ...] = (Rejoined, Skipped, Send, Wait, Ended)
#: What an :class:`Interpreter`'s method returns when the runtime stops driving the loop for
#: now (an event-driven runtime resumes it from a later event).
SUSPEND: Any = object()


class Interpreter(abc.ABC):
    """A runtime of the round loop: one method per command (module docstring).

    Each returns what the generator is resumed with — for :class:`Wait` True (something was
    delivered) or False (the deadline passed), None for the others — or :data:`SUSPEND`.
    """

    __slots__ = ()

    def step(self, cmd: Command) -> bool | None:
        """Carry out ``cmd`` with this runtime's method for its command."""
        name = _METHODS.get(type(cmd))
        if name is None:
            raise TypeError(
                f"{type(self).__name__} has no method for the round command {cmd!r} "
                f"(expected one of {', '.join(c.__name__ for c in COMMANDS)})"
            )
        return getattr(self, name)(cmd)

    @abc.abstractmethod
    def rejoined(self, cmd: Rejoined) -> None:
        """The node skipped to ``cmd.target`` (nothing to send for the rounds skipped)."""

    @abc.abstractmethod
    def skipped(self, cmd: Skipped) -> None:
        """The node sat ``cmd.round`` out."""

    @abc.abstractmethod
    def send(self, cmd: Send) -> None:
        """Put the round's messages on the links."""

    @abc.abstractmethod
    def wait(self, cmd: Wait) -> bool:
        """Wait for a delivery (True) or the round's deadline (False)."""

    @abc.abstractmethod
    def ended(self, cmd: Ended) -> None:
        """The round is mixed and over."""


#: The one :class:`Wait` the loop yields (it has no fields; a node waits at nearly every message).
WAIT = Wait()
#: each command's method: its class name in lower case (``Send`` → :meth:`Interpreter.send`)
_METHODS: dict[type, str] = {c: c.__name__.lower() for c in COMMANDS}


def rounds(
    agent, *, skip: Callable[[int], bool] | None = None
) -> Generator[Command, bool | None, None]:
    """The commands of ``agent``'s rounds until its plan is done (module docstring).

    ``skip(round)``: whether the node sits that round out (after any rejoin).
    """
    first = True
    while not agent.done:
        target = agent.rejoin_target()
        if target is not None:  # a majority of the neighbours is past the receive window
            behind = agent.round
            yield Rejoined(behind, target, agent.rejoin(target))
            continue  # the skip may have ended the plan
        if skip is not None and skip(agent.round):
            r = agent.round
            agent.skip_round()
            yield Skipped(r)
            continue
        yield Send(agent.begin_round(), first)
        first = False
        while agent.waits():
            if not (yield WAIT):
                agent.deadline_passed()  # the missing ones' far rounds may now count
                break
        yield Ended(agent.end_round())


class _Scripted:
    """A stand-in agent for the doctest: it waits until its runtime says the deadline passed."""

    def __init__(self, rounds_left: int) -> None:
        self.round, self.left, self.done = 0, rounds_left, rounds_left == 0

    def rejoin_target(self) -> None:
        return None

    def begin_round(self) -> str:
        return f"round {self.round}"

    def waits(self) -> bool:
        return True

    def deadline_passed(self) -> None:
        """Nothing to note."""

    def end_round(self) -> str:
        self.round += 1
        self.done = self.round == self.left
        return "mixed"
