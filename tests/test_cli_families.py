"""The command line by family: plan subcommands, help on every flag, exit codes, strict JSON."""

import argparse
import contextlib
import hashlib
import io
import json
import math
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import edgedp
from edgedp import strict_json
from edgedp_cli import _common, plan_cmd
from edgedp_cli import main as cli

COMMON = ["--topology", "ring:8", "--steps", "20", "--seed", "3", "--clip-norm", "0.5"]
DSGD = ["--mechanism", "dsgd", "--participation", "20,1"]


@dataclass(frozen=True, slots=True)
class GoldenPlan:
    family: str
    args: tuple[str, ...]
    old_args: tuple[str, ...]  # the same plan with the single `edgedp plan` of before
    # of the plan file `edgedp plan <old_args> --out F` wrote (main, 0141141), written again
    # by the family command when plan version 3 added delta to every plan
    sha256: str


# The single command's step size was 0.5 unless given; private plans now default to the
# noise-budget rule, so the Gaussian cases give 0.5 to write the same bytes.
OLD_DEFAULT = ("--learning-rate", "0.5")


GOLDEN = [
    GoldenPlan(
        "sgd",
        ("--noise-multiplier", "1.0", "--participation", "20,1") + OLD_DEFAULT,
        ("--mechanism", "dp-dsgd", "--noise-multiplier", "1.0", "--participation", "20,1")
        + OLD_DEFAULT,
        "41796f327bb9a6d4aa6e2a11eee849bc0932b3ef68c2b7ae2d0035bc2613640d",
    ),
    GoldenPlan(
        "mf",
        ("--mechanism", "antipgd", "--noise-multiplier", "2", "--participation", "20,1")
        + OLD_DEFAULT,
        ("--mechanism", "antipgd", "--noise-multiplier", "2", "--participation", "20,1")
        + OLD_DEFAULT,
        "c8c76145bc23b5ff69bcc06090edc5cefaeaccc2671dcd57d8bf5efacb4be820",
    ),
    GoldenPlan(
        "mf",
        ("--mechanism", "banded", "--bandwidth", "3", "--target-eps", "4", "--delta", "1e-5")
        + ("--participation", "20,1", *OLD_DEFAULT),
        ("--mechanism", "banded", "--bandwidth", "3", "--target-eps", "4", "--delta", "1e-5")
        + ("--participation", "20,1", *OLD_DEFAULT),
        "d16600710b64324b67b7ddedfe4d30cf6fc1e88f97f4da4c30f868bcbe16ddc2",
    ),
    GoldenPlan(
        "laplace",
        ("--gamma", "0.1", "--beta", "2", "--q1", "0.5", "--q2", "0.9", "--target-eps", "2"),
        ("--mechanism", "sr-gt", "--gamma", "0.1", "--beta", "2", "--q1", "0.5", "--q2", "0.9")
        + ("--target-eps", "2"),
        "a90e5676115c40f8ecb7d93c9d747150ef159ab89c5552066a7730136b853ac3",
    ),
    GoldenPlan(
        "cross",
        ("--form", "lowrank", "--rank", "2", "--noise-multiplier", "1.5", "--participation")
        + ("20,1", *OLD_DEFAULT),
        ("--mechanism", "whisper", "--form", "lowrank", "--rank", "2", "--noise-multiplier")
        + ("1.5", "--participation", "20,1", *OLD_DEFAULT),
        "86550085c2b2505d81a3f01ef90b29f649389604d9659724b28f5c501fe30baf",
    ),
    GoldenPlan(
        "dome",
        ("--sketch-dim", "4", "--sketch-basis", "gaussian", "--noise-multiplier", "1.5")
        + ("--participation", "20,1", *OLD_DEFAULT),
        ("--mechanism", "dome", "--sketch-dim", "4", "--sketch-basis", "gaussian")
        + ("--noise-multiplier", "1.5", "--participation", "20,1", *OLD_DEFAULT),
        "07bdea6f1429d420695e011f6137340ac458528eb98aa0d52f1f2afe02a8e342",
    ),
]


