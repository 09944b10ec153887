"""The mechanism registry: one record per mechanism, and a new mechanism in one place.

The test-only mechanism of tests/toy_mechanism.py is the whole change a new mechanism
needs: one file with its round rules and record, and one :func:`edgedp.mechanisms.register`
call (the fixture below). Planning, certification (plan bytes round trip), the accountant,
the batch engine and the event engine, ``edgedp plan``'s choices and report, the attack
table and leak runs, the audit's plans and the example-driven test cases then accept it.
"""

import dataclasses
import math
import re

import numpy as np
import pytest
import toy_mechanism
from scipy import integrate

import edgedp_topologies
from edgedp import api, families, mechanisms
from edgedp.accounting.participation import Participation
from edgedp.families.cross import CrossTraits
from edgedp.families.dome.sketch import SketchSpec
from edgedp.families.laplace import LaplaceTraits
from edgedp.families.laplace import accounting as laplace_acc
from edgedp.plan import NoisePlan, TaskSpec, make_plan
from edgedp_sim import audit_plans


@pytest.fixture
def test_mechanism():
    m = mechanisms.register(toy_mechanism.MECHANISM)  # the one registration line
    yield m
    mechanisms.unregister("test-sgd")


def test_a_mechanism_registered_in_one_place_plans_certifies_and_runs(test_mechanism):
    g = edgedp_topologies.parse("ring:6")
    task = TaskSpec(batch_size=0)  # every example at every step: (6, 1)
    kw = dict(
        steps=6, participation=Participation(6, 1), clip_norm=1.0, learning_rate=0.5, task=task
    )
    p = make_plan("test-sgd", g, noise_multiplier=2.0, **kw)
    ref = make_plan("dp-dsgd", g, noise_multiplier=2.0, **kw)
    assert p.guarantee() == ref.guarantee()  # the accountant it declared
    assert NoisePlan.from_bytes(p.to_bytes()).plan_hash == p.plan_hash  # certified on load
    res = api.simulate(p, engine="batch")
    assert np.isfinite(res.test_loss).all()
    assert api.simulate(p, engine="event").model_digests == res.model_digests
    with pytest.raises(ValueError, match="already registered"):
        mechanisms.register(test_mechanism)
    cases = mechanisms.examples(family="sgd")  # the tests' cases now include its example
    assert ("test-sgd", "test-sgd", {"noise_multiplier": 2.0}) in cases
    example = api.make_plan("test-sgd", **mechanisms.EXAMPLE_FRAME, noise_multiplier=2.0)
    assert example.mechanism == "test-sgd" and example.mu == pytest.approx(0.5)


def test_the_registered_mechanism_is_a_command_line_choice_leaked_and_audited(
    test_mechanism, tmp_path, capsys
):
    """The same registration reaches `edgedp plan sgd --mechanism`, the plan's report (its
    trust model), the simulator's attack table and a leak run, and the audit's plans."""
    from edgedp_cli import main as cli
    from edgedp_cli import plan_cmd
    from edgedp_sim import attacks

    out = tmp_path / "t.plan"
    argv = ["plan", "sgd", str(out), "--mechanism", "test-sgd", "--topology", "ring:6"]
    assert (
        cli.main([*argv, "--steps", "6", "--noise-multiplier", "2", "--participation", "6,1"]) == 0
    )
    assert "LDP (test only)" in capsys.readouterr().out
    assert plan_cmd.family_of("test-sgd") == "sgd"
    p = NoisePlan.from_bytes(out.read_bytes())
    assert p.mechanism == "test-sgd" and p.guarantee().mu == pytest.approx(0.5)
    assert attacks.algorithm_attack("test-sgd") is attacks.ATTACKS["update-inversion"]
    leak = api.leak(p, ("hbc:1",), trials=16).attackers[0]
    assert leak.trust_model == "LDP (test only)" and leak.cosine > 0.5  # the inversion works
    with pytest.raises(SystemExit):  # an unregistered name is no choice
        mechanisms.unregister("test-sgd")
        cli.main([*argv, "--steps", "6", "--noise-multiplier", "2"])
    mechanisms.register(test_mechanism)  # the fixture unregisters it


