"""The papers side by side: one row per claim of a source paper, "paper / edgedp / verdict /
command", read from the stored output of the experiment that reproduces it.

A row is a :class:`Row`: the paper, the claim (its table or figure and setting, in words),
the experiment whose output holds our number, and three functions of that output — the
paper's value, ours, and the verdict. The paper's value comes from the output where the
experiment records it (``paper_table4``, ``paper``), else it is quoted here with its place in
the paper. Verdicts are computed by the helpers below (:func:`same_to_digits`,
:func:`within`, :func:`holds`), never typed. Adding a paper's experiment: write its output,
add its rows to :data:`ROWS`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

Output = dict[str, Any]

PAPERS = {
    "000": "Bellet et al., Unified Privacy Guarantees for Decentralized Learning via Matrix "
    "Factorization",
    "001": "Rodio, Chen, Larsson, Whisper D-SGD: Correlated Noise Across Agents",
    "002": "Nicolas et al., DOME: communication-efficient DP distributed optimization",
    "003": "Choquette-Choo et al., Multi-Epoch Matrix Factorization Mechanisms (ICML 2023)",
    "004": "Xie, Liu, Chai, Enhancing Accuracy in DP Distributed Optimization Through "
    "Sensitivity Reduction",
}
#: what a paper's table says when it reports no experiment of its own
NO_EXPERIMENT = {
    "002": "The paper's claims are analytic (it reports no experiment to reproduce); the "
    "rows below are **our own experiment**, not a reproduction.",
}


@dataclass(frozen=True, slots=True)
class Row:
    """One claim of ``paper`` and how its cells are read from ``experiment``'s output (the
    claim too, when it states edgedp's setting)."""

    paper: str
    claim: str | Callable[[Output], str]
    experiment: str
    theirs: Callable[[Output], str]
    ours: Callable[[Output], str]
    verdict: Callable[[Output], str]


# ---------------------------------------------------------------- formatting and verdicts
def sig(x: float, digits: int = 3) -> str:
    """``x`` to ``digits`` significant digits (scientific beyond 10⁴ or below 10⁻³)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    x = float(x)
    if x == 0:
        return "0"
    if abs(x) >= 1e4 or abs(x) < 1e-3:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{max(0, digits - 1 - math.floor(math.log10(abs(x))))}f}"


def same_to_digits(paper: float, ours: float, digits: int) -> str:
    """Reproduced when ``ours`` rounds to the paper's value at the paper's ``digits``
    significant digits; else the ratio."""
    if float(f"{ours:.{digits - 1}e}") == float(f"{paper:.{digits - 1}e}"):
        return f"reproduced (same {digits} significant digits)"
    return f"differs (edgedp / paper = {ours / paper:.3g})"


def within(paper: float, ours: float, rtol: float) -> str:
    """Reproduced when ``ours`` is within ``rtol`` of the paper's value (relative)."""
    if paper == 0:
        ok = abs(ours) <= rtol
    else:
        ok = abs(ours - paper) <= rtol * abs(paper)
    if ok:
        return f"reproduced (within {rtol:.0%})"
    if paper == 0:
        return f"differs (edgedp {sig(ours)})"
    return f"differs (edgedp / paper = {ours / paper:.3g})"


def holds(ok: bool, yes: str = "reproduced", no: str = "**not reproduced**") -> str:
    return yes if ok else no


def _table4(o: Output, eps: str, key: str) -> tuple[float, float]:
    paper = o["paper_table4"][f"sr-gt eps={eps}"][key]
    return paper, o["ours"][f"sr-gt eps={eps} (random x(0))"][key]


_BASELINES = ("zero-sum (correlated randomness [8])", "encrypted links (encryption-based [12])")


def _whisper_ratio(o: Output, part: str, key: str, x: str) -> list[tuple[float, float]]:
    """(x, LDP / Whisper) for each row of whisper_tasks' ``part`` / ``key``."""
    return [(r[x], r["ldp"] / r["whisper"]) for r in o[part][key]]


def at_smallest_rate(row: dict, smallest: float) -> bool:
    """Every mechanism of a whisper_agent_level setting tuned to the grid's smallest rate."""
    return all(m["lr"] == smallest for m in row["mechanisms"].values())


