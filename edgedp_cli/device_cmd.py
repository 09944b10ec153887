"""Device commands: ``edgedp keys gen|planner``, ``edgedp sign``, ``edgedp deploy``, ``local-run``.

Keys are made where they are used: each device runs ``edgedp keys gen`` itself (its CURVE
keypair and noise secret never leave it; only ``node-U.key`` comes back), and the operator
runs ``edgedp keys planner`` once (the planning key that signs plans; devices pin its public
half). ``edgedp deploy`` writes one relocatable folder per device (docs/DEVICES.md).
"""

from __future__ import annotations

from pathlib import Path

from edgedp_cli._common import (
    RefusedError,
    RunFailedError,
    UsageError,
    add_output_flags,
    emit,
    load_plan,
)

__all__ = ["register"]


def cmd_keys_gen(args) -> None:
    from firmware_py import deploy

    try:
        info = deploy.generate_keys(
            Path(args.out), args.name, force=args.force, noise_only=args.noise
        )
    except FileExistsError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(_folder_error(args.out, exc)) from None
    wrote = [] if args.noise else [info["public_key_file"], f"{info['secret_key_file']} (secret)"]
    wrote += [f"{info['noise_secret_file']} (secret)", f"{info['ledger_file']} (its ledger)"]
    text = f"public key   {info['public_key']}\nwrote        {', '.join(wrote)}"
    emit(args, info, text)


def _folder_error(out: str, exc: OSError) -> str:
    """One line for a key folder that cannot be made or written."""
    if exc.strerror is None:  # raised with its own message (e.g. --noise without a keypair)
        return str(exc)
    where = exc.filename or out
    return f"--out {out}: cannot write keys there ({where}: {exc.strerror or exc})"


def cmd_keys_anchors(args) -> None:
    from edgedp import signing
    from firmware_py import trust

    try:
        key = signing.read_key(Path(args.planner_key), kind="public")
        text = trust.anchors_text(key, max_epsilon=args.max_epsilon)
    except (signing.SignatureError, trust.TrustError) as exc:
        raise UsageError(str(exc)) from None
    out = Path(args.out)
    if out.exists():
        raise UsageError(f"{out} exists: refusing to overwrite trust anchors")
    out.write_text(text)
    info = {"anchors_file": str(out), "planner_public_key": key, "max_epsilon": args.max_epsilon}
    emit(
        args,
        info,
        f"wrote {out}: install it once on each device as root: sudo install -D -o root -g root "
        f"-m 0644 {out.name} {trust.ANCHORS}",
    )


def cmd_keys_planner(args) -> None:
    from edgedp import signing

    try:
        info = signing.write_keys(Path(args.out), args.name, force=args.force)
    except FileExistsError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(_folder_error(args.out, exc)) from None
    text = (
        f"planning public key  {info['public_key']}\n"
        f"wrote                {info['public_key_file']}, {info['secret_key_file']} (secret)"
    )
    emit(args, info, text)


def cmd_sign(args) -> None:
    from edgedp import signing
    from edgedp.errors import PlanError
    from edgedp.plan import NoisePlan

    try:
        key = signing.read_key(Path(args.key), kind="secret")
        plan = NoisePlan.from_bytes(Path(args.plan).read_bytes(), gram=True)
    except OSError as exc:
        raise UsageError(f"{args.plan}: {exc.strerror}") from None
    except signing.SignatureError as exc:
        raise UsageError(str(exc)) from None
    except PlanError as exc:
        raise RefusedError(f"{args.plan}: {exc}") from None
    data = plan.to_bytes(signing_key=key)
    Path(args.out or args.plan).write_bytes(data)
    public = signing.verify(_envelope(data), plan.plan_hash)
    payload = {"plan": args.out or args.plan, "plan_hash": plan.plan_hash, "signer": public}
    emit(args, payload, f"signed {payload['plan']} (plan {plan.plan_hash[:16]}) by {public}")


def _envelope(data: bytes) -> dict:
    from edgedp import _codec

    return _codec.decode(data)["signature"]


def _public_keys(folder: Path, n: int) -> dict[int, str]:
    import zmq.auth

    public = {}
    for u in range(n):
        f = folder / f"node-{u}.key"
        try:
            public[u] = zmq.auth.load_certificate(str(f))[0].decode()
        except (OSError, ValueError):
            raise UsageError(
                f"missing public key {f}: run `edgedp keys gen --out keys --name node-{u}` "
                f"on device {u} and copy its keys/node-{u}.key here"
            ) from None
    return public


