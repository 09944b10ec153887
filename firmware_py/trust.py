"""What a device trusts, and how a run shows it is one its operator made.

*Trust anchors* are installed once per device, out of band, by root, where the agent's user
cannot write them (``/etc/edgedp/anchors.toml``, root-owned 0644; the systemd unit keeps
everything read-only but the state folder and the release ledger): the operator's planning
public key and the largest ε any run may spend on the device. The agent reads them from the
path its command line names (``--anchors``; the unit sets it), never from node.toml, which
travels with every run.

A *run manifest* (``run.manifest`` beside node.toml, written by ``edgedp deploy --sign``)
says what the run is — the plan hash, the run id, every node's CURVE public key and the
budget (ε at δ against an adversary) — signed with the planning key
(:func:`edgedp.signing.sign_document`). With anchors the agent runs only a plan signed by
the anchored key whose run the manifest, verified under the same key, names: this plan,
this run, this node's key and its neighbours' keys; its budget is the smallest of the
manifest's, the anchors' and node.toml's. Rewriting node.toml — pins removed, another plan
or run id, a rogue neighbour key — then gains nothing: a plan of another key fails the
anchor, an older operator-signed plan fails the manifest's plan hash, an older signed run
fails the budget or finds its stream in the release ledger.

Without anchors the agent refuses private plans, unless started with ``--lab`` (a
laboratory setting, logged at every start), which also accepts anchors the agent's own
user could change.
"""

from __future__ import annotations

import json
import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from edgedp import _validate, signing, streams
from firmware_py.config import ADVERSARIES

__all__ = [
    "ANCHORS",
    "Anchors",
    "Budget",
    "RunManifest",
    "TrustError",
    "anchors_text",
    "check_run",
    "load_anchors",
    "run_budget",
]

#: Where a device's trust anchors live (the systemd unit passes it with ``--anchors``).
ANCHORS = Path("/etc/edgedp/anchors.toml")
_ANCHOR_KEYS = ("planner_public_key", "max_epsilon")
_MANIFEST_VERSION = 1


class TrustError(ValueError):
    """Anchors or a run manifest that cannot be trusted; the message names what to fix."""


@dataclass(frozen=True, slots=True)
class Anchors:
    """A device's trust anchors: the planning key (hex) and its ε ceiling per run."""

    path: Path
    planner_key: str
    max_epsilon: float = math.inf


def _hex_key(value, where: str) -> str:
    if not isinstance(value, str) or len(value) != 64:
        raise TrustError(f"{where} must be a 64-hex-digit Ed25519 public key")
    try:
        bytes.fromhex(value)
    except ValueError:
        raise TrustError(f"{where} must be a 64-hex-digit Ed25519 public key") from None
    return value.lower()


