"""The one round loop (edgedp.rounds) interpreted in lockstep gives the batch engine's bits;
its commands come in the order every runtime relies on; a round policy is one predicate."""

import pytest

from edgedp import api, models, rounds, streams
from edgedp.agent import Agent
from edgedp.transport import Transport
from edgedp.transport.loopback import LoopbackNetwork
from edgedp_sim import batch, scenarios


def _agents(plan, data):
    model = models.for_task(plan.task, data.features)
    keys = streams.RunKeys.simulation(plan)
    out = []
    for u in range(plan.n):
        share = plan.share(u)
        out.append(
            Agent(share, model=model, x=data.x[u], y=data.y[u], **keys.agent(u, share.neighbours))
        )
    return out


def _lockstep(agents, skip=None):
    """Every driver to its next command, carried out over in-memory transports: a Send's
    frames reach every recipient's inbox before any driver is resumed, a Wait takes what is
    there and is answered 'deadline' (False)."""
    net = LoopbackNetwork({u: a.neighbours for u, a in enumerate(agents)})
    links = [net.endpoint(u) for u in range(len(agents))]
    assert all(isinstance(link, Transport) for link in links)
    drivers = [
        rounds.rounds(a, skip=None if skip is None else skip(u)) for u, a in enumerate(agents)
    ]
    log = [[] for _ in agents]
    pending = [next(d) for d in drivers]
    while any(c is not None for c in pending):
        for u, cmd in enumerate(pending):
            if isinstance(cmd, rounds.Send):
                for v in cmd.out.recipients:
                    links[u].send((v,), cmd.out.frames_for(v))
        for u in range(len(agents)):
            while (item := links[u].recv(0)) is not None:
                # as the daemon: owned frames are kept (read-only) instead of copied
                agents[u].receive(item[0], authenticated_sender=item[1], owned=links[u].OWNS_FRAMES)
        for u, cmd in enumerate(pending):
            if cmd is None:
                continue
            log[u].append(type(cmd).__name__)
            try:
                pending[u] = drivers[u].send(False if isinstance(cmd, rounds.Wait) else None)
            except StopIteration:
                pending[u] = None
    return log


@pytest.mark.parametrize("mechanism", ["dp-dsgd", "sr-gt", "whisper"])
def test_lockstep_interpretation_gives_the_batch_engines_bits(mechanism):
    options = {
        "dp-dsgd": {"target_epsilon": 4.0, "delta": 1e-6},
        "sr-gt": {"target_epsilon": 1.0, "gamma": 0.001, "beta": 1000, "q1": 0.97, "q2": 0.98},
        "whisper": {"target_epsilon": 4.0, "delta": 1e-6, "clip_norm": 0.1},
    }[mechanism]
    plan = api.make_plan(mechanism, "ring:6", steps=5, batch_size=4, **options)
    data = scenarios.from_plan(plan).data()
    agents = _agents(plan, data)
    log = _lockstep(agents)
    assert all(entry == ["Send", "Ended"] * plan.steps for entry in log)
    assert batch.model_digest([a.theta for a in agents]) == batch.run(plan, data).digests[0]


def test_a_round_policy_is_one_predicate():
    """Node 0 sits round 2 out: it sends nothing that round, its neighbours wait for it (and
    end that round by the dropout rule), and every node still finishes the plan."""
    plan = api.make_plan("dp-dsgd", "ring:6", steps=4, batch_size=4, noise_multiplier=1.0)
    agents = _agents(plan, scenarios.from_plan(plan).data())
    log = _lockstep(agents, skip=lambda u: lambda r: u == 0 and r == 2)
    assert log[0][:5] == ["Send", "Ended", "Send", "Ended", "Skipped"]
    assert log[0].count("Send") == log[0].count("Ended") == 3  # rounds 0, 1, 3
    for v in plan.share(0).neighbours:
        if v != 0:  # its neighbours miss node 0 in round 2 and end it by the deadline
            assert log[v][:6] == ["Send", "Ended", "Send", "Ended", "Send", "Wait"]
            assert log[v].count("Ended") == plan.steps
    assert all(a.done for a in agents)


def test_zeromq_links_are_a_transport():
    import zmq

    from edgedp.transport.zmq import ZmqTransport

    public, secret = zmq.curve_keypair()
    link = ZmqTransport(
        node=0,
        bind="tcp://127.0.0.1:*",
        public_key=public,
        secret_key=secret,
        peers=[],
        max_frame_bytes=1024,
        max_parts=4,
    )
    try:
        assert isinstance(link, Transport)
        assert link.recv(0) is None and link.send((), [b"x"]) == 0
    finally:
        link.close()


class _Paused:
    """A command a new round policy might add, which no runtime knows yet."""

    def __repr__(self) -> str:
        return "_Paused()"


def test_a_command_no_runtime_knows_is_refused_by_the_event_engine(monkeypatch):
    """A round loop that yields a command the engine has no method for stops the run with an
    error naming it (it used to fall through to the rejoin branch)."""
    from edgedp_sim import engine

    plan = api.make_plan("dp-dsgd", "ring:4", steps=2, batch_size=2, noise_multiplier=1.0)
    data = scenarios.from_plan(plan).data()
    loop = rounds.rounds

    def with_a_new_command(agent, **kw):
        yield _Paused()
        yield from loop(agent, **kw)

    monkeypatch.setattr(rounds, "rounds", with_a_new_command)
    with pytest.raises(TypeError, match=r"no method for the round command _Paused\(\)"):
        engine.run(plan, data)


def test_every_runtime_has_a_method_for_every_command():
    """The device daemon and the event engine interpret every command of the round loop:
    each is a rounds.Interpreter with nothing abstract left, and the interpreter's commands
    are the ones the loop yields."""
    import typing

    from edgedp_sim import engine
    from firmware_py import daemon

    assert set(rounds.COMMANDS) == set(typing.get_args(rounds.Command))
    assert {getattr(rounds.Interpreter, c.__name__.lower()) for c in rounds.COMMANDS} == {
        getattr(rounds.Interpreter, m) for m in rounds.Interpreter.__abstractmethods__
    }
    for runtime in (daemon.Device, engine.NodeProcess):
        assert issubclass(runtime, rounds.Interpreter)
        assert not runtime.__abstractmethods__


def test_an_interpreter_refuses_what_is_not_a_command():
    class Partial(rounds.Interpreter):
        def rejoined(self, cmd): ...
        def skipped(self, cmd): ...
        def send(self, cmd): ...
        def wait(self, cmd): ...

    with pytest.raises(TypeError, match="abstract"):
        Partial()  # a runtime without a method for Ended cannot even be made

    class Recorder(Partial):
        def ended(self, cmd):
            return "ended"

    assert Recorder().step(rounds.Ended(None)) == "ended"
    with pytest.raises(TypeError, match="Recorder has no method for the round command"):
        Recorder().step(_Paused())