def test_the_audit_plans_come_from_the_registry(test_mechanism):
    noisy = {m for m in mechanisms.names(command_line=True) if mechanisms.get(m).noisy}
    assert set(audit_plans.MECHANISMS) == noisy - {"test-sgd"}  # listed at import
    assert "test-sgd" in audit_plans.noisy_mechanisms() and "dsgd" not in audit_plans.MECHANISMS
    p = audit_plans.build("test-sgd", audit_plans.Setting(steps=4))
    assert p.mechanism == "test-sgd" and p.guarantee().mu == pytest.approx(p.mu)


def test_unknown_and_malformed_mechanisms_are_refused():
    with pytest.raises(ValueError, match="expected one of"):
        mechanisms.get("dp_dsgd")
    toy = toy_mechanism.MECHANISM
    with pytest.raises(ValueError, match="unknown family='gossip'"):
        mechanisms.register(dataclasses.replace(toy, family="gossip"))
    with pytest.raises(TypeError, match="RoundRules"):
        dataclasses.replace(toy, rules=object())
    with pytest.raises(ValueError, match="first example is labelled with its name"):
        dataclasses.replace(toy, examples={"other": {}})
    with pytest.raises(ValueError, match="Unknown traits"):
        mechanisms.names(sketchabel=True)
    with pytest.raises(ValueError, match="Unknown traits"):
        toy.has("plannd")
    assert "test-sgd" not in mechanisms.names()  # nothing above entered it


def test_every_record_is_complete_and_carries_its_familys_traits():
    from edgedp.families.cross import noise as cross_agent

    cross = mechanisms.names(family="cross")
    with pytest.raises(ValueError, match=f"expected one of {re.escape(str(cross))}"):
        cross_agent.CrossAgentSpec("gossip", [1.0], [], [])
    for name in mechanisms.names():
        m = mechanisms.get(name)
        assert isinstance(m.rules, mechanisms.RoundRules) and m.trust_model
        assert type(m.traits) is mechanisms.family(m.family).traits
        assert m.examples or not m.command_line  # every command-line mechanism has one


def test_laplace_plans_report_their_pure_epsilon_not_infinity():
    s = laplace_acc.LaplaceSchedule(
        gamma=0.001, beta=1000, q1=0.97, q2=0.98, delta_grad=2.0, epsilon=1.0
    )
    p = make_plan("sr-gt", edgedp_topologies.parse("ring:6"), steps=6, clip_norm=1.0, laplace=s)
    g = p.guarantee()
    assert isinstance(g, laplace_acc.PureGuarantee) and isinstance(g, mechanisms.Guarantee)
    # ε of the 6 messages and the noised final model by the paper's sum (module docstring):
    # release of x(k) costs δ α_k / ν_{k+1}, α_k = γ q₁^(k−1), ν_k = γδ/(ε(q₂ − q₁)) q₂^(k−1)
    alpha = [s.gamma * s.q1 ** (k - 1) for k in range(1, 8)]
    nu = [
        s.gamma * s.delta_grad / (s.epsilon * (s.q2 - s.q1)) * s.q2 ** (k - 1) for k in range(1, 9)
    ]
    want = sum(s.delta_grad * alpha[k - 1] / nu[k] for k in range(1, 7))
    assert g.epsilon(1e-6) == pytest.approx(want, rel=1e-12)
    assert want == pytest.approx(s.epsilon * (1 - (s.q1 / s.q2) ** 6), rel=1e-12)
    assert g.steps == 6 and g.final_release
    assert p.guarantee(steps_done=3).epsilon(0.0) == pytest.approx(
        sum(s.delta_grad * alpha[k - 1] / nu[k] for k in range(1, 3)), rel=1e-12
    )
    assert g.delta(g.epsilon(0.0)) == 0.0


