"""Import rules of DESIGN §3: the device path needs only numpy, pyzmq, msgpack and PyNaCl."""

import dataclasses
import json
import subprocess
import sys

import pytest

from edgedp import mechanisms

DEVICE_MODULES = [
    "edgedp",
    "edgedp.rng",
    "edgedp.clipping",
    "edgedp.factors",
    "edgedp.noise",
    "edgedp.accounting.pndp",
    "edgedp.plan",
    "edgedp.topology",
    "edgedp.families",
    "edgedp.accounting",
    "edgedp.accounting.gdp",
    "edgedp.accounting.rdp",
    "edgedp.accounting.sensitivity",
    "edgedp.accounting.mf",
    "edgedp.families.laplace.accounting",
    "edgedp.families.cross.accounting",
    "edgedp.families.dome.accounting",
    "edgedp.families.dome.sketch",
    "edgedp.families.dome.sketch_adaptive",
    "edgedp.families.dome.rules",
    "edgedp.families.cross.noise",
    "edgedp.models.least_squares",
    "edgedp.models",
    "edgedp.models.linear",
    "edgedp.models.spec",
    "edgedp.models.dense",
    "edgedp.models.fused",
    "edgedp.models.onnx_backend",
    "edgedp._codec",
    "edgedp.streams",
    "edgedp.runtime",
    "edgedp.gradient_sums",
    "edgedp.keys",
    "edgedp.signing",
    "edgedp.accounting.budget",
    "edgedp.agent",
    "edgedp.node_round",
    "edgedp.node_state",
    "edgedp.mailbox",
    "edgedp.outgoing",
    "edgedp.dropout",
    "edgedp.snapshot",
    "edgedp.node_metrics",
    "edgedp.wire",
    "edgedp.transport.zmq",
]
FORBIDDEN = [
    "scipy",
    "networkx",
    "simpy",
    "matplotlib",
    "sklearn",
    "edgedp_sim",
    "firmware_py",
    "tqdm",
    "onnx",  # graph building is offline tooling (edgedp.models.graph / importer)
    "onnxruntime",  # imported lazily, only when an ONNX model is loaded
    "dp_accounting",  # offline (edgedp.families.laplace.pld) and tests only
    "cryptography",  # tests only
    "cvxpy",
]


def test_device_path_imports_no_heavy_or_simulation_modules():
    code = (
        "import importlib, json, sys\n"
        f"for m in {DEVICE_MODULES!r}: importlib.import_module(m)\n"
        f"print(json.dumps(sorted(m for m in {FORBIDDEN!r} if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_the_device_daemon_imports_only_the_device_path():
    code = (
        "import json, sys\n"
        "import firmware_py.daemon\n"
        f"print(json.dumps(sorted(m for m in {[m for m in FORBIDDEN if m != 'firmware_py']!r} "
        "if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def _algorithm_modules():
    from edgedp import families

    return sorted(m.__name__ for m in families.MODULES)


@pytest.mark.parametrize("module", _algorithm_modules())
def test_every_algorithm_module_exposes_the_same_names(module):
    import importlib

    mod = importlib.import_module(module)
    for name in [
        "NAME",
        "TRUST_MODEL",
        "MECHANISMS",
        "RULES",
        "check_plan",
    ]:
        assert hasattr(mod, name), f"{module} lacks {name}"
    assert set(mod.__all__) >= {"NAME", "TRUST_MODEL", "RULES", "MECHANISMS", "check_plan"}
    assert isinstance(mod.RULES, mechanisms.Rules) and mod.RULES.check_plan is mod.check_plan
    assert not {"combine", "combine_node", "ACCOUNTANT"} & set(vars(mod))  # removed exports
    for m in mod.MECHANISMS:  # each record runs these rules and is the registered one
        registered = mechanisms.get(m.name)  # its family's default traits filled in
        assert m.rules is mod.RULES
        assert dataclasses.replace(m, traits=registered.traits) == registered
