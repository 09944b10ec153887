"""Resume and rollback decisions of a restarted device, on real checkpoint files.

The rule under test (firmware_py.recovery): a round may be sent again only from the state
it was first sent from; a damaged checkpoint rolls back to ``checkpoint.prev`` on its own
when nothing sent is lost, and otherwise only on ``--rollback``, which sits out the rounds
sent from lost states (their noise drawn and discarded).
"""

import numpy as np
import pytest

import edgedp_topologies
from edgedp import streams
from edgedp.accounting.participation import Participation
from edgedp.errors import PlanError
from edgedp.noise import noise_digest
from edgedp.plan import TaskSpec, make_plan
from edgedp_sim import datasets
from firmware_py import checkpoint, recovery

GRAPH = edgedp_topologies.parse("ring:4")
DATA = datasets.partition(datasets.load("synthetic-logistic", seed=3), 4, seed=3)
PLAN = make_plan(
    "antipgd",
    GRAPH,
    steps=8,
    participation=Participation(8, 1),
    clip_norm=1.0,
    learning_rate=0.3,
    noise_multiplier=1.0,
    seed=9,
    task=TaskSpec(dataset="synthetic-logistic"),
)
COMMAND = "edgedp-agent --config node.toml --rollback"


@pytest.fixture
def folder(tmp_path, make_agents, run_rounds):
    """Node 0's state folder after 3 rounds: checkpoint at round 3, prev at round 2."""
    agents = make_agents(PLAN, DATA)
    checkpoint.save(tmp_path / "checkpoint", agents[0].snapshot())
    for _ in range(3):
        run_rounds(agents, 1)
        checkpoint.save(tmp_path / "checkpoint", agents[0].snapshot())
    return tmp_path


def _fresh(make_agents):
    return make_agents(PLAN, DATA)[0]


