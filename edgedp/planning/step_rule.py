"""The default step size of a private plan: the noise-budget rule.

**Setting.** Gossip steps are linear in the noise: after T rounds each node's model is the
noiseless trajectory plus η·ξ_u, where ξ_u collects the noise every node drew, divided by
the batch size B and carried through the mixing (W, or W^K for Muffliato) and the temporal
factor C⁻¹ (or the covariance R̃ across agents). Let s² be the variance of one coordinate
of ξ_u, averaged over the nodes: :func:`final_noise_variance` computes it from the plan
alone, in closed form from the spectrum of W where one exists (it lists them).

**Dropouts.** A node that sits out a round draws and discards its noise (so noise that
was to cancel later no longer does) and mixes nothing, and its neighbours renormalise
their weights: with dropouts (scenario files give the rule their ``faults.dropout``) s²
is measured by the batch engine on zero gradients under the same round masks
(:mod:`edgedp_sim.noise_probe`), not derived.

**Rule.** In the quadratic model of the task's loss F around the noiseless model, that
noise raises the expected loss by ½ η² s² tr(∇²F) (curvature pulling the noise back only
lowers it, so this is an upper bound). The rule takes the largest η, at most the noiseless
default :data:`MAX_STEP`, whose noise costs at most :data:`NOISE_BUDGET` of the starting
loss F(θ₀) — itself an upper bound on what training can gain, since the losses are ≥ 0:

    η = min(MAX_STEP, √(2 κ F(θ₀) / (s² · tr H))),   κ = NOISE_BUDGET,

rounded down to two significant digits (so the plan's bytes do not depend on the last
bits of an eigensolver). For the bundled tasks the two task numbers are public
(:func:`task_scale`): features are standardised (E‖x‖² = f; the bias adds 1) and models
start at θ₀ = 0, so logistic regression has F(θ₀) = ln 2 and tr H ≤ (f+1)/4 (σ(1−σ) ≤ ¼),
softmax regression over C classes ln C and (1 − 1/C)(f+1), linear regression (½ squared
error, standardised targets) ½ and f + 1. Everything the rule reads is public (the plan's
noise, topology and horizon, the model's size, the batch size): the step size costs no
privacy. Tasks without such a bound (MLPs, ONNX graphs, unstandardised targets) and
DOME's Adam keep the noiseless default, recorded as ``fixed-default``.

The rule is checked against simulation: tests/test_step_size.py recomputes s² with the
batch engine's update rules on zero gradients, and experiments/step_size.py compares the
rule with the best step size of a grid.
"""

# Paper letters W, R, C, T, B: see docs/NOTATION.md.
# ruff: noqa: N803, N806

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from edgedp import mechanisms
from edgedp.step_size import StepSizeChoice

__all__ = [
    "MAX_STEP",
    "NOISE_BUDGET",
    "RULE_ASSUMPTION",
    "TaskScale",
    "apply",
    "choose",
    "final_noise_variance",
    "round_down",
    "rule_step",
    "task_scale",
]

#: κ: the share of the starting loss the final models' noise may cost.
NOISE_BUDGET = 0.25
#: The step size of noiseless plans, and the largest the rule gives.
MAX_STEP = 0.5
#: What every run of a plan with a rule-chosen step size states.
RULE_ASSUMPTION = (
    "chosen from public quantities only (the plan's noise, topology and horizon, the "
    "model's size and starting loss, the batch size); it costs no privacy"
)
FALLBACK_ASSUMPTION = (
    "the noiseless default, not adapted to the noise ({why}); it may be too large for it: "
    "check the run's loss or run `edgedp tune step-size`"
)


@dataclass(frozen=True, slots=True)
class TaskScale:
    """The task's public numbers: F(θ₀) and an upper bound on tr ∇²F."""

    start_loss: float
    curvature_trace: float
    why: str