@pytest.mark.parametrize("case", GOLDEN, ids=lambda c: f"{c.family}-{c.args[1]}")
def test_each_family_writes_the_plan_the_single_command_wrote(case, tmp_path, capsys):
    out = tmp_path / "p.plan"
    assert cli.main(["plan", case.family, str(out), *COMMON, *case.args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert hashlib.sha256(out.read_bytes()).hexdigest() == case.sha256
    assert report["out"] == str(out) and report["mechanism"] in plan_cmd.FAMILIES[case.family]


def _leaves(parser, path=()):
    """(command path, parser) of every leaf command."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for name, child in action.choices.items():
            yield from _leaves(child, (*path, name))


def test_every_flag_of_every_command_has_help():
    missing = [
        (" ".join(path), action.dest)
        for path, parser in _leaves(cli.build_parser())
        for action in parser._actions
        if not action.help
    ]
    assert missing == []


def test_each_family_has_only_its_own_flags():
    flags = {
        path[1]: {o for a in parser._actions for o in a.option_strings}
        for path, parser in _leaves(cli.build_parser())
        if path[0] == "plan"
    }
    assert set(flags) == set(plan_cmd.FAMILIES)
    assert "--bandwidth" in flags["mf"] and not {"--bandwidth", "--gamma"} & flags["sgd"]
    assert "--gamma" in flags["laplace"] and "--participation" not in flags["laplace"]
    assert "--noise-multiplier" not in flags["laplace"]
    assert "--sketch-temporal" in flags["dome"] and "--sketch-temporal" not in flags["cross"]
    assert "--sketch-dim" in flags["cross"] and "--form" not in flags["dome"]
    assert "--mechanism" not in flags["dome"]  # one mechanism: nothing to choose
    every = {m for ms in plan_cmd.FAMILIES.values() for m in ms}
    from edgedp import mechanisms

    assert set(mechanisms.names(noise="laplace")) == set(plan_cmd.FAMILIES["laplace"])
    assert set(mechanisms.names(family="cross")) == set(plan_cmd.FAMILIES["cross"])
    assert every == set(mechanisms.names(command_line=True))  # each family's, none twice


def test_version_and_top_level_output_flags(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out == f"edgedp {edgedp.__version__}\n"
    assert cli.main(["--json", "topology", "ring:6"]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == 6
    assert cli.main(["-q", "topology", "ring:6"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("name") and captured.err == ""


def test_quiet_silences_planner_progress(tmp_path, capsys):
    argv = ["plan", "mf", str(tmp_path / "p.plan"), *COMMON, "--mechanism", "dmf"]
    argv += ["--noise-multiplier", "1", "--participation", "20,1"]
    assert cli.main(argv) == 0
    assert "planning dmf" in capsys.readouterr().err
    assert cli.main(["-q", *argv]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "wrote" not in captured.err and "plan_hash" in captured.out


def _documented_commands():
    """Whole ``edgedp ...`` lines of the README's and docs' code blocks (no ``...``, no
    ``[optional]`` or ``a|b`` placeholders), continuation lines joined."""
    root = Path(__file__).resolve().parent.parent
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        in_block, pending = False, ""
        for line in path.read_text().splitlines():
            if line.startswith("```"):
                in_block = not in_block
                continue
            code = line.split("  #")[0].split(" # ")[0].rstrip()
            if not in_block:
                continue
            code, pending = (pending + " " + code.strip() if pending else code), ""
            if code.endswith("\\"):
                pending = code[:-1].rstrip()
            elif code.startswith("edgedp ") and not re.search(r"\.\.\.|[\[\]|<>;]", code):
                yield f"{path.name}: {code}"


def test_documented_command_lines_parse():
    lines = [c for c in _documented_commands() if "--version" not in c]
    assert any(" plan sgd " in c for c in lines) and any(" deploy " in c for c in lines)
    parser = cli.build_parser()
    for line in lines:
        parser.parse_args(shlex.split(line.split(": ", 1)[1])[1:])  # exits 2 if it does not


def test_plan_sign_writes_a_plan_signed_by_the_planning_key(tmp_path, capsys):
    from edgedp import signing
    from edgedp.plan import NoisePlan

    assert cli.main(["keys", "planner", "--out", str(tmp_path / "ops"), "--json"]) == 0
    public = json.loads(capsys.readouterr().out)["public_key"]
    plan = tmp_path / "p.plan"
    key = str(tmp_path / "ops" / "planner.key")
    assert cli.main(["-q", "plan", "sgd", str(plan), *COMMON, *DSGD, "--sign", key]) == 0
    trusted = signing.read_key(tmp_path / "ops" / "planner.pub", kind="public")
    p = NoisePlan.from_bytes(plan.read_bytes(), trusted_key=trusted)
    unsigned = tmp_path / "u.plan"
    assert cli.main(["-q", "plan", "sgd", str(unsigned), *COMMON, *DSGD]) == 0
    assert p.plan_hash == NoisePlan.from_bytes(unsigned.read_bytes()).plan_hash
    assert len(public) > 0 and plan.read_bytes() != unsigned.read_bytes()


# ---------------------------------------------------------------- exit codes
def _run(*argv, code=None):
    """``python -c`` running ``edgedp ARGV`` after ``code``: (status, stdout, stderr)."""
    prog = f"{code or ''}\nimport sys\nfrom edgedp_cli.main import main\n"
    prog += f"sys.exit(main({list(argv)!r}))\n"
    proc = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def test_exit_0_ok_and_2_usage(tmp_path):
    assert _run("topology", "ring:5")[0] == 0
    status, _, err = _run("plan", "sgd", str(tmp_path), *COMMON, "--noise-multiplier", "1")
    assert status == 2 and err.count("\n") == 1 and "is a folder" in err
    status, _, err = _run("plan", "laplace", str(tmp_path / "x"), *COMMON, "--participation", "1")
    assert status == 2 and "unrecognized arguments: --participation 1" in err


def test_exit_3_refuses_a_tampered_plan(tmp_path):
    plan = tmp_path / "p.plan"
    assert cli.main(["-q", "plan", "sgd", str(plan), *COMMON, *DSGD]) == 0
    assert cli.main(["account", str(plan), "--json"]) == 0
    data = bytearray(plan.read_bytes())
    data[len(data) // 2] ^= 0xFF
    plan.write_bytes(bytes(data))
    status, out, err = _run("account", str(plan))
    assert status == 3 and out == "" and len(err.strip().splitlines()) == 1, err


def test_exit_1_when_the_agents_fail(tmp_path):
    plan = tmp_path / "p.plan"
    small = ["--topology", "ring:3", "--steps", "5", "--mechanism", "dsgd", "--participation"]
    assert cli.main(["-q", "plan", "sgd", str(plan), *small, "5,1"]) == 0
    # every agent refuses a round timeout of 0 s (its exit 2): the run failed
    status, _, err = _run("local-run", str(plan), "--round-timeout", "0", "--timeout", "60")
    assert status == 1 and err.startswith("edgedp: error: agents exited with [2, 2, 2]"), err


def test_missing_extra_is_one_install_line_and_exit_3(tmp_path):
    plan = tmp_path / "p.plan"
    assert cli.main(["-q", "plan", "sgd", str(plan), *COMMON, *DSGD]) == 0
    device = "import sys\nfor m in ('simpy', 'sklearn', 'scipy', 'networkx', 'matplotlib'):\n"
    device += "    sys.modules[m] = None\n"
    status, out, err = _run("sim", "run", str(plan), code=device)
    assert status == 3 and out == ""
    assert err.splitlines() == [
        "edgedp sim: simpy is not installed; install it with: pip install 'edgedp[sim]'"
    ]


# ---------------------------------------------------------------- strict JSON
_floats = st.floats(allow_nan=True, allow_infinity=True)
_values = st.recursive(
    st.none() | st.booleans() | st.integers() | _floats | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


def _strict_loads(text):
    def refuse(name):
        raise ValueError(f"non-strict JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def _expected(x):
    if isinstance(x, float):
        if math.isnan(x):
            return None
        return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, dict):
        return {k: _expected(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_expected(v) for v in x]
    return x


@given(_values)
def test_strict_json_parses_strictly_and_round_trips_finite_floats(value):
    payload = {"value": value, "array": np.array([1.5, np.inf, -np.inf, np.nan])}
    back = _strict_loads(strict_json.dumps(payload))
    assert back["value"] == _expected(value)
    assert back["array"] == [1.5, "inf", "-inf", None]
    assert [strict_json.number(v) for v in back["array"][:3]] == [1.5, math.inf, -math.inf]


@given(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([False, True]))
def test_every_command_output_is_strict_json(x, as_numpy):
    value = np.float64(x) if as_numpy else x
    args = argparse.Namespace(json=True)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        _common.emit(args, {"epsilon": value, "curve": [value, -abs(value)]}, "")
    back = _strict_loads(out.getvalue())
    assert back["epsilon"] == _expected(float(x))
    assert back["curve"][1] == _expected(-abs(float(x)))


def test_infinite_epsilon_keeps_its_sign_in_results_files(tmp_path):
    from edgedp_sim import provenance

    provenance.write_json(tmp_path / "r.json", {"eps": math.inf, "low": -math.inf, "x": math.nan})
    back = _strict_loads((tmp_path / "r.json").read_text())
    assert (back["eps"], back["low"], back["x"]) == ("inf", "-inf", None)
