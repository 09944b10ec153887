"""Cross-agent and sketched mechanisms, run node by node, give the batch engine's bits.

The companion of tests/test_node_by_node.py for the mechanisms whose noise is not
node-private: whisper, decor, zipdl, muffliato (noise correlated across agents, paper 001
§III, paper 000 App. A.4 and A.6) and dome (k-float messages in a shared basis, paper 002),
alone and with Whisper/DECOR noise in the sketch space. Each node keeps its own state and
derives its own share of the joint noise from its plan share the way a device does —
``plan.share(u).cross_agent`` (its row of D and U, its edges' ±√c_e, its recipients) and
the stream keys of :class:`edgedp.streams.RunKeys` (own noise, shared seed, one key per
edge known to both ends, its message stream) — and composes it here from the formulas of
:mod:`edgedp.families.cross.noise`'s docstring, with :func:`edgedp.rng.gaussian` draws only: no
``CrossNoise``, no ``NoiseSource``, no ``reverse_slots``, nothing of the batch engine.
Summation orders are the documented ones (own part, then the shared part factor by
factor, then the edges by neighbour id; Zip-DL's weighted sums in row order), since the
engines promise the same bits, not just the same values. Zip-DL messages go from each
sender to each recipient by id, as on a network; DOME's k-dimensional noise and its
sketch-space clipping are assembled here too, the basis comes from the plan's public
sketch seed inside the registry's round rules.

A mutated reference (one sign, one recipient, one clip space changed) must miss the
batch engine's digest: the comparison can fail.
"""

import numpy as np
import pytest

from edgedp import api, clipping, mechanisms, models, rng, streams
from edgedp.gossip import CrossExtra, SketchExtra, StepContext
from edgedp.plan import batch_schedule
from edgedp_sim import batch, scenarios

#: label -> (mechanism, options): every example of the cross and dome families' registry
#: records (whisper and decor ones with a sketch dimension run DOME messages).
CASES = {
    label: (name, options) for label, name, options in mechanisms.examples(family=("cross", "dome"))
}
MUTATIONS = ("edge-sign", "shared-node", "zipdl-recipient", "muffliato-rounds", "dome-clip")


def test_the_two_references_cover_every_family():
    """This file's families and tests/test_node_by_node.py's are all the registry's."""
    from test_node_by_node import FAMILIES

    assert set(FAMILIES) | {"cross", "dome"} == set(mechanisms.families())


def _own_noise(nu: float, key, t: int, dim: int) -> np.ndarray:
    """ν z_u(t): the node's own stream, identity temporal factor (all these plans)."""
    return np.multiply(nu, rng.gaussian(key, t, (dim,)))


def _compose(share, keys, nu: float, own: np.ndarray, t: int, mutate: str | None):
    """The node's full noise of round t from its share (cross_agent module docstring)."""
    dim = own.shape[-1]
    out = share.diag_sqrt * own  # √D_u ν z_u
    if share.factor_row:  # Σ_k ν U[u, k] s_k, the shared-seed streams
        draws = rng.gaussian(keys.shared, t, (len(share.factor_row), dim))
        row = share.factor_row
        if mutate == "shared-node":  # another node's row of U
            row = tuple(reversed(row))
        for k, coef in enumerate(row):
            out = out + (nu * coef) * draws[k]
    for v, coef in share.edge_terms:  # ±ν√c_e e_t, by neighbour id
        if mutate == "edge-sign":
            coef = -coef
        out = out + (nu * coef) * rng.gaussian(keys.pairs[v], t, (dim,))
    if share.kind != "zipdl":
        return out
    # Zip-DL: common + ν√m (y_j − w_j Σ_k w_k y_k / Σ_k w_k²) for every real recipient slot
    real = [j for j, r in enumerate(share.recipients) if r]
    y = np.zeros((len(share.recipients), dim))
    y[real] = rng.gaussian(keys.messages, t, (len(real), dim))
    acc, wsq = np.zeros(dim), 0.0
    for j, w in enumerate(share.recipient_weights):
        acc = acc + w * y[j]
        wsq = wsq + w * w
    coef = acc / wsq
    scale = nu * share.message_scale
    per_slot = np.empty_like(y)
    for j, w in enumerate(share.recipient_weights):
        per_slot[j] = out + scale * (y[j] - w * coef) if share.recipients[j] else out
    return per_slot