def _positive(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise TrustError(f"{where} = {value!r} must be a number > 0")
    return float(value)


def load_anchors(path: Path, *, lab: bool = False) -> Anchors | None:
    """The anchors at ``path``, None if there is no such file.

    Raises:
      TrustError: unreadable or malformed, or (unless ``lab``) changeable by this process's
        user: the anchors would then be no anchors.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise TrustError(f"{path}: cannot read the trust anchors ({exc})") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TrustError(f"{path}: not valid TOML ({exc})") from None
    try:
        _validate.known_keys(raw, _ANCHOR_KEYS, error=TrustError)
    except TrustError as exc:
        raise TrustError(f"{path}: {exc}") from None
    if "planner_public_key" not in raw:
        raise TrustError(f"{path}: missing planner_public_key")
    key = _hex_key(raw["planner_public_key"], f"{path}: planner_public_key")
    ceiling = _positive(raw.get("max_epsilon", math.inf), f"{path}: max_epsilon")
    if not lab:
        _check_owned_by_another(path)
    return Anchors(path, key, ceiling)


def _check_owned_by_another(path: Path) -> None:
    """Refuse anchors (or their folder) this process's user owns or may write."""
    euid = os.geteuid()
    if euid == 0:  # root may change anything; the unit never runs the agent as root
        return
    for p in (path, path.parent):
        if p.stat().st_uid == euid or os.access(p, os.W_OK):
            raise TrustError(
                f"{p} can be changed by this agent's user (uid {euid}), so it anchors nothing: "
                "install the anchors as root (`sudo install -D -o root -g root -m 0644 "
                f"anchors.toml {ANCHORS}`), or start the agent with --lab (a laboratory "
                "setting)"
            )


def anchors_text(planner_public_key: str, *, max_epsilon: float | None = None) -> str:
    """The text of an anchors file (what ``edgedp keys anchors`` writes)."""
    key = _hex_key(planner_public_key, "planner_public_key")
    lines = [
        f"# edgedp trust anchors: install once as root, e.g. `sudo install -D -o root -g root "
        f"-m 0644 anchors.toml {ANCHORS}`",
        "# only runs signed by this planning key (edgedp deploy --sign) start on this device",
        f'planner_public_key = "{key}"',
    ]
    if max_epsilon is not None and max_epsilon < math.inf:
        lines += [
            "# no run may spend more than this epsilon here, whatever its manifest says",
            f"max_epsilon = {_positive(max_epsilon, 'max_epsilon')!r}",
        ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class RunManifest:
    """What a run is, as the operator signed it (module docstring)."""

    plan_hash: str
    run: str
    nodes: Mapping[int, str]  # node id -> z85 CURVE public key
    max_epsilon: float
    delta: float
    adversary: str = "worst"

    def document(self) -> dict:
        """The signed content (plain JSON)."""
        return {
            "version": _MANIFEST_VERSION,
            "plan_hash": self.plan_hash,
            "run": self.run,
            "nodes": {str(u): key for u, key in sorted(self.nodes.items())},
            "budget": {
                "max_epsilon": self.max_epsilon,
                "delta": self.delta,
                "adversary": self.adversary,
            },
        }

    def signed(self, secret_hex: str) -> bytes:
        """The manifest file: the document and its signature with the planning key."""
        doc = self.document()
        envelope = signing.sign_document(doc, secret_hex)
        return (json.dumps({"manifest": doc, "signature": envelope}, indent=1) + "\n").encode()

    @classmethod
    def load(cls, data: bytes, trusted_key: str, *, where: str = "run.manifest") -> RunManifest:
        """A manifest file checked against the planning key ``trusted_key`` (hex)."""
        try:
            outer = json.loads(data)
            doc, envelope = outer["manifest"], outer["signature"]
        except (ValueError, TypeError, KeyError):
            raise TrustError(
                f"{where}: not a run manifest (JSON with manifest and signature)"
            ) from None
        if not isinstance(doc, dict):
            raise TrustError(f"{where}: not a run manifest")
        try:
            signing.verify_document(envelope, doc, trusted_key)
        except signing.SignatureError as exc:
            raise TrustError(f"{where}: {exc}") from None
        return cls._parse(doc, where)

    @classmethod
    def _parse(cls, doc: dict, where: str) -> RunManifest:
        try:
            if doc["version"] != _MANIFEST_VERSION:
                raise TrustError(f"{where}: manifest version {doc['version']!r} is not supported")
            budget = doc["budget"]
            nodes = {int(u): str(k) for u, k in dict(doc["nodes"]).items()}
            manifest = cls(
                plan_hash=str(doc["plan_hash"]),
                run=streams.validate_run_id(str(doc["run"])),
                nodes=nodes,
                max_epsilon=_positive(budget["max_epsilon"], f"{where}: budget.max_epsilon"),
                delta=float(budget["delta"]),
                adversary=str(budget.get("adversary", "worst")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, TrustError):
                raise
            raise TrustError(f"{where}: malformed run manifest ({exc})") from None
        if not 0 < manifest.delta < 1 or manifest.adversary not in ADVERSARIES:
            raise TrustError(f"{where}: budget delta must be in (0, 1), adversary in {ADVERSARIES}")
        return manifest


def check_run(
    manifest: RunManifest,
    *,
    plan_hash: str,
    run: str,
    node: int,
    public_key: str,
    neighbours: Mapping[int, str],
) -> None:
    """Refuse (TrustError) a run the manifest does not name: another plan or run, or keys of
    this node or its neighbours other than the ones the operator signed."""
    if manifest.plan_hash != plan_hash:
        raise TrustError(
            f"the run manifest names plan {manifest.plan_hash[:16]}… but the plan file is "
            f"{plan_hash[:16]}…: refusing a plan the operator did not sign this run for"
        )
    if manifest.run != run:
        raise TrustError(f"the run manifest is for run {manifest.run!r}, node.toml for {run!r}")
    for u, key in ((node, public_key), *sorted(neighbours.items())):
        signed = manifest.nodes.get(u)
        if signed != key:
            who = "this node" if u == node else f"neighbour {u}"
            raise TrustError(
                f"the public key of {who} ({key[:8]}…) is not the one the run manifest signs "
                f"({(signed or 'none')[:8]}…): node.toml or the key file was changed"
            )


@dataclass(frozen=True, slots=True)
class Budget:
    """The ε a run may spend on this device, at δ against an adversary, and who set it."""

    max_epsilon: float
    delta: float
    adversary: str
    source: str


def run_budget(cfg, plan, public_key: str, anchors: Anchors | None, *, lab: bool) -> Budget:
    """The budget of node.toml ``cfg``'s run of ``plan`` on this device (its own CURVE key
    ``public_key``, z85): with anchors from the signed run manifest — checked to name this
    plan, run and these keys — capped by the anchors and node.toml; without, node.toml's,
    and a private plan then needs the laboratory setting. Raises TrustError."""
    delta = plan.delta if cfg.delta is None else cfg.delta  # node.toml's, else the plan's
    own = Budget(cfg.max_epsilon, delta, cfg.adversary, "run.max_epsilon in node.toml")
    if anchors is None:
        if plan.private and not cfg.reproducible and not lab:
            raise TrustError(
                "no trust anchors: this agent refuses private plans unless its operator's "
                f"planning key is installed where it cannot write it ({ANCHORS}; `edgedp keys "
                "anchors` writes the file; the agent's --anchors names another path), or it "
                "is started with --lab (a laboratory setting)"
            )
        return own
    if cfg.manifest is None or not cfg.manifest.exists():
        raise TrustError(
            f"no run manifest at {cfg.manifest}: with trust anchors a run starts only as its "
            "operator signed it (`edgedp deploy --sign` writes run.manifest)"
        )
    try:
        data = cfg.manifest.read_bytes()
    except OSError as exc:
        raise TrustError(f"{cfg.manifest}: {exc.strerror}") from None
    manifest = RunManifest.load(data, anchors.planner_key, where=str(cfg.manifest))
    check_run(
        manifest,
        plan_hash=plan.plan_hash,
        run=cfg.run_id,
        node=cfg.id,
        public_key=public_key,
        neighbours={n.id: n.public_key.decode() for n in cfg.neighbours},
    )
    ceilings = [
        (manifest.max_epsilon, "the run manifest"),
        (anchors.max_epsilon, f"the trust anchors {anchors.path}"),
        (cfg.max_epsilon, "run.max_epsilon in node.toml"),
    ]
    ceiling, source = min(ceilings, key=lambda c: c[0])
    return Budget(ceiling, manifest.delta, manifest.adversary, source)