@pytest.mark.parametrize(("eps", "eps_prime"), [(1.0, 0.5), (0.3, 0.0), (2.0, 1.9)])
def test_pure_guarantee_delta_bounds_the_laplace_hockey_stick(eps, eps_prime):
    """δ(ε') of one Laplace release with ε = s/b, by numerical integration, ≤ the bound."""
    b, s = 1.0, eps
    p = lambda x: math.exp(-abs(x) / b) / (2 * b)  # noqa: E731
    q = lambda x: math.exp(-abs(x - s) / b) / (2 * b)  # noqa: E731
    exact = sum(
        integrate.quad(lambda x: max(0.0, q(x) - math.exp(eps_prime) * p(x)), lo, hi)[0]
        for lo, hi in ((-50, 0), (0, s), (s, 50))
    )
    g = laplace_acc.PureGuarantee(eps, 1, "zero-out", False)
    assert exact <= g.delta(eps_prime) + 1e-9
    assert g.delta(eps) == 0.0 and g.delta(eps_prime) < 1.0


@pytest.mark.parametrize(
    ("mechanism", "options", "noise", "message"),
    [
        ("dsgd", {}, "none", "model"),
        (
            "whisper",
            {"target_epsilon": 4.0, "delta": 1e-6, "clip_norm": 0.1},
            "gaussian",
            "model+cross",
        ),
        ("dome", {"target_epsilon": 4.0, "delta": 1e-6, "sketch_dim": 8}, "gaussian", "sketch"),
        (
            "dpop",
            {"target_epsilon": 1.0, "gamma": 0.001, "q1": 0.97, "q2": 0.98},
            "laplace",
            "model",
        ),
    ],
)
def test_plans_have_two_axes_noise_kind_and_message_kind(mechanism, options, noise, message):
    p = api.make_plan(mechanism, "ring:6", steps=6, batch_size=4, **options)
    assert (p.noise_kind, p.message_kind) == (noise, message)


def test_the_axes_are_typed_fields_set_once_and_each_section_fits_them():
    import dataclasses

    from edgedp.errors import PlanError
    from edgedp.plan_axes import MessageKind, NoiseKind

    sgd = api.make_plan("dp-dsgd", "ring:6", steps=6, batch_size=4, target_epsilon=4.0, delta=1e-6)
    lap = api.make_plan("dpop", "ring:6", steps=6, target_epsilon=1.0, gamma=1e-3, q1=0.97, q2=0.98)
    assert sgd.noise_kind is NoiseKind.GAUSSIAN and sgd.message_kind is MessageKind.MODEL
    assert lap.noise_kind is NoiseKind.LAPLACE
    fields = {f.name: f for f in dataclasses.fields(sgd)}
    assert not fields["noise_kind"].init and not fields["message_kind"].init
    assert "noise_kind" not in sgd.to_dict() and "message_kind" not in sgd.to_dict()
    # a section that does not belong to the plan's axes is refused when the record is made
    with pytest.raises(PlanError, match="laplace section belongs exactly"):
        dataclasses.replace(sgd, laplace=lap.laplace)
    with pytest.raises(PlanError, match="laplace section belongs exactly"):
        dataclasses.replace(lap, laplace=None)
    with pytest.raises(PlanError, match="sketch section belongs exactly to 'dome'"):
        dataclasses.replace(sgd, sketch=SketchSpec(dim=2))
    with pytest.raises(PlanError, match="cross_agent section belongs exactly"):
        dataclasses.replace(sgd, mechanism="whisper")
    assert [m.value for m in MessageKind] == ["model", "sketch", "model+cross", "sketch+cross"]
    assert MessageKind.SKETCH_CROSS.sketched and MessageKind.SKETCH_CROSS.cross
    assert not MessageKind.MODEL.sketched and not MessageKind.MODEL.cross


def test_plan_hash_is_computed_once_and_cannot_go_stale():
    import dataclasses
    import hashlib

    from edgedp import _codec

    p = api.make_plan("dp-dsgd", "ring:6", steps=6, batch_size=4, target_epsilon=4.0, delta=1e-6)
    assert p.plan_hash == hashlib.sha256(_codec.canonical_bytes(p.to_dict())).hexdigest()
    with pytest.raises(ValueError, match="read-only"):
        p.mixing_weight[0, 0] = 0.5
    q = dataclasses.replace(p, seed=p.seed + 1)
    assert q.plan_hash != p.plan_hash
    assert q.plan_hash == hashlib.sha256(_codec.canonical_bytes(q.to_dict())).hexdigest()


