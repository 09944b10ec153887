"""``edgedp model build | import | info | export``: ONNX training graphs in, trained models out.

``build`` writes the training graph of a named architecture (and its forward graph beside
it, ``NAME.forward.onnx``); ``import`` turns a forward graph exported by another tool into
one; ``info`` reads a training graph the way a device does (onnxruntime only); ``export``
writes a trained θ (a device's ``final.npy``, a simulation's ``final_models.npy``) as an
ONNX inference graph (:mod:`edgedp.models.export`).
"""

from __future__ import annotations

from edgedp_cli._common import UsageError, add_output_flags, emit, load_plan

__all__ = ["register"]

_ARCH_HELP = "linear, logistic, softmax[:C], mlp:IN-H1-..-OUT[:relu|tanh]"


def _spec(args):
    from edgedp.models import spec as spec_mod

    arch = args.arch
    if arch == "softmax":
        if args.classes is None:
            raise UsageError("--arch softmax needs --classes C (or write softmax:C)")
        arch = f"softmax:{args.classes}"
    if arch.startswith("mlp:"):
        sizes = arch.removeprefix("mlp:").partition(":")[0].split("-")
        features = args.features
        if features is None:
            try:
                features = int(sizes[0])
            except ValueError:
                raise UsageError(f"--arch {args.arch!r}: use {_ARCH_HELP}") from None
    elif args.features is None:
        raise UsageError(f"--arch {args.arch} needs --features F (the number of inputs)")
    else:
        features = args.features
    if features < 1:
        raise UsageError(f"--features {features}: expected an integer >= 1")
    try:
        return spec_mod.parse(arch, features=features, loss=args.loss or "")
    except ValueError as exc:
        raise UsageError(f"--arch {args.arch!r}: {exc}") from None


def _report(args, model, train, forward) -> None:
    payload = {
        "out": str(train),
        **({"forward_out": str(forward)} if forward else {}),
        "name": model.name,
        "loss": model.loss_name,
        "dtype": model.meta["dtype"],
        "features": model.features,
        "dim": model.dim,
        "params": [f"{n}{tuple(s)}" for n, s in model.meta["params"]],
        "opset": model.meta["opset"],
    }
    if "source" in model.meta:
        payload["source"] = model.meta["source"].get("file")
    emit(args, payload, "\n".join(f"{k:<12}{v}" for k, v in payload.items()))


def cmd_build(args) -> None:
    from edgedp.models import graph
    from edgedp.models.onnx_backend import OnnxModel

    spec = _spec(args)
    try:
        train, fwd = graph.write(spec, args.out, dtype=args.dtype, forward_out=args.forward_out)
    except OSError as exc:
        raise UsageError(f"cannot write {args.out}: {exc.strerror}") from None
    _report(args, OnnxModel(train), train, fwd)


def cmd_import(args) -> None:
    from pathlib import Path

    from edgedp.models import importer
    from edgedp.models.onnx_backend import OnnxModel

    if not Path(args.forward).is_file():
        raise UsageError(f"cannot read {args.forward!r}: no such file")
    try:
        train, fwd, _ = importer.import_model(
            args.forward,
            loss=args.loss,
            out=args.out,
            dtype=args.dtype,
            forward_out=args.forward_out,
        )
    except ValueError as exc:
        raise UsageError(f"{args.forward}: {exc}") from None
    except OSError as exc:
        raise UsageError(f"cannot write {args.out}: {exc.strerror}") from None
    _report(args, OnnxModel(train), train, fwd)


def cmd_info(args) -> None:
    from edgedp.models.onnx_backend import OnnxModel

    try:
        model = OnnxModel(args.model)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    _report(args, model, model.path, "")


def cmd_export(args) -> None:
    import numpy as np

    from edgedp import api

    plan = load_plan(args.plan)
    try:
        params = np.load(args.params, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise UsageError(f"PARAMS {args.params}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        onnx_path, npy_path = api.export_model(plan, params, args.out, node=args.node)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    which = "the average over nodes" if args.node is None and params.ndim > 1 else "its model"
    if args.node is not None:
        which = f"node {args.node}'s model"
    payload = {"onnx": str(onnx_path), "params": str(npy_path), "plan_hash": plan.plan_hash}
    emit(args, payload, f"wrote {onnx_path} (x -> output) and {npy_path}: {which}")


def register(sub, add) -> None:
    """Add ``model build``, ``import``, ``info`` and ``export`` to the ``edgedp`` parser."""
    del add  # nested commands build their own leaves
    group = sub.add_parser("model", help="ONNX models: build, import, info, export a trained one")
    leaves = group.add_subparsers(dest="model_command", required=True)

    def leaf(name, func, help_):
        p = leaves.add_parser(name, help=help_)
        add_output_flags(p)
        p.set_defaults(func=func)
        return p

    p = leaf("build", cmd_build, "write the training (and forward) graph of an architecture")
    p.add_argument("--arch", required=True, help=_ARCH_HELP)
    p.add_argument("--loss", choices=["mse", "bce", "ce"], help="default: the model's own")
    p.add_argument("--features", type=int, help="inputs (linear, logistic, softmax)")
    p.add_argument("--classes", type=int, help="classes for --arch softmax")
    p.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "float64"],
        help="parameter and input dtype (default float32)",
    )
    p.add_argument(
        "--out", required=True, help="training graph path to write, e.g. model.onnx (required)"
    )
    p.add_argument("--forward-out", help="forward graph path (default NAME.forward.onnx)")

    p = leaf("import", cmd_import, "turn a forward graph (e.g. torch.onnx.export) into one")
    p.add_argument("forward", help="the forward .onnx file")
    p.add_argument(
        "--loss", required=True, choices=["mse", "bce", "ce"], help="training loss (required)"
    )
    p.add_argument("--dtype", choices=["float32", "float64"], help="default: the input's")
    p.add_argument("--out", required=True, help="training graph path to write (required)")
    p.add_argument("--forward-out", help="forward graph path (default NAME.forward.onnx)")

    p = leaf("info", cmd_info, "describe a training graph as a device reads it")
    p.add_argument("model", help="the training graph .onnx file")

    p = leaf("export", cmd_export, "a trained model as an ONNX inference graph and a .npy")
    p.add_argument("plan", metavar="PLAN", help="the plan it was trained with")
    p.add_argument(
        "params",
        metavar="PARAMS",
        help=".npy of the trained parameters: a device's final.npy, or the final_models.npy "
        "of edgedp sim run --out (one row per node)",
    )
    p.add_argument("--out", required=True, help="the .onnx file to write (θ beside it: .npy)")
    p.add_argument("--node", type=int, help="export this node's model (default: the average)")