def _agent_level_claim(o: Output, claim: str) -> str:
    """A claim of whisper_agent_level's table with the setting edgedp ran it in."""
    logistic = "test loss" in claim
    cfg = o["config"]
    steps = cfg["t_logistic" if logistic else "t_quadratic"]
    task = "logistic" if logistic else "quadratic"
    rows = [r for key in ("vs_epsilon", "vs_p") for r in o[task][key]]
    smallest = min(cfg["learning_rates"])
    at_smallest = sum(at_smallest_rate(r, smallest) for r in rows)
    return (
        f"{claim} (edgedp: agent-level, T = {steps:,}, each mechanism at its tuned learning "
        "rate, seed-paired, started away from the optimum"
        + (", a9a" if logistic else "")
        + f"; in {at_smallest} of {len(rows)} settings every mechanism is tuned to the grid's "
        f"smallest rate {smallest:g}: the agent-level noise outweighs larger steps)"
    )


def _ratios(pairs: Iterable[tuple[float, float]], name: str) -> str:
    return ", ".join(f"{name} = {x:g}: {r:.2f}×" for x, r in pairs)


def _count(oks: list[bool], what: str, yes: str) -> str:
    """``yes`` when every setting shows ``what``, else in how many it does."""
    if all(oks):
        return yes
    return f"partly: {what} in {sum(oks)} of {len(oks)} settings"


def _pndp_monotone(o: Output) -> bool:
    """Mean RDP never grows with the distance to the victim, on every graph and observer."""
    for g in o["graphs"].values():
        for obs in g["observers"].values():
            means = [r["rdp_mean"] for r in sorted(obs["by_distance"], key=lambda r: r["distance"])]
            if any(b > a * (1 + 1e-12) for a, b in zip(means, means[1:], strict=False)):
                return False
    return True


def _pndp_summary(o: Output) -> str:
    parts = []
    for name, g in o["graphs"].items():
        rows = sorted(g["observers"]["node"]["by_distance"], key=lambda r: r["distance"])
        parts.append(
            f"{name}: mean / LDP "
            + " → ".join(f"{r['ratio_to_ldp_mean']:.3g}" for r in rows)
            + f" over hops 1–{rows[-1]['distance']}"
        )
    return "; ".join(parts)


def _fusion(o: Output) -> list[tuple[str, str, float, float]]:
    """(δ, ε, sr-gt final mean, DPOP final mean) for every setting of sr_gt_sensor_fusion."""
    return [
        (dl, e, r["sr-gt"]["final_mean"], r["dpop"]["final_mean"])
        for dl, by_eps in o["results"].items()
        for e, r in by_eps.items()
    ]


def _mafalda(o: Output) -> str:
    m = o["overall"]["dp-dsgd"]
    return f"{m['mean']:.1f} ± {m['ci']:.1f}% lower ({m['settings']} settings, {m['seeds']} seeds)"


def _digits_accuracy(o: Output) -> float:
    return o["results"]["paper eps=1"]["sr-gt"]["final_accuracy"]


# ---------------------------------------------------------------- the rows
#: experiments whose output carries its own "table" of {item, paper, edgedp, verdict} rows
#: (the verdicts computed by the experiment from its numbers), shown after ROWS of that paper
OWN_TABLES: dict[str, tuple[str, ...]] = {
    "000": ("pndp_fig2", "mafalda_protocol"),
    "001": ("whisper_agent_level",),
    "004": ("sr_gt_table4_fit",),
}


def _protocol_claim(o: Output, claim: str) -> str:
    """A claim of mafalda_protocol's table with the setting edgedp ran it in."""
    cfg = o["config"]
    return (
        f"§7.2 as the paper ran it (stand-ins: {cfg['graph']['nodes']}-node ego graph, "
        f"Housing-shaped data; T = {cfg['steps']}, {len(cfg['seeds'])} seeds): {claim}"
    )


#: how an own table's claim (key ``claim`` or ``item``) names the setting it ran in
OWN_SETTING: dict[str, Callable[[Output, str], str]] = {
    "mafalda_protocol": _protocol_claim,
    "whisper_agent_level": _agent_level_claim,
}


def own_rows(name: str, o: Output) -> list[tuple[str, str, str, str]]:
    """(claim, paper, edgedp, verdict) of each row of experiment ``name``'s own table."""
    setting = OWN_SETTING.get(name, lambda _, claim: claim)
    return [
        (
            setting(o, r["item"] if "item" in r else r["claim"]),
            _cell(r["paper"]),
            _cell(r["edgedp"]),
            str(r["verdict"]),
        )
        for r in o["table"]
    ]


