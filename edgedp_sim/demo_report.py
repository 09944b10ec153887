"""The demo's outputs: ``results.json``, PNG plots and one self-contained ``report.html``.

The page embeds its plots as ``data:`` URIs and loads nothing else (no scripts, fonts or
styles from the network), so it opens offline and can be mailed as one file.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path

import numpy as np

from edgedp_sim.provenance import environment, write_json

__all__ = ["environment", "format_table", "write"]


def _num(x, spec=".3f") -> str:
    if x is None:
        return "–"
    if x == "inf" or (isinstance(x, float) and math.isinf(x)):  # results.json: "inf"
        return "∞"
    return format(x, spec)


def _mu_hat(e: dict, spec: str = ".2f") -> str:
    """The audit's μ̂ with its interval, or – when there was no audit."""
    if e.get("audit_mu_hat") is None:
        return "–"
    lo, hi = e.get("audit_mu_low"), e.get("audit_mu_high")
    if lo is None or hi is None:
        return _num(e["audit_mu_hat"], spec)
    return f"{_num(e['audit_mu_hat'], spec)} [{_num(lo, spec)}, {_num(hi, spec)}]"


def eps_cell(x) -> str:
    """An ε in the terminal table: two decimals, ``inf`` without a guarantee."""
    return "inf" if x in ("inf", math.inf) else f"{x:.2f}"


def _classes() -> tuple[tuple[str, str, str], ...]:
    from edgedp_sim.demo_plans import ATTACKER_CLASSES

    return ATTACKER_CLASSES


def comparison(summary: dict) -> str:
    """One line: each private mechanism's final test loss against DP-D-SGD's, at the
    attackers against which both hold the same ε (the columns where their ε agree)."""
    rows = {r["mechanism"]: r for r in summary["results"]}
    ref = rows["dp-dsgd"]
    classes = _classes()
    same_all, partial = [], []
    for r in summary["results"]:
        if r["mechanism"] in ("dsgd", "dp-dsgd"):
            continue
        change = f"{r['final_test_loss'] / ref['final_test_loss'] - 1:+.0%}"
        same = [
            col
            for key, col, _ in classes
            if math.isclose(r["epsilon_by_attacker"][key], ref["epsilon_by_attacker"][key])
        ]
        if len(same) == len(classes):
            same_all.append(f"{r['algorithm']} {change}")
        else:
            other = ", ".join(
                f"{col} {eps_cell(r['epsilon_by_attacker'][key])}"
                for key, col, _ in classes
                if col not in same
            )
            partial.append(
                f"{r['algorithm']} {change} at the same eps against {' and '.join(same)} "
                f"only ({other})"
            )
    parts = []
    if same_all:
        parts.append(f"at the same eps against every attacker {', '.join(same_all)}")
    parts += partial
    return "test loss vs DP-D-SGD: " + "; ".join(parts)