def node_by_node(plan, data, trial: int, *, mutate: str | None = None) -> np.ndarray:
    rules = mechanisms.get(plan.mechanism).rules
    model = models.for_task(plan.task, data.features)
    keys = streams.RunKeys.simulation(plan)
    bs, per_epoch = batch_schedule(plan, data.local_size, dim=model.dim)
    shares = [plan.share(u) for u in range(plan.n)]
    assert plan.factor.kind == "identity"
    noise_keys = [keys.noise(u, trial=trial) for u in range(plan.n)]
    cross_keys = [keys.cross(u, s.neighbours, trial=trial) for u, s in enumerate(shares)]
    orders = [rng.permutation(keys.batch(u, trial=trial), data.local_size) for u in range(plan.n)]
    states = [rules.init_state(model.init_params()) for _ in range(plan.n)]
    msg_dim = model.dim if plan.sketch is None else plan.sketch.dim
    for t in range(plan.steps):
        contexts, outboxes = [], []
        for u, share in enumerate(shares):
            sel = orders[u][(t % per_epoch) * bs : (t % per_epoch + 1) * bs]
            x, y = data.x[u, sel], data.y[u, sel]
            clip = share.clip_norm

            def per_example(theta, x=x, y=y):
                return model.per_example_gradients(theta, x, y)

            def gradient(theta, per_example=per_example, clip=clip):
                return clipping.clipped_sum(per_example(theta), clip)[0]

            def sketch_gradient(theta, project, per_example=per_example, clip=clip):
                if mutate == "dome-clip":  # clipped in R^d, then projected
                    return project(clipping.clipped_sum(per_example(theta), clip)[0])
                return clipping.clipped_sum(project(per_example(theta)), clip)[0]

            def noise(u=u, share=share, t=t):
                own = _own_noise(share.noise_std, noise_keys[u], t, msg_dim)
                if share.cross_agent is None:
                    return own
                return _compose(share.cross_agent, cross_keys[u], share.noise_std, own, t, mutate)

            cross = share.cross_agent
            if mutate == "muffliato-rounds" and cross is not None and cross.gossip_rounds > 1:
                cross = None  # a gradient step every round
            extra: SketchExtra | CrossExtra | None = None  # chosen by hand, not by the runtime
            if share.sketch is not None:
                extra = SketchExtra(share.sketch, share.noise_std, sketch_gradient)
            elif cross is not None:
                extra = CrossExtra(cross)
            ctx = StepContext(
                round=t,
                learning_rate=share.learning_rate,
                clip_norm=share.clip_norm,
                batch_size=bs,
                gradient=gradient,
                noise=noise,
                extra=extra,
            )
            states[u], message = rules.send(states[u], ctx)
            contexts.append(ctx)
            outboxes.append(_addressed(share, message, mutate))
        states = [
            rules.receive(states[u], share.weights, [outboxes[v][u] for v in share.neighbours], ctx)
            for (u, share), ctx in zip(enumerate(shares), contexts, strict=True)
        ]
    return np.stack([rules.model(s) for s in states])


def _addressed(share, message: np.ndarray, mutate: str | None) -> dict[int, np.ndarray]:
    """Recipient id -> what the node sends it (itself included); per slot for Zip-DL."""
    if message.ndim == 1:
        return {v: message for v in share.neighbours}
    slots = [j for j, real in enumerate(share.cross_agent.recipients) if real]
    targets = list(slots)
    if mutate == "zipdl-recipient":  # the messages of two recipients swapped
        targets[0], targets[1] = targets[1], targets[0]
    out = {share.neighbours[k]: message[j] for j, k in zip(slots, targets, strict=True)}
    out[share.node] = message[share.neighbours.index(share.node)]  # the common part it keeps
    return out


def _plan(case: str):
    mechanism, options = CASES[case]
    return api.make_plan(mechanism, **mechanisms.EXAMPLE_FRAME, **options)


def _run(case: str, mutate: str | None = None):
    plan = _plan(case)
    data = scenarios.from_plan(plan).data()
    res = batch.run(plan, data, trials=2, eval_every=plan.steps)
    refs = [batch.model_digest(node_by_node(plan, data, tr, mutate=mutate)) for tr in (0, 1)]
    return plan, res.digests, refs


@pytest.mark.parametrize("case", sorted(CASES))
def test_batch_engine_equals_the_registry_node_by_node(case):
    plan, digests, refs = _run(case)
    assert refs == digests[:2]
    assert digests[0] != digests[1]
    sections = (plan.cross_agent is not None, plan.sketch is not None)
    assert sections == (plan.message_kind.cross, plan.message_kind.sketched)


MUTATED = {
    "edge-sign": "decor",
    "shared-node": "whisper-lowrank",
    "zipdl-recipient": "zipdl",
    "muffliato-rounds": "muffliato-k2",
    "dome-clip": "dome",
}


@pytest.mark.parametrize("mutate", MUTATIONS)
def test_a_mutated_reference_misses_the_batch_engine(mutate):
    _, digests, refs = _run(MUTATED[mutate], mutate)
    assert refs[0] != digests[0] and refs[1] != digests[1]