#: Modules that may still compare mechanism names, and why: a family's planner picks its own
#: mechanisms' solver (a new mechanism of that family brings its solver there), and the demo
#: runs a fixed, hand-picked list.
NAME_BRANCHES_ALLOWED = {
    "edgedp/families/mf/factorization.py": "the mf family's factor solvers (dmf, mafalda, ...)",
    "edgedp/families/cross/planning.py": "the cross family's covariance solvers",
    "edgedp/planning/build.py": "dmf plans without the MAFALDA workload Gram",
    "edgedp_sim/demo.py": "the demo's fixed list of mechanisms",
    "edgedp_sim/demo_plans.py": "the demo's fixed list of mechanisms",
    "edgedp_sim/demo_report.py": "the demo's fixed list of mechanisms",
}


def _mechanism_name_branches():
    """(file:line, names) of every comparison of a mechanism-ish expression (``mechanism``,
    ``mech``, a cross-agent ``kind``) with a registered mechanism name, outside the algorithm
    modules that declare them."""
    import ast
    from pathlib import Path

    names, root, found = set(mechanisms.names()), Path(__file__).parents[1], []
    rules_files = {Path(m.__file__).relative_to(root).as_posix() for m in families.MODULES}

    def strings(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return set().union(set(), *(strings(e) for e in node.elts))
        return set()

    for package in ("edgedp", "edgedp_sim", "edgedp_cli", "firmware_py"):
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel in rules_files or rel in NAME_BRANCHES_ALLOWED:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Compare):
                    continue
                sides = [node.left, *node.comparators]
                text = " ".join(ast.unparse(s) for s in sides)
                hit = set().union(*(strings(s) for s in sides)) & names
                about = ("mechanism", "mech", "cross_agent.kind", "spec.kind", "share.kind")
                if hit and any(word in text for word in about) and "family" not in text:
                    found.append((f"{rel}:{node.lineno}", sorted(hit)))
    return found


def test_no_mechanism_name_branches_outside_the_registry():
    """Every per-mechanism decision is a field of its registry record (noise, attack, factor)
    or a trait of its family (correlated, shared_seed, message_noise, gossip_rounds,
    tracking, planned, factor_options ...): a new mechanism is one registration, not an edit
    of each ``if mechanism == ...``."""
    assert _mechanism_name_branches() == []


def test_each_trait_tells_some_mechanisms_of_its_family_from_others():
    """A family's trait that all or none of its mechanisms have decides nothing: drop it."""
    for fam in map(mechanisms.family, mechanisms.families()):
        members = [mechanisms.get(n) for n in mechanisms.names(family=fam.name)]
        for fact in fam.facts:
            values = {bool(getattr(m.traits, fact)) for m in members}
            assert values == {True, False}, (fam.name, fact)


def test_traits_belong_to_one_family():
    """Another family's traits are refused when a record is registered: cross-agent facts
    on a D-SGD mechanism, a Laplace schedule's tracking on a matrix-factorization one."""
    toy = toy_mechanism.MECHANISM
    for traits in (CrossTraits(correlated=True), LaplaceTraits(tracking=True)):
        with pytest.raises(TypeError, match="traits must be a NoTraits .family sgd."):
            mechanisms.register(dataclasses.replace(toy, traits=traits))
    with pytest.raises(TypeError, match="traits must be a MfTraits"):
        mechanisms.register(dataclasses.replace(toy, family="mf", traits=CrossTraits()))
    assert "test-sgd" not in mechanisms.names()


def test_threads_looking_up_their_first_mechanism_at_once_all_find_it():
    """A Dask worker's threads may make the first look-up of a process together: the
    package enters the built-in mechanisms when it is imported, so every thread finds them
    (the algorithms' import is slowed down here; a lazy first look-up would race it)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import importlib.abc, sys, threading, time

        class Slow(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "edgedp.families.cross.zipdl":
                    time.sleep(0.5)
                return None

        sys.meta_path.insert(0, Slow())
        from edgedp import mechanisms

        start, errors = threading.Barrier(4), []

        def look_up():
            start.wait()
            try:
                mechanisms.get("dp-dsgd")
            except Exception as exc:  # noqa: BLE001
                errors.append(repr(exc))

        threads = [threading.Thread(target=look_up) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(errors, len(mechanisms.names()))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[0] == "[]", out.stdout