def format_table(summary: dict) -> str:
    """The terminal summary: one row per mechanism with its ε against each attacker class,
    the comparison at equal ε, then the leakage and agent lines."""
    c = summary["config"]
    classes = _classes()
    head = (
        f"{'algorithm':<18}"
        + "".join(f"{col:>7}" for _, col, _ in classes)
        + f"{'pred.':>7}{'step':>7}{'test loss':>16}{'accuracy':>10}{'kB/round':>10}{'sim s':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in summary["results"]:
        eps = "".join(f"{eps_cell(r['epsilon_by_attacker'][key]):>7}" for key, _, _ in classes)
        pred = "-" if r["predicted_noise_ratio"] is None else f"{r['predicted_noise_ratio']:.3f}"
        loss = f"{r['final_test_loss']:.3f}±{r['final_test_loss_std']:.3f}"
        mark = "!" if r["warnings"] else ""
        lines.append(
            f"{r['algorithm']:<18}{eps}{pred:>7}{r['learning_rate']:>7.3g}{loss + mark:>16}"
            f"{r['final_test_accuracy']:>10.3f}"
            f"{r['bytes_per_round'] / 1e3:>10.1f}{r['simulated_seconds']:>7.1f}"
        )
    lines.append(f"eps at delta = {c['delta']:g} (zero-out adjacency) against:")
    lines += [f"  {col} = {words}" for _, col, words in classes]
    lines.append(
        f"{summary['nodes']} nodes, {c['steps']} rounds, mean ± std over {c['trials']} noise "
        "seeds; pred. = predicted noise vs DP-D-SGD; step = step size"
    )
    lines.append(comparison(summary))
    lines.append(summary["comparison_protocol"])
    for r in summary["results"]:
        lines += [f"! {r['algorithm']}: {w}" for w in r["warnings"]]
    lk = summary["leakage"]
    lines.append(
        f"leakage ({lk['topology']}, {lk['steps']} rounds, {lk['trials']} trials; victim "
        f"{lk['victim']}; eps at delta = {lk['delta']:g} against the row's attacker; "
        "D-SGD without noise gives the M-NMI scale):"
    )
    lines.append(
        f"  {'algorithm':<17}{'attacker':<28}{'eps':>6}{'mu':>6}{'mu_hat [interval]':>20}"
        f"{'M-NMI':>7}{'cosine':>7}{'eps_lb':>7}"
    )
    for e in lk["rows"]:
        lines.append(
            f"  {e['algorithm']:<17}{e['attacker']:<28}{_num(e['epsilon'], '.2f'):>6}"
            f"{_num(e['mu'], '.2f'):>6}{_mu_hat(e):>20}"
            f"{_num(e['m_nmi']):>7}{_num(e['cosine'], '.2f'):>7}{_num(e['epsilon_lb'], '.2f'):>7}"
        )
    a = summary["agents"]
    lines.append(
        f"real agents: {a['mechanism']} on {a['agents']} edgedp-agent processes (CURVE "
        f"ZeroMQ, 127.0.0.1; public-seed noise, not private): model digest "
        f"{'EQUALS' if a['equal'] else 'DIFFERS FROM'} the event engine's "
        f"({a['real_digest'][:16]})"
    )
    return "\n".join(lines)


# ------------------------------------------------------------------ plots
def _labels(summary: dict) -> dict[str, str]:
    return {r["mechanism"]: r["algorithm"] for r in summary["results"]}


def _plot_loss(summary: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2))
    ax = fig.subplots()
    for mech, label in _labels(summary).items():
        cv = summary["curves"][mech]
        m, s = np.array(cv["test_loss_mean"]), np.array(cv["test_loss_std"])
        ax.plot(cv["rounds"], m, label=label, lw=2 if mech != "dsgd" else 1.5)
        ax.fill_between(cv["rounds"], m - s, m + s, alpha=0.2)
    c = summary["config"]
    ax.set_xlabel("round")
    ax.set_ylabel("test loss (mean over nodes)")
    ax.set_title(
        f"{summary['nodes']} nodes, ε = {c['target_epsilon']:g} at δ = {c['delta']:g}, "
        f"{c['trials']} noise seeds (± std)"
    )
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _plot_bytes(summary: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    rows = summary["results"]
    fig = Figure(figsize=(7, 3.4))
    ax = fig.subplots()
    vals = [r["bytes_per_round"] / 1e3 for r in rows]
    bars = ax.bar([r["algorithm"] for r in rows], vals, color="#4c72b0")
    ax.bar_label(bars, fmt="%.0f kB")
    ax.set_ylabel("kB sent per round (whole network)")
    ax.set_ylim(0, max(vals) * 1.2)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ------------------------------------------------------------------ HTML
_CSS = """
body{font-family:system-ui,sans-serif;max-width:64rem;margin:2rem auto;padding:0 1rem;
color:#222;line-height:1.45}
table{border-collapse:collapse;margin:.5rem 0 1rem;font-size:.92rem}th,td{padding:.25rem .6rem;
border-bottom:1px solid #ddd;text-align:right}td:not(.l){white-space:nowrap}
td.l,th.l{text-align:left}img{max-width:100%;height:auto}.ok{color:#1a7f37;font-weight:600}
.bad{color:#c62828;font-weight:600}code{background:#f3f3f3;padding:0 .2rem}
.note{color:#555;font-size:.92rem}td.l:last-child{min-width:11rem;font-size:.85rem}
"""


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def _table(head: list[str], rows: list[list[str]], left: tuple[int, ...] = (0,)) -> str:
    def cell(tag, i, v):
        cls = ' class="l"' if i in left else ""
        return f"<{tag}{cls}>{v}</{tag}>"

    out = ["<table><tr>", *(cell("th", i, html.escape(h)) for i, h in enumerate(head)), "</tr>"]
    for r in rows:
        out += ["<tr>", *(cell("td", i, v) for i, v in enumerate(r)), "</tr>"]
    out.append("</table>")
    return "".join(out)


def _html(summary: dict, loss_png: Path, bytes_png: Path) -> str:
    c, e = summary["config"], html.escape
    classes = _classes()
    results = [
        [
            e(r["algorithm"]),
            *(_num(r["epsilon_by_attacker"][key], ".2f") for key, _, _ in classes),
            _num(r["predicted_noise_ratio"]),
            f"{r['learning_rate']:g}",
            f"{r['final_test_loss']:.3f} ± {r['final_test_loss_std']:.3f}"
            + (' <span class="bad">worse than the start</span>' if r["warnings"] else ""),
            f"{r['final_test_accuracy']:.3f} ± {r['final_test_accuracy_std']:.3f}",
            f"{r['bytes_per_round'] / 1e3:.1f}",
            f"{r['lost_messages'] + r['dropped_messages']}",
            f"{r['simulated_seconds']:.1f}",
        ]
        for r in summary["results"]
    ]
    lk = summary["leakage"]
    scale = {x["attacker"]: x["m_nmi"] for x in lk["rows"] if x["mechanism"] == "dsgd"}
    leak_rows = [
        [
            e(x["algorithm"]),
            e(x["attacker"]),
            _num(x["epsilon"], ".2f"),
            _num(x["mu"], ".3f"),
            _mu_hat(x),
            _num(x["m_nmi"]),
            _num(x["cosine"]),
            _num(x["epsilon_lb"]),
            e(x["estimator"] or ""),
        ]
        for x in lk["rows"]
    ]
    a = summary["agents"]
    verdict = (
        '<span class="ok">equal</span>' if a["equal"] else '<span class="bad">DIFFERENT</span>'
    )
    env = summary["environment"]
    rev = env["git_revision"] or "not a git checkout"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>edgedp demo report</title><style>{_CSS}</style></head><body>
<h1>edgedp demo: private decentralized learning at ε = {c["target_epsilon"]:g}</h1>
<h2>Setting</h2>
<p>Logistic regression on the bundled 8×8 handwritten digits (label: the digit is odd),
split IID over the {summary["nodes"]} nodes of the small-world graph <code>{e(c["topology"])}</code>
({summary["local_examples"]} examples per node, batches of {c["batch_size"]}: each example
takes part every {summary["participation"][1]} rounds, {summary["participation"][0]} times in
{c["steps"]} rounds), Metropolis–Hastings gossip weights, clip norm {c["clip_norm"]:g}.
{e(summary["comparison_protocol"][0].upper() + summary["comparison_protocol"][1:])}{
        ""
        if c["learning_rate"] is not None
        else "; the step sizes cost no privacy (computed from public quantities only)"
    }. Every
private plan is certified at
<b>ε = {c["target_epsilon"]:g} at δ = {c["delta"]:g}</b> (zero-out adjacency: one training
example of a node) against an eavesdropper who sees every message. <b>Correlated noise</b>:
each node's noise is correlated with its own earlier noise (MAFALDA) or with its
neighbours' (Whisper) so that much of it cancels in the gossip average while every message
still carries the noise its ε needs — the same ε then costs less accuracy; against curious
neighbours who hold Whisper's pairwise secrets less of it is left. The SimPy event engine
runs each plan over a lossy network: lognormal one-way latency (median
{c["latency_median_ms"]:g} ms, σ = {c["latency_sigma"]:g}), {c["bandwidth_mbps"]:g} Mbit/s
uplinks, {c["loss"]:.0%} message loss, {c["dropout"]:.0%} of the nodes sitting out each round
(their neighbours renormalize), a {c["round_timeout_s"]:g} s round deadline.</p>
<h2>Results</h2>
{
        _table(
            [
                "algorithm",
                *(f"ε vs {col}" for _, col, _ in classes),
                "predicted noise vs DP-D-SGD",
                "step size",
                "final test loss",
                "accuracy",
                "kB / round",
                "messages lost or late",
                "simulated s",
            ],
            results,
            left=(0,),
        )
    }
<p class="note">Certified ε at δ = {c["delta"]:g} (zero-out adjacency) against each attacker:
{"; ".join(f"{e(col)} — {e(words)}" for _, col, words in classes)}. Node-private noise
(DP-D-SGD, MAFALDA, DOME) holds one ε against all of them; Whisper holds the planned ε only
against the eavesdropper. {e(comparison(summary))}. Test loss and accuracy: mean over nodes
of each node's final model, mean ± std over {c["trials"]} noise seeds. Predicted noise:
MAFALDA — the noise left in the gossip average (factorization loss) relative to DP-D-SGD's;
Whisper — the post-mixing noise variance relative to DP-D-SGD's; DOME — the noise energy per
step (it sends {c["sketch_dim"]} of the model's floats). D-SGD has no guarantee (ε = ∞).</p>
{
        "".join(
            f'<p class="bad">{e(r["algorithm"])}: {e(w)}</p>'
            for r in summary["results"]
            for w in r["warnings"]
        )
    }
<h2>Test loss</h2>
{_img(loss_png, "test loss over rounds, one curve per mechanism")}
<h2>Bytes per round</h2>
{_img(bytes_png, "kilobytes sent per round by each mechanism")}
<h2>Leakage: what attackers learn, next to the formal ε</h2>
<p>The same four mechanisms, planned at the same guarantee on <code>{e(lk["topology"])}</code>
for {lk["steps"]} rounds (M-NMI needs {lk["trials"]} Monte Carlo trials per mechanism, which
the {summary["nodes"]}-node run does not fit in the demo's time), and D-SGD without noise —
the same probes on a run that leaks everything its attack can recover, the scale M-NMI is
read against ({", ".join(f"{e(a)} {_num(v)}" for a, v in scale.items())}) — attack victim
{lk["victim"]}'s gradients: <code>hbc</code> — two curious neighbours pooling what they
receive; <code>eavesdropper:all</code> — a tap on every link; <code>:encrypted</code> — the
same tap on CURVE-encrypted links (sizes and timing only). Formal ε (at δ =
{lk["delta"]:g}, zero-out) and certified μ: the plan's accountant for that attacker (μ-GDP;
encrypted links reveal less than the plan certifies). Audit μ̂: the GDP parameter a privacy
audit with {lk["audit_trials"]} trials (gradient canary) fits to the attacker's
likelihood-ratio test, with its 95% interval — an estimate whose interval covers the
certified μ when the accountant is tight; ε<sub>lb</sub>: the audit's lower bound on ε at
95% confidence, which so few trials keep near 0 (DOME is not audited here: its audit takes
minutes; nor is D-SGD, which has no ε). M-NMI: the largest normalized mutual information,
over rounds, between one coordinate of the victim's gradient (coordinate
{lk["coordinate"]}, the bias; for DOME the whole sketched gradient it sends) and what the
attacker computes for it (KSG estimate from {lk["trials"]} trials); cosine: of the
attacker's reconstruction of the whole gradient with the true one (– when its attack yields
no point estimate).</p>
{
        _table(
            [
                "algorithm",
                "attacker",
                "formal ε",
                "certified μ",
                "audit μ̂ [95% interval]",
                "M-NMI",
                "cosine",
                "ε_lb",
                "estimator",
            ],
            leak_rows,
            left=(0, 1, 8),
        )
    }