def task_scale(task, dim: int) -> TaskScale | str:
    """The task's :class:`TaskScale`, or why there is none (module docstring).

    ``dim`` is the model's parameter count d.

    >>> from edgedp.plan import TaskSpec
    >>> s = task_scale(TaskSpec(), 65)
    >>> round(s.start_loss, 4), s.curvature_trace
    (0.6931, 16.25)
    >>> task_scale(TaskSpec(model="mlp:64-8-2"), 538)
    'no public curvature bound for model mlp:64-8-2'
    """
    from edgedp_sim import datasets

    model, name = task.model, task.dataset
    if task.loss not in ("", {"logistic": "bce", "linear": "mse"}.get(model, "ce")):
        return f"no public curvature bound for loss {task.loss}"
    if model not in ("logistic", "linear") and not model.startswith("softmax:"):
        return f"no public curvature bound for model {model}"
    features, targets = datasets.standardized(name)
    if not features:
        return f"the features of {name} are not standardised"
    if model == "logistic":
        return TaskScale(math.log(2.0), dim / 4.0, "logistic loss at 0; sigma(1-sigma) <= 1/4")
    if model == "linear":
        if not targets:
            return f"the targets of {name} are not standardised"
        return TaskScale(0.5, float(dim), "half squared error at 0, standardised targets")
    classes = int(model.split(":")[1].split(":")[0])
    return TaskScale(
        math.log(classes),
        (1.0 - 1.0 / classes) * dim / classes,
        "cross-entropy at 0; tr(diag(p) - p p^T) <= 1 - 1/C",
    )


def round_down(x: float) -> float:
    """``x`` rounded down to two significant digits.

    >>> round_down(0.0608), round_down(0.5), round_down(0.0999999999999)
    (0.06, 0.5, 0.1)
    """
    if not x > 0 or not math.isfinite(x):
        raise ValueError(f"Expected a finite step size > 0, got {x!r}.")
    exponent = math.floor(math.log10(x)) - 1
    scaled = math.floor(x / 10.0**exponent * (1 + 1e-12))
    return float(f"{scaled}e{exponent}")


def _digits(x: float) -> float:
    return float(f"{x:.4g}")


def rule_step(noise_variance: float, scale: TaskScale) -> float:
    """The rule's unrounded η for the final models' noise variance s² (module docstring)."""
    if noise_variance <= 0:
        return MAX_STEP
    eta = math.sqrt(
        2.0 * NOISE_BUDGET * scale.start_loss / (noise_variance * scale.curvature_trace)
    )
    return min(MAX_STEP, eta)


def choose(
    plan, *, dim: int, local_size: int, dropout: float = 0.0
) -> tuple[float, StepSizeChoice]:
    """(step size, how it was chosen) for a Gaussian ``plan`` (its own learning rate is
    ignored); ``dim`` is the model's d, ``local_size`` each node's example count and
    ``dropout`` the probability that a node sits a round out."""
    scale = task_scale(plan.task, dim)
    if isinstance(scale, str):
        return MAX_STEP, StepSizeChoice(
            "fixed-default", FALLBACK_ASSUMPTION.format(why=scale), {"cap": MAX_STEP}
        )
    batch = plan.task.batch_size or local_size
    if plan.sketch is not None and plan.sketch.optimizer == "adam":
        why = "Adam normalises the step: the noise does not scale it"
        return MAX_STEP, StepSizeChoice(
            "fixed-default", FALLBACK_ASSUMPTION.format(why=why), {"cap": MAX_STEP}
        )
    # four significant digits in the record, so the plan's bytes (and hash) do not follow
    # the last bits of an eigensolver
    s2 = _digits(
        final_noise_variance(
            plan, batch_size=batch, dim=dim, local_size=local_size, dropout=dropout
        )
    )
    raw = _digits(rule_step(s2, scale))
    eta = round_down(raw)
    inputs = {
        "budget": NOISE_BUDGET,
        "start_loss": scale.start_loss,
        "curvature_trace": scale.curvature_trace,
        "noise_variance": s2,
        "batch_size": batch,
        "cap": MAX_STEP,
        "unrounded": raw,
        **({"dropout": dropout} if dropout else {}),
    }
    return eta, StepSizeChoice("noise-budget", RULE_ASSUMPTION, inputs)


def apply(plan, *, dim: int, local_size: int, dropout: float = 0.0):
    """``plan`` with the rule's step size and its ``step_size`` section (the default of
    :func:`edgedp.planning.build.build`); noiseless plans are returned unchanged."""
    if not plan.private:
        return plan
    return plan.with_step_size(*choose(plan, dim=dim, local_size=local_size, dropout=dropout))