def cmd_deploy(args) -> None:
    from edgedp import signing, streams
    from edgedp.errors import PlanError
    from firmware_py import deploy

    p = load_plan(args.plan)
    if args.topology and args.topology != p.topology:
        raise UsageError(f"--topology {args.topology!r} differs from the plan's {p.topology!r}")
    try:
        endpoints = deploy.read_endpoints(Path(args.endpoints), p.n)
        run_id = streams.validate_run_id(args.run_id or streams.new_run_id())
        planner = (
            signing.read_key(Path(args.planner_key), kind="public") if args.planner_key else None
        )
        secret = signing.read_key(Path(args.sign), kind="secret") if args.sign else None
        plan_bytes = Path(args.plan).read_bytes()
        if planner is not None and secret is None:  # devices refuse it otherwise: say so now
            p = type(p).from_bytes(plan_bytes, trusted_key=planner)
    except PlanError as exc:
        raise RefusedError(f"--planner-key: {exc}") from None
    except (ValueError, OSError) as exc:
        raise UsageError(str(exc)) from None
    public = _public_keys(Path(args.keys), p.n)
    try:
        out = deploy.write_device_folders(
            plan_bytes,
            p,
            endpoints=endpoints,
            public_keys=public,
            out=Path(args.out),
            with_shards=args.write_shards,
            signing_key=secret,
            planner_key=planner,
            run_id=run_id,
            max_epsilon=args.max_epsilon,
            round_timeout=args.round_timeout,
            root=args.device_root,
            command=args.agent_command,
            force=args.force,
        )
    except (ValueError, OSError) as exc:
        raise UsageError(str(exc)) from None
    payload = {
        "folders": [str(f) for f in out["folders"]],
        "n": p.n,
        "plan_hash": p.plan_hash,
        "run_id": out["run_id"],
        "max_epsilon": out["max_epsilon"],
        "signed": out["signed"],
        "sealed_seed": deploy.needs_shared_seed(p),
    }
    text = (
        f"wrote {p.n} device folders for run {out['run_id']} to {args.out} "
        f"(copy node-U/* to device U's {args.device_root}; budget max_epsilon="
        f"{out['max_epsilon']:.6g} at the plan's delta {p.delta:g} against the worst adversary; "
        + (
            "plan and run manifest signed: devices with trust anchors run it)"
            if out["signed"]
            else "NOT signed (--sign): devices with trust anchors refuse it)"
        )
    )
    emit(args, payload, text)


def cmd_local_run(args) -> None:
    import tempfile
    import time

    from edgedp.models import model_digest
    from firmware_py import deploy

    p = load_plan(args.plan)
    if args.n is not None and args.n != p.n:
        raise UsageError(f"--n {args.n} but the plan is for {p.n} nodes")
    directory = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="edgedp-local-"))
    start = time.monotonic()
    run = deploy.local_run(
        Path(args.plan),
        directory,
        private_noise=args.private_noise,
        round_timeout=args.round_timeout,
    )
    codes = run.wait(timeout=args.timeout)
    elapsed = time.monotonic() - start
    if any(codes):
        raise RunFailedError(f"agents exited with {codes}; logs in {run.directory}")
    done = [next(m for m in reversed(run.metrics(u)) if m["event"] == "done") for u in range(p.n)]
    models = run.final_models()
    payload = {
        "engine": "real",
        "n": p.n,
        "rounds": p.steps,
        "model_digest": model_digest(models),
        "messages": sum(d["sent"] for d in done),
        "received": sum(d["received"] for d in done),
        "bytes": sum(d["received"] for d in done) * models.shape[1] * 8,
        "missing": sum(d["missing"] for d in done),
        "rejected": sum(sum(d["rejected"].values()) for d in done),
        "seconds": round(elapsed, 3),
        # the published models on the held-out split in every shard (mean over nodes, as
        # the simulator's final_test_loss)
        **{
            key: sum(d[key] for d in done) / len(done)
            for key in ("test_loss", "test_accuracy")
            if all(key in d for d in done)
        },
        "final_models": str(run.directory / "configs" / "state" / "node-*" / "final.npy"),
        "private_noise": args.private_noise,
        "directory": str(run.directory),
        "plan_hash": p.plan_hash,
    }
    emit(args, payload, "\n".join(f"{k:<16}{v}" for k, v in payload.items()))


