"""The batch engine: the update rules of every node (and every trial) as array operations.

State is shaped ``(trials, nodes, d)``. Each step: per-example gradients, per-example
clipping and an in-order sum, the node's correlated noise, the local step, fixed-order
mixing — the same functions a device calls, so a node's model has the same bits here and
on a device (DESIGN §2). Noise keys are ``noise_key(secret(plan.seed), node, trial)``.
Like an Agent, the engine never lets a non-finite message through: non-finite per-example
gradients add zero (counted in ``BatchResult.nonfinite``) and a message with NaN/inf
raises :class:`~edgedp.errors.NonFiniteMessageError` naming the node, trial and round.
Dropouts, message loss, crashes and churn run as the round masks of :mod:`edgedp_sim.round_faults`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from edgedp import families, models, runtime, streams, topology
from edgedp.errors import NonFiniteMessageError
from edgedp.families.cross import noise as cross_mod
from edgedp.families.dome import sketch_adaptive
from edgedp.models import model_digest
from edgedp.plan import NoisePlan
from edgedp_sim import evaluation, initial, kernels, round_faults
from edgedp_sim.churn import Faults
from edgedp_sim.datasets import FederatedData
from edgedp_sim.links import Network
from edgedp_sim.observers import RoundObserver, RoundView

__all__ = ["BatchResult", "model_digest", "run"]


@dataclass(slots=True)
class BatchResult:
    models: np.ndarray  # (trials, nodes, d)
    eval_steps: list[int] = field(default_factory=list)
    test_loss: list[np.ndarray] = field(default_factory=list)  # each (trials,) mean over nodes
    test_loss_of_mean: list[np.ndarray] = field(default_factory=list)  # (trials,)
    test_accuracy: list[np.ndarray] = field(default_factory=list)
    consensus_distance: list[np.ndarray] = field(default_factory=list)
    clipped_fraction: float = 0.0
    clipped: int = 0  # examples clipped, of clip_slots = steps · trials · nodes · batch size
    clip_slots: int = 0
    nonfinite: int = 0  # examples (over all steps, trials, nodes) with a non-finite gradient
    messages: int = 0
    bytes_sent: int = 0
    aggregate_bytes: int = 0  # adaptive DOME: the spanning tree's k-float frames (in bytes_sent)
    bases: list = field(default_factory=list)  # adaptive DOME: each trial's last basis
    # faults (edgedp_sim.round_faults; the same in every trial, counted once)
    lost_messages: int = 0
    offline_drops: int = 0  # not lost, but the recipient sat the round out or was down
    missing: int = 0  # (node, round, neighbour) triples mixed by the dropout rule
    skipped_rounds: int = 0
    crashes: int = 0

    @property
    def digests(self) -> list[str]:
        return [model_digest(m) for m in self.models]


def run(
    plan: NoisePlan,
    data: FederatedData,
    *,
    trials: int = 1,
    first_trial: int = 0,
    eval_every: int = 10,
    progress: Callable[[int], None] | None = None,
    observers: Sequence[RoundObserver] = (),
    keys: streams.RunKeys | None = None,
    initial_state: str = "model",
    gradient_transform: Callable | None = None,
    faults: Faults | None = None,
    network: Network | None = None,
    seed: int = 0,
) -> BatchResult:
    """Run ``plan`` on ``data`` for ``trials`` independent noise draws.

    Every stream comes from ``keys`` (default :meth:`edgedp.streams.RunKeys.simulation`: the
    plan seed, bound to this plan's hash); passing the keys of another plan runs two plans
    on the same draws (comparisons of model backends, for instance).

    ``observers`` (adversary probes, ground-truth recorders) get a :class:`RoundView` after
    each round's receive: the messages, what ``ctx.gradient``/``ctx.noise``/``ctx.extra.laplace``
    returned (last call of the round) and the state at the start of the round. They only
    read; without observers nothing is recorded and the run is the same bit for bit.
    ``data`` may be a :class:`~edgedp_sim.datasets.PerTrialData` (other local data in every trial).

    ``initial_state``: ``"model"`` (every node starts at the model's init) or
    ``"normal[:STD]"`` — x_i(0) ~ N(0, STD² I) per node and trial from the keyed stream
    ``keys.initial(node, trial)`` (:mod:`edgedp_sim.initial`; paper 004's Table 4 setup).

    ``gradient_transform(step, point, sel, rows) -> rows`` (audits plant canaries with it,
    :mod:`edgedp_sim.canary`) sees every round's per-example gradients before projection and
    clipping: ``point`` ``(trials, nodes, d)`` where they were taken, ``sel`` ``(trials,
    nodes, B)`` the examples of each node's batch (indices into its local data), ``rows``
    ``(trials, nodes, B, d)``. Without it the run is the same bit for bit.

    ``faults`` and ``network`` (only its loss and ``compute_s`` are read: the batch engine
    has no latency) with the scenario ``seed`` add dropouts, message loss, crashes and
    churn as the keyed masks of :mod:`edgedp_sim.round_faults` — the event engine's draws, so with
    zero latency both engines give the same models (the conditions are in that module).
    The masks are the same in every trial.
    """
    if data.nodes != plan.n:
        raise ValueError(f"Expected data for n={plan.n} nodes, got {data.nodes}.")
    per_trial = data.x.ndim == 4  # edgedp_sim.datasets.PerTrialData: other local data every trial
    if per_trial and data.x.shape[0] < first_trial + trials:
        raise ValueError(f"Expected data for trials up to {first_trial + trials - 1}.")
    algo = families.for_mechanism(plan.mechanism)
    rf = _round_faults(plan, faults, network, seed, observers)
    model = models.for_task(plan.task, data.features)
    d = model.dim
    run_keys = runtime.simulation_keys(plan) if keys is None else keys
    stack, cross = _runtime(plan, model, data, run_keys, trials, first_trial, gradient_transform)
    batch = stack.schedule.batch_size
    tree = _Tree(plan, d, batch, trials) if _Tree.used(plan) else None
    back = None if cross is None else cross_mod.reverse_slots(plan.mixing_index)
    theta = np.broadcast_to(model.init_params(), (trials, plan.n, d)).copy()
    start = initial.states(
        initial_state, run_keys, nodes=plan.n, dim=d, trials=trials, first_trial=first_trial
    )
    if start is not None:
        theta = start
    result = BatchResult(models=theta)
    _evaluate(result, model, data, 0, theta)
    alg_state = algo.init_state(theta)
    clipped = nonfinite = 0
    observers = tuple(observers)
    drawn: dict[str, np.ndarray | None] = {}
    hooks = _hooks(drawn) if observers else {}
    gather_buffer: dict[tuple, np.ndarray] = {}

    for t in range(plan.steps):
        ctx, tally = stack.context(t, **(_Tree.NONE if tree is None else tree.context(t)), **hooks)
        before = alg_state
        drawn.clear()
        alg_state, message = algo.send(alg_state, ctx)
        _check_messages(message, t, first_trial, None if rf is None else rf.active(t))
        if message.ndim == theta.ndim:  # copied into one buffer reused every round
            gathered = _gather(message, plan.mixing_index, gather_buffer)
        else:  # one message per padded-row slot (Zip-DL): slot of the recipient in its row
            gathered = message[..., plan.mixing_index, back, :]
        if rf is None:
            alg_state = algo.receive(alg_state, plan.mixing_weight, gathered, ctx)
        else:
            alg_state = round_faults.receive(rf, algo, t, before, alg_state, gathered, ctx)
        clipped += tally.clipped  # receive may take gradients too (sr-gt, dpop)
        nonfinite += tally.nonfinite
        if observers:
            view = RoundView(t, message, drawn.get("gradient"), drawn.get("noise"), before, batch)
            for obs in observers:
                obs.observe(view)
        if tree is not None:
            tree.deliver(t, result)
        theta = algo.model(alg_state)
        if not np.all(np.isfinite(theta)):
            raise FloatingPointError(
                f"Model diverged (non-finite) at step {t}; lower the learning rate."
            )
        if (t + 1) % eval_every == 0 or t + 1 == plan.steps:
            _evaluate(result, model, data, t + 1, theta)
        if progress is not None:
            progress(t + 1)
    result.models = theta
    result.clipped, result.clip_slots = int(clipped), plan.steps * trials * plan.n * batch
    result.clipped_fraction = clipped / result.clip_slots
    result.nonfinite = nonfinite
    _count_traffic(result, plan, trials, stack.message_dim, rf, tree)
    return result


def _runtime(plan, model, data, run_keys, trials, first_trial, gradient_transform) -> tuple:
    """The node runtime of every (trial, node) — keys, batch schedule, noise, step contexts —
    and the noise correlated across agents (cross_agent plans: own + shared-seed + edge
    streams; None otherwise)."""
    trial_ids = range(first_trial, first_trial + trials)
    cross = (
        None
        if plan.cross_agent is None
        else cross_mod.CrossNoise.for_plan(plan, run_keys, trial_ids)
    )
    stack = runtime.Runtime(
        plan,
        model=model,
        x=data.x,
        y=data.y,
        keys=runtime.stack_keys(run_keys, nodes=plan.n, trials=trials, first_trial=first_trial),
        cross=cross,
        memoize=plan.factor.kind == "dense",
        gradient_transform=gradient_transform,
        first_trial=first_trial,
        laplace_ahead=kernels.laplace_ahead,  # compiled with numba, the same bits
    )
    return stack, cross


def _round_faults(plan, faults, network, seed, observers) -> round_faults.RoundFaults | None:
    """The round masks of a faulty run (None without faults); refuses what no engine runs
    (:func:`edgedp_sim.round_faults.refusal`) and observers under faults."""
    if faults is None or not round_faults.faulty(faults, network):
        return None
    why = round_faults.refusal(plan, faults, network)
    if why is not None:
        raise ValueError(why)
    if observers:
        raise ValueError(
            "observers see every node's message; with faults the batch engine computes "
            "messages that are never sent: run observers under faults in the event engine"
        )
    return round_faults.RoundFaults(plan, faults, network or Network(), seed)


def _hooks(drawn: dict) -> dict[str, Callable]:
    """The step context's hooks that keep the round's gradient and noise for observers."""
    return {
        "on_gradient": lambda g: drawn.__setitem__("gradient", g),
        "on_sketch_gradient": lambda g: drawn.__setitem__("gradient", g),
        "on_noise": lambda z: drawn.__setitem__("noise", z),
    }


def _evaluate(result: BatchResult, model, data, step: int, th: np.ndarray) -> None:
    """Test loss (of each node's and of the mean model), accuracy and consensus distance of
    every trial after ``step`` rounds, appended to ``result``."""
    losses, accs = evaluation.evaluate(model, th, data.x_test, data.y_test)
    mean_model = th.mean(axis=1)
    result.eval_steps.append(step)
    result.test_loss.append(losses.mean(axis=1))
    result.test_loss_of_mean.append(
        evaluation.evaluate(model, mean_model, data.x_test, data.y_test)[0]
    )
    if accs is not None:
        result.test_accuracy.append(accs.mean(axis=1))
    result.consensus_distance.append(
        np.mean(np.sum((th - mean_model[:, None]) ** 2, axis=-1), axis=1)
    )


def _count_traffic(result: BatchResult, plan, trials: int, msg_dim: int, rf, tree) -> None:
    """Messages and bytes sent (DOME: ``msg_dim`` = k floats), the faults' counts, and an
    adaptive basis' tree frames."""
    degree_sum = int(
        np.sum((plan.mixing_weight != 0) & (plan.mixing_index != np.arange(plan.n)[:, None]))
    )
    result.messages = degree_sum * plan.steps * trials
    if rf is not None:
        rf.fill(result, trials)
    result.bytes_sent = result.messages * msg_dim * 8
    if tree is not None:  # a k-float frame up and one down each tree edge per round
        result.aggregate_bytes = 2 * (plan.n - 1) * msg_dim * 8 * plan.steps * trials
        result.bytes_sent += result.aggregate_bytes


class _Tree:
    """An adaptive dome basis (paper 002 Alg. 2): one view per trial, the network sum of the
    releases emulated in the spanning tree's order (every node receives the same bits)."""

    #: The step context's arguments without an adaptive basis.
    NONE: dict = {"basis": None, "mean": None, "release": None}

    @staticmethod
    def used(plan) -> bool:
        return plan.sketch is not None and plan.sketch.basis == "adaptive"

    def __init__(self, plan, d: int, batch: int, trials: int) -> None:
        self.plan = plan
        self.tree = sketch_adaptive.spanning_tree(
            topology.neighbour_lists(plan.mixing_index, plan.mixing_weight)
        )
        self.trackers = [
            sketch_adaptive.AdaptiveSketch(plan.sketch, d, nodes=plan.n, batch_size=batch)
            for _ in range(trials)
        ]
        self.released: dict[str, np.ndarray] = {}

    def context(self, t: int) -> dict:
        """Round ``t``'s basis, mean and release hook for the step context."""
        trackers = self.trackers
        return {
            "basis": sketch_adaptive.PerTrial([tr.basis(t) for tr in trackers]),
            "mean": (
                np.stack([tr.mean(t) for tr in trackers]) if self.plan.sketch.mean_removal else None
            ),
            "release": lambda c: self.released.__setitem__("c", c),
        }

    def deliver(self, t: int, result: BatchResult) -> None:
        """A(t) = the tree sum of round ``t``'s releases, to every trial's view."""
        total = sketch_adaptive.tree_sum(self.tree, self.released.pop("c"))
        if t + 1 == self.plan.steps:
            result.bases = [tr.basis(t) for tr in self.trackers]
        for i, tr in enumerate(self.trackers):
            tr.deliver(t, total[i])


def _gather(message: np.ndarray, index: np.ndarray, buffers: dict) -> np.ndarray:
    """``message[..., index, :]`` written into a buffer kept across rounds (the same bits).

    A fresh array of every node's padded row of messages (100 MB at 100 nodes, 13 slots,
    d = 9,610) costs its page faults again every round; receivers only read it.
    """
    shape = message.shape[:-2] + index.shape + message.shape[-1:]
    key = (shape, message.dtype)
    if key not in buffers:
        buffers.clear()
        buffers[key] = np.empty(shape, dtype=message.dtype)
    return np.take(message, index, axis=-2, out=buffers[key], mode="clip")


def _check_messages(
    message: np.ndarray, step: int, first_trial: int, active: np.ndarray | None = None
) -> None:
    """Raise NonFiniteMessageError naming the first (trial, node) whose message has NaN/inf
    (among the ``active`` nodes: the others send nothing this round)."""
    ok = np.isfinite(message).reshape(message.shape[0], message.shape[1], -1).all(axis=-1)
    if active is not None:
        ok |= ~active[None, :]
    if ok.all():
        return
    i, u = (int(v) for v in np.argwhere(~ok)[0])
    raise NonFiniteMessageError(
        f"node {u} (trial {first_trial + i}), round {step}: the outgoing message has NaN/Inf "
        f"entries (e.g. the model diverged; {int((~ok).sum())} messages this round); nothing "
        "was sent. Lower the learning rate or check the model and data."
    )