# ------------------------------------------------------------------ the final models' noise
def final_noise_variance(
    plan, *, batch_size: int, dim: int, local_size: int, dropout: float = 0.0
) -> float:
    """s²: the variance of one coordinate of a node's final model at step size 1 from the
    noise alone, averaged over nodes (units of the model; module docstring), when each node
    sits out each round with probability ``dropout``.

    Exact for every Gaussian mechanism from the spectrum of W: a temporal factor C⁻¹ with
    noise independent across nodes (dp-dsgd, antipgd, dmf, mafalda, banded, blt), noise
    correlated across agents (whisper, decor, muffliato; Zip-DL from its message-wise
    covariance) and DOME's block or Gaussian sketches with SGD (in expectation over the
    bases). The rest — dropouts, a sketch with noise across agents, DOME's adaptive basis,
    a temporal factor under a changing basis — is measured by the batch engine on zero
    gradients (:func:`edgedp_sim.noise_probe.final_noise_variance`).
    """
    nu = plan.noise_std
    if nu == 0:
        return 0.0
    spec, sketch = plan.cross_agent, plan.sketch
    identity = plan.factor.kind == "identity"
    closed = sketch is None or (
        spec is None
        and sketch.basis != "adaptive"
        and (identity or sketch.refresh == 0)
        and _symmetric(plan.mixing_matrix())
    )
    if (spec is not None and not identity) or dropout:
        closed = False
    if not closed:
        from edgedp_sim import noise_probe

        return noise_probe.final_noise_variance(plan, local_size=local_size, dropout=dropout)
    W = plan.mixing_matrix()
    scale = (nu / batch_size) ** 2
    if sketch is not None:
        fraction = sketch.dim / dim
        if sketch.refresh == 0:
            return scale * fraction * _temporal(W, plan.factor, plan.steps)
        return scale * _dome_windows(W, plan.steps, sketch.refresh, fraction)
    if spec is None:
        return scale * _temporal(W, plan.factor, plan.steps)
    rounds = spec.gossip_rounds
    steps = plan.steps // rounds
    if mechanisms.get(spec.kind).has("message_noise"):
        return scale * _iid(W, _message_covariance(plan), steps, rounds=1, mixed=True)
    return scale * _iid(W, spec.covariance(plan.edges), steps, rounds=rounds, mixed=False)


def _symmetric(W: np.ndarray) -> bool:
    return bool(np.allclose(W, W.T, rtol=0.0, atol=1e-12))


def _spectrum(W: np.ndarray):
    """(λ, Q, π) with Π^{1/2} W Π^{-1/2} = Q diag(λ) Qᵀ for a reversible W (π its stationary
    distribution scaled to mean 1; all ones for a symmetric W)."""
    n = W.shape[0]
    if _symmetric(W):
        lam, Q = np.linalg.eigh((W + W.T) / 2.0)
        return lam, Q, np.ones(n)
    pi = np.full(n, np.nan)
    pi[0], stack = 1.0, [0]
    while stack:  # detailed balance along a spanning tree: π_v = π_u W_uv / W_vu
        u = stack.pop()
        for v in np.flatnonzero(W[u]):
            if np.isnan(pi[v]) and W[v, u] > 0:
                pi[v] = pi[u] * W[u, v] / W[v, u]
                stack.append(int(v))
    if np.isnan(pi).any():
        raise ValueError("the step-size rule needs a connected gossip graph")
    pi *= n / pi.sum()
    root = np.sqrt(pi)
    S = root[:, None] * W / root[None, :]
    if not np.allclose(S, S.T, rtol=0.0, atol=1e-10):
        raise ValueError("the step-size rule needs a reversible gossip matrix W")
    lam, Q = np.linalg.eigh((S + S.T) / 2.0)
    return lam, Q, pi


def _powers_sum(x: np.ndarray, first: int, count: int) -> np.ndarray:
    """Σ_{k=first}^{first+count-1} x^k elementwise (geometric sums; x real)."""
    out = np.empty_like(x, dtype=np.float64)
    near = np.abs(1.0 - x) < 1e-9
    out[near] = count * x[near] ** first
    far = ~near
    xf = x[far]
    out[far] = xf**first * (1.0 - xf**count) / (1.0 - xf)
    return out


def _total(lam, Q, pi, F_gram, R) -> float:
    """(1/n) Σ_s tr(M_s R M_sᵀ) with M_s = V f_s(Λ) V⁻¹, given FᵀF (n × n) or its diagonal."""
    n = lam.size
    if np.all(pi == 1.0):
        G_diag = np.ones(n) if R is None else np.sum(Q * (R @ Q), axis=0)
        diag = F_gram if F_gram.ndim == 1 else np.diag(F_gram)
        return float(np.sum(diag * G_diag)) / n
    root = np.sqrt(pi)
    Rm = np.diag(pi) if R is None else root[:, None] * R * root[None, :]
    G = Q.T @ Rm @ Q
    H = Q.T @ (Q / pi[:, None])
    if F_gram.ndim == 1:
        raise AssertionError("a non-symmetric W needs the full F^T F")
    return float(np.sum(F_gram * G * H)) / n