def register(sub, add) -> None:
    from firmware_py import deploy

    keys = sub.add_parser("keys", help="device keys and the operator's planning key")
    keysub = keys.add_subparsers(dest="keys_command", required=True)
    p = keysub.add_parser(
        "gen", help="on a device: a CURVE keypair, a noise secret and its release ledger"
    )
    add_output_flags(p)
    p.add_argument("--out", required=True, help="folder (created 0700)")
    p.add_argument("--name", default="node", help="file stem (default node)")
    p.add_argument("--force", action="store_true", help="overwrite existing keys")
    p.add_argument(
        "--noise",
        action="store_true",
        help="only a new noise secret and its release ledger (the keypair is kept): retires "
        "a secret whose ledger was lost; its runs cannot continue, deploy a new run",
    )
    p.set_defaults(func=cmd_keys_gen)
    p = keysub.add_parser(
        "anchors", help="the trust anchors file to install once on each device, as root"
    )
    add_output_flags(p)
    p.add_argument("--planner-key", required=True, help="planning public key file (keys planner)")
    p.add_argument(
        "--max-epsilon",
        type=float,
        help="no run may spend more than this epsilon on the device (default: no ceiling "
        "beyond each run's signed budget)",
    )
    p.add_argument("--out", required=True, help="file to write (install it as /etc/edgedp/...)")
    p.set_defaults(func=cmd_keys_anchors)
    p = keysub.add_parser("planner", help="once, for the operator: the plan-signing key")
    add_output_flags(p)
    p.add_argument("--out", required=True, help="folder")
    p.add_argument("--name", default="planner", help="file stem (default planner)")
    p.add_argument("--force", action="store_true", help="overwrite an existing planning key")
    p.set_defaults(func=cmd_keys_planner)

    p = add("sign", cmd_sign, "sign a plan with the operator's planning key (Ed25519)")
    p.add_argument("plan", metavar="PLAN", help="the plan file to sign")
    p.add_argument("--key", required=True, help="planning secret key file (keys planner)")
    p.add_argument("--out", help="write the signed plan here (default: in place)")

    p = add("deploy", cmd_deploy, "write one relocatable folder per device")
    p.add_argument("plan", metavar="PLAN", help="the plan file")
    p.add_argument("--topology", help="optional: must equal the plan's topology")
    p.add_argument("--endpoints", required=True, help="endpoints.toml: [endpoints] ID = tcp://...")
    p.add_argument("--keys", required=True, help="folder with every device's node-U.key")
    p.add_argument("--out", required=True, help="output folder (one node-U folder per device)")
    p.add_argument(
        "--write-shards",
        action="store_true",
        help="also split the plan's task dataset into each device's shard.npz",
    )
    p.add_argument(
        "--sign",
        metavar="KEY",
        help="the planning secret key file (keys planner): signs the plan and the run "
        "manifest (plan, run id, node keys, budget) that devices with trust anchors demand",
    )
    p.add_argument(
        "--planner-key",
        help="for devices without trust anchors: pin this planning public key in node.toml "
        "(the plan must be signed by it)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace the device folders an earlier deployment wrote to --out",
    )
    p.add_argument("--round-timeout", type=float, default=10.0, help="seconds (default 10)")
    p.add_argument(
        "--max-epsilon",
        type=float,
        help="each device's budget (default: the plan's own epsilon against the worst "
        "adversary, at the plan's delta)",
    )
    p.add_argument(
        "--run-id",
        help="the run id every node's streams are bound to (default: a fresh random one; "
        "a new deployment of the same plan must use a new id)",
    )
    p.add_argument(
        "--device-root",
        default=deploy.DEVICE_ROOT,
        help=f"where each folder goes on its device (default {deploy.DEVICE_ROOT})",
    )
    p.add_argument(
        "--agent-command",
        default=deploy.AGENT_COMMAND,
        help=f"the agent executable on the devices (default {deploy.AGENT_COMMAND})",
    )

    p = add("local-run", cmd_local_run, "run one agent process per node on 127.0.0.1")
    p.add_argument("plan", metavar="PLAN", help="the plan file")
    p.add_argument("--n", type=int, help="number of agents (must equal the plan's n)")
    p.add_argument("--dir", help="working folder (default: a new temporary folder)")
    p.add_argument(
        "--private-noise",
        action="store_true",
        help="per-device secret noise keys (default: the plan seed, comparable "
        "with `edgedp sim run`, not private)",
    )
    p.add_argument("--round-timeout", type=float, default=10.0, help="seconds (default 10)")
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds for the whole run (default 600)",
    )