def _cell(x: Any) -> str:
    return sig(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


ROWS: tuple[Row, ...] = (
    # 000 -----------------------------------------------------------------
    Row(
        "000",
        lambda o: (
            "§7: MAFALDA-SGD's test loss below DP-D-SGD's (Housing, 148-node Facebook "
            "ego graph, T = 380, last 50 steps, 20 runs); edgedp: its own settings "
            f"({len(o['config']['datasets'])} data sets × {len(o['config']['graphs'])} graphs × "
            f"{len(o['config']['epsilons'])} ε, T = {o['config']['steps']}), mean ± "
            f"{o['config']['confidence']:.0%} t-interval over seeds"
        ),
        "mafalda_comparison",
        lambda o: "31% lower (000 §7)",
        _mafalda,
        lambda o: (
            "direction reproduced, size not comparable (other settings)"
            if o["overall"]["dp-dsgd"]["mean"] - o["overall"]["dp-dsgd"]["ci"] > 0
            else "**not reproduced** in edgedp's settings (other settings)"
        ),
    ),
    Row(
        "000",
        "Fig. 2: PNDP privacy loss falls with the distance to the victim (DP-D-SGD, RDP at "
        "α = 2), against LDP (against Cyffers et al. 2022: the rows below)",
        "pndp_distance",
        lambda o: "falls with distance (Fig. 2)",
        _pndp_summary,
        lambda o: holds(_pndp_monotone(o), "reproduced (qualitative)"),
    ),
    # 001 -----------------------------------------------------------------
    Row(
        "001",
        "Fig. 1: σ²_cdp ≤ σ²_mix ≤ σ²_pair ≤ σ²_ldp on every ER graph and ε",
        "whisper_fig1",
        lambda o: "ordering holds (Fig. 1)",
        lambda o: (
            "ordering holds on every graph and ε"
            if o["summary"]["ordering_holds_everywhere"]
            else "ordering broken on some graph"
        ),
        lambda o: holds(o["summary"]["ordering_holds_everywhere"]),
    ),
    Row(
        "001",
        lambda o: (
            "Fig. 2: quadratic, optimality gap of LDP over Whisper's by connectivity p "
            f"(edgedp: started at x*, T = {o['config']['t_quadratic']:,}, ε = "
            f"{o['config']['eps_fixed']})"
        ),
        "whisper_tasks",
        lambda o: "Whisper below LDP, up to an order of magnitude (Fig. 2)",
        lambda o: "LDP / Whisper: " + _ratios(_whisper_ratio(o, "quadratic", "vs_p", "p"), "p"),
        lambda o: (
            "qualitative only: Whisper below LDP at every p"
            + (
                ", an order of magnitude nowhere"
                if max(r for _, r in _whisper_ratio(o, "quadratic", "vs_p", "p")) < 10
                else ""
            )
            if all(r > 1 for _, r in _whisper_ratio(o, "quadratic", "vs_p", "p"))
            else "**not reproduced**: Whisper not below LDP at every p"
        ),
    ),
    Row(
        "001",
        lambda o: (
            "Fig. 3: logistic regression, test loss of LDP over Whisper's by ε (paper: "
            f"a9a, agent-level, T = 5,000; edgedp: {o['config']['dataset']}, example-level, T = "
            f"{o['config']['t_logistic']:,}, p = {o['config']['p_fixed']})"
        ),
        "whisper_tasks",
        lambda o: "Whisper below LDP (Fig. 3)",
        lambda o: (
            "LDP / Whisper: " + _ratios(_whisper_ratio(o, "logistic", "vs_epsilon", "epsilon"), "ε")
        ),
        lambda o: (
            "qualitative only: Whisper below LDP at every ε"
            if all(r > 1 for _, r in _whisper_ratio(o, "logistic", "vs_epsilon", "epsilon"))
            else "partly: Whisper not below LDP at every ε"
        ),
    ),
    # 002 -----------------------------------------------------------------
    Row(
        "002",
        "**Our own experiment**: DOME k = d/10 against DP-D-SGD, final test loss and bytes "
        "per round, largest model, ε = 4",
        "dome_tradeoff",
        lambda o: "– (no experiment in the paper)",
        lambda o: _dome(o),
        lambda o: "our own (no paper number)",
    ),
    # 003 -----------------------------------------------------------------
    *(
        Row(
            "003",
            claim,
            "mf_multi_epoch",
            lambda o, k=key, n=digits: sig(o["paper"]["table1"][k], n),
            lambda o, k=key: sig(o["table1"][k], 4),
            lambda o, k=key, n=digits: same_to_digits(o["paper"]["table1"][k], o["table1"][k], n),
        )
        for key, digits, claim in (
            (
                "loss",
                2,
                "Table 1: loss of the optimal factorization MF(k = 20, n = 2000) of the prefix "
                "sum, (k, b) = (20, 100)",
            ),
            ("dual_bound", 3, "Table 1 (caption): dual lower bound on the optimal loss"),
        )
    ),
    *(
        Row(
            "003",
            f"Table 6: n = 6, (k, b) = (3, 2), root loss of the optimal factorization, {label}",
            "mf_multi_epoch",
            lambda o, k=key: sig(o["paper"]["table6"][k], 4),
            lambda o, k=key: sig(o["table6"][k]["root_loss"], 5),
            lambda o, k=key: same_to_digits(
                o["paper"]["table6"][k], o["table6"][k]["root_loss"], 4
            ),
        )
        for key, label in (("prefix_sum", "prefix sum"), ("momentum", "momentum 0.95"))
    ),
    # 004 -----------------------------------------------------------------
    *(
        Row(
            "004",
            f"Table 4: {what} of Alg. 1, ε = {eps} (random x(0))",
            "leakage_table4",
            lambda o, e=eps, k=key: sig(_table4(o, e, k)[0], 2),
            lambda o, e=eps, k=key: sig(_table4(o, e, k)[1], 3),
            lambda o, e=eps, k=key: within(*_table4(o, e, k), 0.1),
        )
        for key, what in (
            ("hbc", "M-NMI of the colluding neighbours"),
            ("accuracy", "accuracy ‖x(K) − 1x*ᵀ‖²"),
        )
        for eps in ("10", "1", "0.1")
    ),
    Row(
        "004",
        "Table 4: M-NMI of the eavesdropper, zero-sum masking ([8]) / encrypted links ([12])",
        "leakage_table4",
        lambda o: " / ".join(sig(o["paper_table4"][k]["eavesdropper"], 2) for k in _BASELINES),
        lambda o: " / ".join(sig(o["ours"][k]["eavesdropper"], 3) for k in _BASELINES),
        lambda o: " / ".join(
            within(o["paper_table4"][k]["eavesdropper"], o["ours"][k]["eavesdropper"], 0.01)
            for k in _BASELINES
        ),
    ),
    Row(
        "004",
        lambda o: (
            "Fig. 2: sensor fusion, Alg. 1 (sr-gt) ends closer to x* than DPOP at every δ and ε "
            + (
                "(random x(0), as the paper)"
                if o["config"]["initial_state"] == "normal"
                else "(x(0) = 0)"
            )
        ),
        "sr_gt_sensor_fusion",
        lambda o: "sr-gt below DPOP (Fig. 2)",
        lambda o: "; ".join(f"δ = {d}, ε = {e}: {sig(a)} vs {sig(b)}" for d, e, a, b in _fusion(o)),
        lambda o: _count(
            [a < b for _, _, a, b in _fusion(o)], "sr-gt below DPOP", "reproduced (qualitative)"
        ),
    ),
    Row(
        "004",
        lambda o: (
            "Fig. 6: MNIST CNN above 90% accuracy at ε = 1 (edgedp: 8×8 digits, "
            f"{o['config']['model']}, {o['config']['steps']} rounds, the paper's §6.2 parameters, "
            "example-level δ from an honest bound)"
        ),
        "sr_gt_digits",
        lambda o: "> 0.90 (Fig. 6)",
        lambda o: f"{_digits_accuracy(o):.3f} (δ = {sig(o['config']['delta_grad'])})",
        lambda o: holds(_digits_accuracy(o) > 0.9),
    ),
)


def _dome(o: Output) -> str:
    by = {(r["model"], r["eps"], r["method"]): r for r in o["table"]}
    model = max({m for m, _ in o["config"]["settings"]}, key=lambda m: by[(m, 4.0, "dp-dsgd")]["d"])
    a, b = by[(model, 4.0, "dome k=d/10")], by[(model, 4.0, "dp-dsgd")]
    if a["final_loss"] is None or b["final_loss"] is None:
        return f"{model}: a run diverged"
    return (
        f"{model} (d = {a['d']:,}): loss {sig(a['final_loss'])} vs {sig(b['final_loss'])}, "
        f"{a['payload_bytes_per_round'] / b['payload_bytes_per_round']:.2f}× the bytes"
    )