def _damage(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_save_keeps_the_previous_checkpoint(folder):
    assert checkpoint.load(folder / "checkpoint")["round"] == 3
    assert checkpoint.load(folder / "checkpoint.prev")["round"] == 2
    leftover = folder / ".checkpoint.tmp.999"
    leftover.write_bytes(b"half a write")
    assert checkpoint.remove_temporaries(folder) == [leftover] and not leftover.exists()


def test_a_usable_checkpoint_resumes_and_a_sent_round_is_resent_bit_for_bit(folder, make_agents):
    a = _fresh(make_agents)
    got = recovery.resume(a, folder, sent=3, rollback=False, command=COMMAND)
    assert got.source == "checkpoint" and a.round == 3


def test_a_damaged_checkpoint_rolls_back_by_itself_when_nothing_sent_is_lost(folder, make_agents):
    _damage(folder / "checkpoint")
    a = _fresh(make_agents)
    # round 2 was the last sent: prev (round 2) is the state it was sent from
    got = recovery.resume(a, folder, sent=2, rollback=False, command=COMMAND)
    assert got.source == "rolled-back" and a.round == 2 and "checksum" in got.damage
    assert (folder / "checkpoint.damaged").exists()
    assert checkpoint.load(folder / "checkpoint")["round"] == 2


def test_names_swapped_back_by_a_power_cut_resume_from_the_newer_file(folder, make_agents):
    """save does not force the swap of the two names to disk: after a power cut
    ``checkpoint.prev`` may hold the newer state. It is used (round 3 was sent from it),
    and the names are put right."""
    (folder / "checkpoint").rename(folder / "x")
    (folder / "checkpoint.prev").rename(folder / "checkpoint")
    (folder / "x").rename(folder / "checkpoint.prev")
    a = _fresh(make_agents)
    got = recovery.resume(a, folder, sent=3, rollback=False, command=COMMAND)
    assert got.source == "checkpoint" and a.round == 3 and "newer" in got.damage
    assert checkpoint.load(folder / "checkpoint")["round"] == 3
    assert checkpoint.load(folder / "checkpoint.prev")["round"] == 2


def test_without_the_exchange_the_newer_prev_is_kept_while_checkpoint_is_rewritten(
    folder, make_agents, monkeypatch
):
    """Where names cannot be swapped, the newer state is written to ``checkpoint`` as a new
    file; ``checkpoint.prev`` keeps it meanwhile (a crash in between loses nothing)."""
    (folder / "checkpoint").rename(folder / "x")
    (folder / "checkpoint.prev").rename(folder / "checkpoint")
    (folder / "x").rename(folder / "checkpoint.prev")
    monkeypatch.setattr(checkpoint, "_renameat2", None)
    written = []
    real = checkpoint.atomic_write

    def spy(path, data, **kw):
        written.append(checkpoint.load(folder / "checkpoint.prev")["round"])
        return real(path, data, **kw)

    monkeypatch.setattr(checkpoint, "atomic_write", spy)
    a = _fresh(make_agents)
    got = recovery.resume(a, folder, sent=3, rollback=False, command=COMMAND)
    assert got.source == "checkpoint" and a.round == 3 and written == [3]
    assert checkpoint.load(folder / "checkpoint")["round"] == 3


def test_a_torn_older_file_is_not_needed(folder, make_agents):
    """A crash inside the in-place write of ``checkpoint.prev`` damages only that file."""
    _damage(folder / "checkpoint.prev")
    a = _fresh(make_agents)
    got = recovery.resume(a, folder, sent=3, rollback=False, command=COMMAND)
    assert got.source == "checkpoint" and a.round == 3 and got.damage == ""


def test_a_newer_prev_of_another_run_is_ignored(folder, make_agents):
    body = checkpoint.load(folder / "checkpoint.prev")
    body["round"], body["stream_fingerprint"] = 5, "another run"
    (folder / "checkpoint.prev").unlink()
    checkpoint.atomic_write(folder / "checkpoint.prev", checkpoint.encode(body))
    a = _fresh(make_agents)
    got = recovery.resume(a, folder, sent=3, rollback=False, command=COMMAND)
    assert got.source == "checkpoint" and a.round == 3


def test_a_non_finite_checkpoint_rolls_back_too(folder, make_agents):
    # what an older version wrote after adopting a NaN model
    good, bad = checkpoint.load(folder / "checkpoint.prev"), checkpoint.load(folder / "checkpoint")
    bad["state"]["theta"] = np.full_like(bad["state"]["theta"], np.nan)
    (folder / "checkpoint").unlink()
    checkpoint.save(folder / "checkpoint", good)
    checkpoint.save(folder / "checkpoint", bad)  # good becomes checkpoint.prev
    a = _fresh(make_agents)
    got = recovery.resume(a, folder, sent=2, rollback=False, command=COMMAND)
    assert got.source == "rolled-back" and "non-finite" in got.damage and a.round == 2


def test_rounds_sent_from_a_lost_state_need_the_rollback_command(folder, make_agents):
    _damage(folder / "checkpoint")
    with pytest.raises(recovery.RecoveryError, match="--rollback") as err:
        recovery.resume(_fresh(make_agents), folder, sent=3, rollback=False, command=COMMAND)
    assert "reuse noise" in str(err.value) and "rounds 2..3" in str(err.value)
    a = _fresh(make_agents)
    got = recovery.resume(a, folder, sent=3, rollback=True, command=COMMAND)
    assert got.source == "rollback" and got.skipped == (2, 3) and a.round == 4
    assert a.metrics.skipped == 2 and checkpoint.load(folder / "checkpoint")["round"] == 4
    # round 4's noise is the stream's round-4 noise: nothing was reused or shifted
    out = a.begin_round()
    ref = _fresh(make_agents)
    state = ref.noise_state
    for _ in range(4):
        _, state = ref.noise.next(state)
    expected, _ = ref.noise.next(state)
    assert out.round == 4 and out.noise_digest == noise_digest(expected)


def test_a_missing_checkpoint_is_refused_unless_rolled_back(folder, make_agents):
    (folder / "checkpoint").unlink()
    with pytest.raises(recovery.RecoveryError, match="reuse noise"):
        recovery.resume(_fresh(make_agents), folder, sent=3, rollback=False, command=COMMAND)
    a = _fresh(make_agents)
    got = recovery.resume(a, folder, sent=3, rollback=True, command=COMMAND)
    assert got.skipped == (2, 3) and a.round == 4


def test_without_any_checkpoint_the_initial_state_is_the_fallback(folder, make_agents):
    _damage(folder / "checkpoint")
    _damage(folder / "checkpoint.prev")
    with pytest.raises(recovery.RecoveryError, match="initial state") as err:
        recovery.resume(_fresh(make_agents), folder, sent=3, rollback=False, command=COMMAND)
    assert "rounds 0..3" in str(err.value)
    a = _fresh(make_agents)
    got = recovery.resume(a, folder, sent=3, rollback=True, command=COMMAND)
    assert got.skipped == (0, 1, 2, 3) and a.round == 4
    # killed inside round 0, before any checkpoint: round 0 is re-sent from the initial state
    empty = folder / "empty"
    empty.mkdir()
    b = _fresh(make_agents)
    assert recovery.resume(b, empty, sent=0, rollback=False, command=COMMAND).source == "initial"
    assert b.round == 0


def test_rollback_sits_out_a_sent_round_of_a_usable_checkpoint(folder, make_agents):
    # after exit 5 (the round's mixing diverged) the operator skips that round
    a = _fresh(make_agents)
    got = recovery.resume(a, folder, sent=3, rollback=True, command=COMMAND)
    assert got.skipped == (3,) and a.round == 4


def test_a_checkpoint_of_another_run_is_not_rolled_back(folder, make_agents):
    keys = streams.RunKeys(b"another secret of 32 bytes......", PLAN.plan_hash, "other-run")
    a = make_agents(PLAN, DATA, stream_fingerprint=keys.fingerprint())[0]
    with pytest.raises(PlanError, match="another noise secret"):
        recovery.resume(a, folder, sent=3, rollback=True, command=COMMAND)