def _temporal(W: np.ndarray, factor, steps: int) -> float:
    """Per-node noise independent across nodes, correlated in time by C⁻¹; the noise of step
    t passes W^{T−t}."""
    lam, Q, pi = _spectrum(W)
    symmetric = bool(np.all(pi == 1.0))
    if factor.kind == "identity":
        gram = _powers_sum(lam**2 if symmetric else np.outer(lam, lam), 1, steps)
        return _total(lam, Q, pi, gram, None)
    F = _filters(factor, lam, steps)  # (T, n): f_s(λ_j) = Σ_t C⁻¹[t, s] λ_j^{T−t}
    gram = np.sum(F * F, axis=0) if symmetric else F.T @ F
    return _total(lam, Q, pi, gram, None)


def _filters(factor, lam: np.ndarray, steps: int) -> np.ndarray:
    """F = C⁻ᵀP with P[t, j] = λ_j^{T−t}, without a T × T matrix where C allows: for a
    Toeplitz C (identity, AntiPGD, BLT, banded Toeplitz; C⁻¹'s first column β) row s is
    v_j[T−1−s] with v_j[t] = λ_j (v_j[t−1] + β[t]) (an IIR filter, O(T) per eigenvalue); for
    another banded C a banded triangular solve with Cᵀ (O(T·p) per eigenvalue); a dense C
    (T × T already) through its inverse."""
    import scipy.linalg as sla
    import scipy.signal as ssig

    from edgedp.planning import workload

    T = int(steps)
    columns = workload.toeplitz_columns(factor, T)
    if columns is not None:
        beta = columns[1]
        F = np.empty((T, lam.size))
        for j, x in enumerate(lam):
            F[:, j] = ssig.lfilter([x], [1.0, -x], beta)[::-1]
        return F
    P = lam[None, :] ** (T - np.arange(T))[:, None]
    if factor.kind == "banded":
        bands = factor.bands[:T]
        p = bands.shape[1]
        ab = np.zeros((p, T))  # Cᵀ (upper, p − 1 superdiagonals) in solve_banded's layout
        for k in range(p):
            ab[p - 1 - k, k:] = bands[k:, k]
        return sla.solve_banded((0, p - 1), ab, P)
    return factor.materialize(T).T @ P


def _iid(W: np.ndarray, R: np.ndarray, steps: int, *, rounds: int, mixed: bool) -> float:
    """Noise of covariance R across nodes, independent in time; each step mixes A = W^K.
    ``mixed``: R is already the covariance after the step's mixing (Zip-DL)."""
    lam, Q, pi = _spectrum(W)
    lam = lam**rounds
    first = 0 if mixed else 1
    if np.all(pi == 1.0):
        return _total(lam, Q, pi, _powers_sum(lam**2, first, steps), R)
    return _total(lam, Q, pi, _powers_sum(np.outer(lam, lam), first, steps), R)


def _message_covariance(plan) -> np.ndarray:
    """Zip-DL: covariance (unit ν²) across receivers of the noise one step leaves after the
    mixing: Σ_u W[v,u] W[v',u] (D_u + m Π_u[v,v']) with Π_u = I − w wᵀ/‖w‖² on u's
    recipients (w their weights; u keeps its common part)."""
    spec, n = plan.cross_agent, plan.n
    W = plan.mixing_matrix()
    out = np.zeros((n, n))
    m = spec.message_variance
    for u in range(n):
        col = W[:, u]
        out += spec.diag[u] * np.outer(col, col)
        rec = np.flatnonzero((col != 0) & (np.arange(n) != u))
        if m and rec.size:
            w = W[u, rec]
            proj = np.eye(rec.size) - np.outer(w, w) / float(w @ w)
            c = col[rec]
            out[np.ix_(rec, rec)] += m * (c[:, None] * proj * c[None, :])
    return out


def _dome_windows(W: np.ndarray, steps: int, refresh: int, fraction: float) -> float:
    """DOME with SGD, independent noise, a fresh block/Gaussian basis every ``refresh``
    rounds (E[S Sᵀ] = (k/d) I): per mode λ of W, the span part mixes (×λ² a round) and
    receives the noise (k/d per coordinate), the rest is frozen until the next basis."""
    lam, _, _ = _spectrum(W)
    lam2 = lam**2
    v = np.zeros_like(lam)
    for start in range(0, steps, refresh):
        length = min(refresh, steps - start)
        span = fraction * v
        span = lam2**length * span + fraction * _powers_sum(lam2, 1, length)
        v = (1.0 - fraction) * v + span
    return float(np.mean(v))