<h2>Real agents = simulator</h2>
<p>{e(a["mechanism"])} on {a["agents"]} separate
<code>edgedp-agent</code> processes on <code>{e(a["topology"])}</code>, gossiping over
CURVE-encrypted ZeroMQ on 127.0.0.1 for {a["steps"]} rounds ({a["wall_seconds"]:.1f} s),
with the plan's public noise seed (as <code>edgedp local-run</code>: not private — the run
checks bits; with private noise the plan certifies ε = {_num(a["epsilon"], ".2f")} at δ =
{a["delta"]:g} against every attacker), and the SimPy event
engine on an ideal network running the same plan: the SHA-256 digests of the final models
are {verdict}.</p>
{
        _table(
            ["", "model digest (sha256)"],
            [
                ["real agents", f"<code>{a['real_digest']}</code>"],
                ["event engine", f"<code>{a['simulated_digest']}</code>"],
            ],
            left=(0, 1),
        )
    }
<p class="note">edgedp {e(str(env["packages"].get("edgedp")))}, git {e(rev)}{
        " (modified)" if env["git_modified"] else ""
    }, Python {e(env["python"])}; run took
{summary["timings"]["total_seconds"]:.0f} s. All numbers are in <code>results.json</code>.</p>
</body></html>
"""


def write(out: Path, summary: dict) -> list[str]:
    """Write results.json, test_loss.png, bytes_per_round.png and report.html into ``out``."""
    out = Path(out)
    summary.pop("environment", None)
    summary["environment"] = write_json(out / "results.json", summary)["environment"]
    loss_png, bytes_png = out / "test_loss.png", out / "bytes_per_round.png"
    _plot_loss(summary, loss_png)
    _plot_bytes(summary, bytes_png)
    (out / "report.html").write_text(_html(summary, loss_png, bytes_png))
    return [str(out / n) for n in ("report.html", "results.json", loss_png.name, bytes_png.name)]
