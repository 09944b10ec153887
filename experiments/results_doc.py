"""docs/RESULTS.md's generated blocks, written from the stored outputs in experiments/out.

A block is the text between a line ``<!-- generated: NAME -->`` and the next ``<!-- end -->``;
:func:`render` replaces each with ``BLOCKS[NAME]()``, which reads the stored JSON outputs of
that experiment (experiments/out/NAME.json) and nothing else. ``python experiments/results.py
doc`` writes the file; tests/test_results.py checks that the file equals what this renders.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from typing import Any

from common import OUT, QUICK_OUT

MARK = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end -->)", re.S)


def render(text: str, blocks: dict[str, Callable[[], str]] | None = None) -> str:
    """``text`` with every generated block written afresh from the stored outputs
    (``blocks``: the block writers by name, docs/RESULTS.md's by default)."""
    blocks = BLOCKS if blocks is None else blocks
    unknown = sorted({m["name"] for m in MARK.finditer(text)} - set(blocks))
    if unknown:
        raise ValueError(f"unknown generated block(s) {unknown}; known: {sorted(blocks)}")
    return MARK.sub(lambda m: m.group(1) + _body(blocks, m["name"]) + "\n" + m.group(4), text)


def _body(blocks: dict[str, Callable[[], str]], name: str) -> str:
    try:
        return blocks[name]().rstrip("\n")
    except UnrecordedError as e:
        return unrecorded(e.name)
    except MissingOutputError as e:
        return missing(e.name)


class UnrecordedError(Exception):
    """A stored output written before outputs recorded their code: nothing is quoted from it."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class MissingOutputError(FileNotFoundError):
    """A registered experiment whose full output has not been written yet."""

    def __init__(self, name: str) -> None:
        super().__init__(f"experiments/out/{name}.json is missing: run make results ONLY={name}")
        self.name = name


def missing(name: str) -> str:
    return (
        f"*Not generated: experiments/out/{name}.json is missing. Generate it: "
        f"`make results ONLY={name}`.*"
    )


def unrecorded(name: str) -> str:
    return (
        f"*Not generated: experiments/out/{name}.json does not record the code it ran. "
        f"Regenerate it: `make results ONLY={name}`.*"
    )


@cache
def load(name: str) -> dict[str, Any]:
    """The stored output experiments/out/NAME.json; :class:`UnrecordedError` if it does not record
    the code it ran (its numbers are not quoted)."""
    path = OUT / f"{name}.json"
    if not path.exists():
        raise MissingOutputError(name)
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not (data.get("environment") or {}).get("code"):
        raise UnrecordedError(name)
    return data


def quick_wall(name: str) -> str:
    """The wall time of the stored quick output of ``name`` ('–' if there is none)."""
    path = QUICK_OUT / f"{name}.json"
    if not path.exists():
        return "–"
    return minutes(json.loads(path.read_text())["environment"].get("wall_seconds"))


# ---------------------------------------------------------------- formatting
def num(x: Any, digits: int = 3) -> str:
    """``x`` to ``digits`` significant digits; '–' for None or NaN, '∞' for infinity."""
    if x is None or x == "nan" or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if x in ("inf", math.inf):
        return "∞"
    if x in ("-inf", -math.inf):
        return "−∞"
    x = float(x)
    if x == 0:
        return "0"
    if abs(x) >= 10**digits or abs(x) < 1e-3:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{max(0, digits - 1 - math.floor(math.log10(abs(x))))}f}"


def fixed(x: Any, places: int = 3) -> str:
    """``x`` with ``places`` decimals ('–' for None or NaN)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{float(x):.{places}f}"


def table(head: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def minutes(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def source(name: str) -> str:
    """One line: the command, revision, code digest, date and time of the stored output."""
    env = load(name)["environment"]
    rev = (env.get("git_revision") or "no git")[:10]
    if env.get("git_modified"):
        rev += " + changes"
    code = env["code"]
    return (
        f"*Generated from experiments/out/{name}.json*: `{env['command']}` at {rev}, code "
        f"digest `{code['digest'][:12]}` ({len(code['files'])} files), "
        f"{(env.get('started_at') or '–')[:10]}, {minutes(env.get('wall_seconds'))}."
    )


def block(name: str, *paragraphs: str) -> str:
    """The block of output ``name``: its :func:`source` line, then ``paragraphs``."""
    return "\n\n".join((source(name), *paragraphs))


# ---------------------------------------------------------------- blocks
def index() -> str:
    from results import EXPERIMENTS

    rows = []
    for e in EXPERIMENTS:
        try:
            env = load(e.name)["environment"]
        except (UnrecordedError, MissingOutputError) as err:
            rows.append(
                (
                    f"`{e.name}`",
                    "not generated" if isinstance(err, MissingOutputError) else "not recorded",
                    "–",
                    "–",
                    quick_wall(e.name),
                    "–",
                    "–",
                    "yes" if e.ci else "no",
                )
            )
            continue
        rows.append(
            (
                f"`{e.name}`",
                (env.get("started_at") or "–")[:10],
                minutes(env.get("wall_seconds")),
                minutes(env.get("cpu_seconds")),
                quick_wall(e.name),
                f"`{env['code']['digest'][:12]}`",
                len(env["code"]["files"]),
                "yes" if e.ci else "no",
            )
        )
    return table(
        (
            "experiment",
            "ran",
            "wall time",
            "CPU time",
            "quick version",
            "code digest",
            "files",
            "quick in CI",
        ),
        rows,
    )


def mafalda_comparison() -> str:
    d = load("mafalda_comparison")
    cfg = d["config"]
    eps = cfg["epsilons"]
    level = f"{cfg['confidence']:.0%}"
    out = [source("mafalda_comparison"), ""]
    for base, label in (("dp-dsgd", "DP-D-SGD"), ("dmf", "D-MF")):
        rows = []
        for graph in cfg["graphs"]:
            for ds in cfg["datasets"]:
                cells = []
                for e in eps:
                    c = d["improvement"][f"{graph}|{ds}|{float(e)}"][base]
                    cells.append(
                        "diverged"
                        if c.get("diverged")
                        else f"{c['mean']:.1f} ± {c['ci']:.1f} ({c['wins']}/{c['seeds']})"
                    )
                rows.append((graph, ds.split(":")[0], *cells))
        o = d["overall"][base]
        mean = "–" if o is None else f"**{o['mean']:.1f} ± {o['ci']:.1f}**"
        out += [
            f"MAFALDA vs {label}: % lower last-{cfg['last_steps']}-step test loss, mean ± "
            f"{level} t-interval over {len(cfg['seeds'])} seeds (seeds where MAFALDA is better):",
            "",
            table(("graph", "data", *(f"ε = {e:g}" for e in eps)), rows),
            "",
            f"Mean over the {0 if o is None else o['settings']} settings: {mean} "
            f"({level} t-interval over seeds of each seed's mean over the settings).",
            "",
        ]
    widths = sorted(
        c["ci"]
        for per in d["improvement"].values()
        for base, c in per.items()
        if base in ("dp-dsgd", "dmf") and not c.get("diverged") and c.get("ci") is not None
    )
    if widths:
        out += [
            f"Half-widths of the {level} intervals of the cells above: median "
            f"{widths[len(widths) // 2]:.1f}, largest {widths[-1]:.1f} points; two independent "
            f"runs of a cell (seeds shifted by --replicate) differ by less than √2 times its "
            f"half-width in 95% of pairs: at most {widths[-1] * 2**0.5:.1f} points here.",
            "",
        ]
    edges = sorted(k for k, v in d["tuning"].items() if v["at_grid_edge"])
    out.append(
        f"Learning rates tuned on {len(cfg['tuning_seeds'])} seeds of their own; "
        f"{len(edges)} of {len(d['tuning'])} choices sit at the edge of the extended grid"
        + (f" ({', '.join(edges)})." if edges else ".")
    )
    return "\n".join(out)


def mafalda_protocol() -> str:
    d = load("mafalda_protocol")
    cfg = d["config"]
    g, data = cfg["graph"], cfg["data"]
    level = f"{cfg['confidence']:.0%}"
    rows = []
    for i, mu in enumerate(cfg["mus"]):
        cells = [num(mu), num(d["epsilons"][i])]
        for proto in ("tuned", "shared"):
            s = d["protocols"][proto]
            for mech in ("dp-dsgd", "mafalda"):
                r = s["rows"][f"{mech}|{mu}"]
                cells.append(
                    "diverged"
                    if r["diverged"]
                    else f"{fixed(r['last_mean'])} (η {num(r['lr'], 2)})"
                )
            imp = s["improvement"][str(mu)]
            cells.append(
                "–"
                if "mean" not in imp
                else f"{imp['mean']:.1f} [{imp['ci'][0]:.1f}, {imp['ci'][1]:.1f}]"
            )
        rows.append(cells)
    fac = d["mafalda_factor"] or {}
    return block(
        "mafalda_protocol",
        f"{g['nodes']}-node ego stand-in ({g['edges']:,} edges, spectral gap "
        f"{num(g['spectral_gap_uniform_neighbour'])}, degrees {g['degree_range'][0]}–"
        f"{g['degree_range'][1]}), Housing-shaped stand-in ({data['rows']:,} rows, test "
        f"{data['test_rows']:,}, validation {data['validation_rows']:,}), T = {cfg['steps']}, "
        f"(k, b) = ({cfg['participation'][0]}, {cfg['participation'][1]}), "
        f"{cfg['rows_per_node']} rows per node in batches of {cfg['batch_size']}, "
        f"{len(cfg['seeds'])} seeds; MAFALDA factor duality gap {num(fac.get('gap'), 2)}. "
        f"Last-{cfg['last_steps']}-step test MSE (mean over seeds; step size η in MSE units) "
        f"and MAFALDA's % lower loss with its {level} t-interval, per μ (ε at δ = "
        f"{num(cfg['delta'])}):",
        table(
            (
                "μ",
                "ε",
                "DP-D-SGD tuned",
                "MAFALDA tuned",
                "% lower (tuned)",
                "DP-D-SGD shared",
                "MAFALDA shared",
                "% lower (shared)",
            ),
            rows,
        ),
        table(
            ("claim", "paper", "edgedp", "verdict"),
            [(r["claim"], r["paper"], r["edgedp"], r["verdict"]) for r in d["table"]],
        ),
    )


def whisper_fig1() -> str:
    d = load("whisper_fig1")
    cfg = d["config"]
    eps_fixed = 10
    rows = [
        (
            f"{t['p']:g}",
            num(t["cdp"]),
            num(t["mix"]),
            num(t["pair"]),
            num(t["ldp"]),
            num(t["post_mix"]),
            num(t["post_pair"]),
            num(t["post_ldp"]),
            "yes" if t["ordered_all_seeds"] else "**no**",
        )
        for t in d["table"]
        if t["epsilon"] == eps_fixed
    ]
    ratios = d["summary"]["compact_ratio_mean"]
    holds = d["summary"]["ordering_holds_everywhere"]
    return block(
        "whisper_fig1",
        f"Fig. 1 (n = {cfg['n']}, C = {cfg['clip_norm']:g}, T = {cfg['steps']:,}, δ = "
        f"{cfg['delta']:g}), ε = {eps_fixed}, mean over {len(cfg['graph_seeds'])} ER graphs "
        "per p; post-mixing: Tr(WRWᵀ)/n:",
        table(
            (
                "p",
                "σ²_cdp",
                "σ²_mix",
                "σ²_pair",
                "σ²_ldp",
                "post-mix Whisper",
                "DECOR",
                "LDP",
                "ordered on every graph",
            ),
            rows,
        ),
        "The ordering σ²_cdp ≤ σ²_mix ≤ σ²_pair ≤ σ²_ldp holds on every graph and ε: "
        + ("**yes**." if holds else "**no**."),
        "Compact forms against the dense optimum (Tr(WRWᵀ) ratio, mean over graphs): "
        + "; ".join(
            f"p = {p}: " + ", ".join(f"{k} {v:.3f}" for k, v in r.items())
            for p, r in ratios.items()
        )
        + ".",
    )


def whisper_tasks() -> str:
    d = load("whisper_tasks")
    cfg = d["config"]
    mechs = ("ldp", "decor", "whisper", "whisper-local", "cdp")

    def rows(part: str, key: str, x: str) -> list[tuple]:
        return [
            (f"{r[x]:g}", *(f"{num(r[m])} ± {num(r[m + '_std'], 2)}" for m in mechs))
            for r in d[part][key]
        ]

    head = ("LDP", "DECOR", "Whisper", "Whisper local", "CDP")
    return block(
        "whisper_tasks",
        f"Quadratic Eq. (11) (started at x*, {cfg['quad_seeds']} noise seeds, "
        f"T = {cfg['t_quadratic']:,}): optimality gap ± s.e. at ε = {cfg['eps_fixed']} by p:",
        table(("p", *head), rows("quadratic", "vs_p", "p")),
        f"Logistic regression ({cfg['dataset']}, T = {cfg['t_logistic']:,}, "
        f"{cfg['seeds']} noise trials, certified plans): test loss ± s.e. at p = "
        f"{cfg['p_fixed']} by ε:",
        table(("ε", *head), rows("logistic", "vs_epsilon", "epsilon")),
    )


def whisper_agent_level() -> str:
    import paper_rows

    d = load("whisper_agent_level")
    cfg = d["config"]
    mechs = cfg["mechanisms"]

    smallest = min(cfg["learning_rates"])

    def still(r: dict) -> bool:
        """Every mechanism tuned to the grid's smallest η₁ on the quadratic: the clipped
        gradients move a model at most ``reach`` towards x*, so the gap stays the start's."""
        return r["task"] == "quadratic" and paper_rows.at_smallest_rate(r, smallest)

    def cell(r: dict, m: str) -> str:
        s = r["mechanisms"][m]
        mark = " †" if still(r) else ""
        return f"{num(s['mean'])} ± {num(s['ci'], 2)} (η {s['lr']:g}){mark}"

    def ratio(r: dict) -> str:
        return f"{r['value']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}]"

    def rows(task: str, key: str, x: str) -> list[tuple]:
        return [
            (
                f"{r[x]:g}",
                *(cell(r, m) for m in mechs),
                ratio(r["ldp/whisper"]),
                ratio(r["decor/whisper"]),
            )
            for r in d[task][key]
        ]

    head = ("LDP", "DECOR", "Whisper", "LDP / Whisper", "DECOR / Whisper")
    fixed_cell = d["quadratic"]["vs_p"][0]  # ε = eps_fixed
    priv = {m: fixed_cell["mechanisms"][m]["privacy"] for m in mechs}
    edges = sum(
        r["mechanisms"][m]["lr_at_grid_edge"]
        for task in ("quadratic", "logistic")
        for key in ("vs_epsilon", "vs_p")
        for r in d[task][key]
        for m in mechs
    )
    total = sum(len(d[t][k]) for t in ("quadratic", "logistic") for k in ("vs_epsilon", "vs_p"))
    data = cfg["data"]
    quad_rows = [r for k in ("vs_epsilon", "vs_p") for r in d["quadratic"][k]]
    quad, stuck = len(quad_rows), sum(still(r) for r in quad_rows)
    reach = (
        smallest
        * cfg["clip"]
        * math.fsum(1.0 / math.sqrt(t) for t in range(1, cfg["t_quadratic"] + 1))
    )
    return block(
        "whisper_agent_level",
        f"Privacy unit {cfg['adjacency']}; attacker: {cfg['attacker']}; δ = "
        f"{cfg['delta']:g}; C = {cfg['clip']:g}, n = {cfg['n']}; calibration "
        f"{cfg['calibration']}. At ε = {fixed_cell['epsilon']:g} (p = {fixed_cell['p']:g}, T = "
        f"{cfg['t_quadratic']:,}) the noise certifies, Thm 2 / exact GDP conversion: "
        + "; ".join(
            f"{m} {priv[m]['epsilon_thm2']:.3f} / {priv[m]['epsilon_gdp']:.3f}" for m in mechs
        )
        + f". Learning rates from {list(cfg['learning_rates'])}, each mechanism at its best on "
        f"{cfg['tuning_seeds']['quadratic']} (quadratic) / {cfg['tuning_seeds']['logistic']} "
        f"(logistic) tuning seeds; means ± 95% t-intervals over "
        f"{cfg['eval_seeds']['quadratic']} / {cfg['eval_seeds']['logistic']} other seeds; ratios "
        "of the means with 95% paired-bootstrap intervals; "
        f"{edges} of {len(mechs) * total} learning-rate choices sit at the edge of the grid. "
        f"† marks the quadratic settings ({stuck} of {quad}) where every mechanism is tuned to "
        f"the smallest η₁ = {smallest:g}: a clipped gradient moves a model at most η_t C, so in "
        f"T = {cfg['t_quadratic']:,} steps the gradients move it at most {reach:.3g} towards "
        f"x* from a start at distance {cfg['start_distance']:g}; a larger η₁ costs more in "
        "noise than it gains, the gap there is mostly the start's, and its ratios say little "
        "about the noise.",
        f"Quadratic Eq. (11), started at distance {cfg['start_distance']:g} from x*, T = "
        f"{cfg['t_quadratic']:,}: optimality gap at ε = {cfg['eps_fixed']} by p (Fig. 2(b)):",
        table(("p", *head), rows("quadratic", "vs_p", "p")),
        f"… and at p = {cfg['p_fixed']} by ε (Fig. 2(a)):",
        table(("ε", *head), rows("quadratic", "vs_epsilon", "epsilon")),
        f"Logistic regression on a9a ({data['examples']:,} examples, {data['features']} "
        f"features, {data['what']}; {data['local_examples']:,} per agent, "
        f"{cfg['partition']}, batch {cfg['batch']}, λ = {cfg['l2']:g}), T = "
        f"{cfg['t_logistic']:,}: test loss at ε = {cfg['eps_fixed']} by p (Fig. 3(b)); the "
        f"non-private optimum's test loss is {num(d['logistic']['reference_test_loss'])}:",
        table(("p", *head), rows("logistic", "vs_p", "p")),
        f"… and at p = {cfg['p_fixed']} by ε (Fig. 3(a)):",
        table(("ε", *head), rows("logistic", "vs_epsilon", "epsilon")),
        "The paper's claims, verdicts computed from these numbers:",
        table(
            ("claim", "paper", "edgedp", "verdict"),
            [(r["claim"], r["paper"], r["edgedp"], r["verdict"]) for r in d["table"]],
        ),
    )


def dome_tradeoff() -> str:
    d = load("dome_tradeoff")
    by = {(r["model"], r["eps"], r["method"]): r for r in d["table"]}
    settings = [tuple(s) for s in d["config"]["settings"]]
    methods = list(d["config"]["methods"])

    def cell(r: dict | None) -> str:
        if r is None or r.get("final_loss") is None:
            return "diverged"
        return f"{num(r['final_loss'])} ({fixed(r['final_accuracy'])})"

    main = [
        (
            f"{m} (d = {by[(m, e, methods[0])]['d']:,})",
            f"{e:g}",
            *(cell(by.get((m, e, k))) for k in methods),
        )
        for m, e in settings
    ]
    payload = [
        (f"{m}, ε = {e:g}", *(f"{by[(m, e, k)]['payload_bytes_per_round']:,}" for k in methods))
        for m, e in settings
    ]
    extra_model, extra_eps = d["config"]["extra_setting"]
    extras = [
        (k, num(by[(extra_model, extra_eps, k)]["lr"]), cell(by.get((extra_model, extra_eps, k))))
        for k in d["config"]["extras"]
    ]
    ad_model, ad_eps = d["config"]["adaptive_setting"]
    adaptive = []
    for k in d["config"]["adaptive_methods"]:
        r = by[(ad_model, ad_eps, k)]
        sent = r["aggregate_bytes_per_round"] or r["payload_bytes_per_round"]
        adaptive.append((k, num(r["lr"]), cell(r), f"{sent:,}"))
    seeds = [
        (
            k,
            num(s["lr"]),
            f"{s['n_finite']}/{s['n_seeds']}",
            f"{num(s['loss_mean'])} ± {num(s['loss_sd'], 2)}",
            f"{fixed(s['accuracy_mean'])} ± {fixed(s['accuracy_sd'])}",
            "–"
            if s["loss_minus_dpdsgd"] is None or k == "dp-dsgd"
            else f"{s['loss_minus_dpdsgd']:+.3f} ± {s['loss_minus_dpdsgd_se']:.3f}",
        )
        for k, s in d["seeds_eps4"].items()
    ]
    seed_model, seed_eps = d["config"]["seed_setting"]
    return block(
        "dome_tradeoff",
        f"Final test loss (accuracy) after T = {d['config']['steps']} rounds, one noise seed, "
        "best learning rate of each method's grid:",
        table(("model", "ε", *methods), main),
        "Payload bytes per round (whole network):",
        table(("setting", *methods), payload),
        f"Variants at {extra_model}, ε = {extra_eps:g}:",
        table(("variant", "lr", "loss (accuracy)"), extras),
        f"Adaptive and random bases at {ad_model} (d = "
        f"{by[(ad_model, ad_eps, 'dp-dsgd')]['d']:,}), ε = {ad_eps:g} (bytes per round "
        "include the tree frames):",
        table(("method", "lr", "loss (accuracy)", "bytes per round"), adaptive),
        f"Seeds at {seed_model}, ε = {seed_eps:g} (plan seeds {d['config']['noise_seed']} and "
        f"{', '.join(map(str, d['config']['extra_seeds']))}; learning rate selected on the "
        "first): mean ± sd, loss difference to DP-D-SGD ± Welch s.e.:",
        table(("method", "lr", "finite", "loss", "accuracy", "loss − DP-D-SGD"), seeds),
    )


def leakage_table4() -> str:
    d = load("leakage_table4")
    s = d["setting"]
    ours = d["ours"]
    paper = d["paper_table4"]
    variants = (
        (" (random x(0))", "random x(0) (the paper's setup)"),
        (" (random x(0), instance per trial)", "random x(0), instance per trial"),
        ("", "x(0) = 0"),
        (" (instance per trial)", "x(0) = 0, instance per trial"),
    )
    rows = []
    for suffix, label in variants:
        for eps in ("10", "1", "0.1"):
            r = ours.get(f"sr-gt eps={eps}{suffix}")
            if r is None:
                continue
            p = paper[f"sr-gt eps={eps}"]
            rows.append(
                (
                    label,
                    eps,
                    f"{fixed(r['hbc'])} ({num(p['hbc'], 2)})",
                    fixed(r["hbc_standardized"]),
                    fixed(r["hbc_scalar_inversion"]),
                    f"{num(r['accuracy'], 2)} ({num(p['accuracy'], 2)})",
                    fixed(r.get("epsilon_lb_eavesdropper"), 2),
                )
            )
    zs = ours["zero-sum (correlated randomness [8])"]
    enc = ours["encrypted links (encryption-based [12])"]
    pz = paper["zero-sum (correlated randomness [8])"]
    pe = paper["encrypted links (encryption-based [12])"]
    return block(
        "leakage_table4",
        f"N = {s['n_trials']:,} trials × {s['iterations']:,} iterations, KSG k = "
        f"{s['k_neighbors']}; M-NMI of the colluders (the eavesdropper on every link "
        "gives the same values) with the paper's number in brackets; ε_lb: the audited "
        f"lower bound (95%, {s['audit_trials']:,} trials):",
        table(
            ("variant", "ε", "M-NMI raw (paper)", "std", "scalar", "accuracy (paper)", "ε_lb"),
            rows,
        ),
        table(
            ("comparison row", "eavesdropper (paper)", "colluder (paper)", "accuracy"),
            [
                (
                    "zero-sum masking, no residual noise",
                    f"{fixed(zs['eavesdropper'])} ({num(pz['eavesdropper'], 2)})",
                    f"{fixed(zs['hbc'])} ({num(pz['hbc'], 2)})",
                    num(zs["accuracy"], 2),
                ),
                (
                    "encrypted links (sr-gt ε = 1)",
                    f"{fixed(enc['eavesdropper'])} ({num(pe['eavesdropper'], 2)})",
                    f"as sr-gt ({num(pe['hbc'], 2)})",
                    num(enc["accuracy"], 2),
                ),
            ],
        ),
    )


def audit_table() -> str:
    d = load("audit_table")
    rows, flagged = [], []
    for mech, row in d["gradient"].items():
        att = row["attackers"]
        if row["verdict"]["violation"]:
            flagged.append(mech)
        first = att[0]
        fit = (
            f"{fixed(first['mu_hat'])} [{fixed(first['mu_low'])}, {fixed(first['mu_high'])}]"
            if "mu_hat" in first
            else "–"
        )
        rows.append(
            (
                mech,
                fixed(first["epsilon"], 2),
                " / ".join(fixed(e["epsilon_lb"], 2) for e in att),
                fixed(first.get("mu")) if "mu" in first else "–",
                " / ".join(fixed(e.get("mu_lb"), 2) for e in att) if "mu" in first else "–",
                fit,
                " / ".join(fixed(e.get("mu_view", e.get("epsilon_view")), 3) for e in att),
                "**yes**" if row["verdict"]["violation"] else "no",
            )
        )
    s = d["setting"]
    atts = " / ".join(s["attackers"])
    first = next(iter(d["gradient"].values()))
    tests = first["verdict"]
    typical = first["attackers"][0]
    out = [
        source("audit_table"),
        "",
        f"{s['topology']}, T = {s['steps']}, ε = {s['epsilon_target']:g} at δ = {s['delta']:g} "
        f"(Laplace: pure ε), gradient canary, N = {d['trials']:,} trials per mechanism; "
        f"attackers {atts}. Per mechanism the verdict runs its μ and ε tests of every "
        f"attacker ({tests['tests']} for a Gaussian plan), each at "
        f"{tests['test_confidence']:.4f} ({tests['correction']}, family-wise "
        f"{tests['confidence']:.0%}); μ_lb and ε_lb are those simultaneous lower bounds. "
        f"Mechanisms flagged: **{len(flagged)} of {len(rows)}**"
        + (f" ({', '.join(flagged)})" if flagged else "")
        + f". With these trials no ε_lb can pass {fixed(typical['epsilon_lb_max'], 2)} and "
        f"a mechanism exactly at μ = {fixed(typical.get('mu'))} typically shows "
        f"{fixed(typical.get('epsilon_lb_typical'), 2)} (the median of simulated audits).",
        "",
        table(
            (
                "mechanism",
                "ε (every link)",
                "ε_lb per attacker",
                "μ",
                "μ_lb per attacker",
                "μ̂ [95%], every link",
                "μ_view / ε_view per attacker",
                "flagged",
            ),
            rows,
        ),
    ]
    if d.get("example"):
        ex = [
            (
                mech,
                " / ".join(fixed(e["epsilon_lb"], 2) for e in row["attackers"]),
                " / ".join(fixed(e.get("mu_hat"), 2) for e in row["attackers"]),
            )
            for mech, row in d["example"].items()
        ]
        out += [
            "",
            f"Example canary (crafted input, real data), N = {d['example_trials']:,}:",
            "",
            table(("mechanism", "ε_lb per attacker", "μ̂ per attacker"), ex),
        ]
    return "\n".join(out)


def audit_power() -> str:
    d = load("audit_power")

    def cells(part: str) -> list[tuple[str, str, str, str, str]]:
        return [
            (
                name,
                f"{c['trials']:,}",
                f"{c['flagged']:,} / {c['audits']:,}",
                f"[{fixed(c['rate_interval'][0])}, {fixed(c['rate_interval'][1])}]",
                f"{c['old_criterion_flagged']:,} / {c['audits']:,}",
            )
            for name, by_n in d[part].items()
            for c in by_n
        ]

    head = ("case", "trials per audit", "flagged", "rate, 95% interval", "former verdict")
    s = d["setting"]
    return block(
        "audit_power",
        f"DP-D-SGD on {s['topology']}, T = {s['steps']}, δ = {d['delta']:g}; attackers "
        f"{' / '.join(d['attackers'])}; a *halved* plan adds half the noise its accountant "
        "certifies (the view's μ is twice the certified one), a *sound* one the noise it "
        "certifies. *Flagged*: the verdict (μ and ε tests of every attacker, Bonferroni at "
        "family-wise 95%); *former verdict*: ε_lb > ε for some attacker at 95% each. Whole "
        "audits (engines, views, statistics):",
        table(head, cells("whole")),
        "The statistic drawn from its exact law through the same verdict code:",
        table(head, cells("statistic")),
    )


def pndp_fig2() -> str:
    d = load("pndp_fig2")
    c = d["config"]
    rows = []
    for name, g in d["graphs"].items():
        for weighting, w in g["weightings"].items():
            for r in w["by_distance"]:
                rows.append(
                    (
                        f"{name} (n = {g['n']}{'' if g['n'] == g['paper_n'] else ', stand-in'})",
                        weighting,
                        r["distance"],
                        r["nodes"],
                        num(r["ours_over_ldp_mean"]),
                        num(r["cyffers_over_ldp_mean"]),
                        f"{num(r['gain_of_mean'])} ({num(r['gain_min'])}–{num(r['gain_max'])})",
                    )
                )
    sources = "; ".join(f"{name}: {g['source']}" for name, g in d["graphs"].items())
    return block(
        "pndp_fig2",
        f"DP-D-SGD, T = {c['steps']}, participation {tuple(c['participation'])}, noise std "
        f"{c['noise_std_over_clip']:g} × the clip norm, RDP at α = {c['alpha']:g}, attacker "
        f"node {c['attacker']}; paper 000's accounting against {c['cyffers_source']} "
        f"({c['cyffers_trust_model']}) and LDP; both hold for {c['pndp_model']} gradients only. "
        f"Graphs: {sources}.",
        table(
            (
                "graph",
                "weights",
                "hops",
                "nodes",
                "paper 000 / LDP",
                "Cyffers / LDP",
                "gain over Cyffers: of the means (min–max)",
            ),
            rows,
        ),
    )


def sr_gt_table4_fit() -> str:
    d = load("sr_gt_table4_fit")
    c = d["config"]
    eps = list(d["decomposition"])
    decomposition = [
        (
            e,
            metric,
            num(d["decomposition"][e][metric]["start"]),
            num(d["decomposition"][e][metric]["noise_delta1"]),
            num(d["decomposition"][e][metric]["total_delta1"]),
            num(d["lower_bound_homogeneous"]["1"][e][metric]["value"]),
            num(d["lower_bound_homogeneous"]["0.1"][e][metric]["value"]),
            num(d["decomposition"][e]["paper"], 2) if metric == "sum" else "–",
        )
        for e in eps
        for metric in ("sum", "network average")
    ]
    fits = []
    for scope, by_metric in d["fit"].items():
        for metric, f in by_metric.items():
            fits.append(
                (
                    scope,
                    metric,
                    f"×{num(f['stiffness'])}",
                    num(f["delta"]),
                    *(
                        f"{num(f['cells'][e]['model'])} ({num(f['cells'][e]['paper'], 2)})"
                        for e in eps
                    ),
                )
            )
    runs = d["leakage_at_fit"]
    stable_fit = d["fit"]["stable stiffness"]["sum"]
    leak = [
        (
            e,
            f"{fixed(runs[e]['m_nmi'])} ({num(runs[e]['paper_m_nmi'], 2)})",
            fixed(runs[e]["m_nmi_scalar_inversion"]),
            f"{num(runs[e]['accuracy_sum_mc'])} ({num(stable_fit['cells'][e]['model'])})",
        )
        for e in eps
    ]
    st = d["stable_stiffness"]
    return block(
        "sr_gt_table4_fit",
        f"Alg. 1 on {c['graph']}, K = {c['steps']:,}, {c['initial_state']}, {c['adjacency']}. "
        "Expected accuracy = random-start term + δ² × noise term, exactly (moments through "
        "the update rules), per ε, on edgedp's instance at δ = 1, with the lower bound over "
        "every homogeneous instance at δ = 1 and δ = 0.1:",
        table(
            (
                "ε",
                "metric",
                "start",
                "noise (δ = 1)",
                "total (δ = 1)",
                "lower bound δ = 1",
                "lower bound δ = 0.1",
                "paper",
            ),
            decomposition,
        ),
        f"Stiffness c and δ fitted to the paper's three accuracies (least squares on log10): "
        f"over every c of the grid, and over the stable c only ({st['count']} of {st['of']}, "
        f"up to ×{num(st['largest'])}: {st['rule']}); model (paper):",
        table(("fit over", "metric", "c", "δ", *(f"ε = {e}" for e in eps)), fits),
        f"At the stable fit of the sum, {c['trials']:,} trials × {c['steps']:,} iterations "
        "with the Table 4 machinery (colluders, Eq. 44): M-NMI (paper), the scalar "
        "inversion's M-NMI, Monte Carlo accuracy (the exact model):",
        table(("ε", "M-NMI (paper)", "scalar inversion", "accuracy (model)"), leak),
    )


def leakage_table() -> str:
    d = load("leakage_table")
    s = d["setting"]
    rows = []
    for r in d["rows"]:
        if "error" in r:
            rows.append((r["mechanism"], "–", "–", "–", f"not run: {r['error']}"))
            continue
        delta = "0" if r["delta"] == 0 else num(r["delta"], 1)
        rows.append(
            (
                r["mechanism"],
                r["attacker"],
                fixed(r["m_nmi"]),
                fixed(r["m_nmi_standardized"]),
                f"{num(r['epsilon'])} (δ = {delta})",
            )
        )
    return block(
        "leakage_table",
        f"{s['graph']}, victim {s['victim']}, T = {s['steps']}, N = {s['n_trials']:,} "
        f"trials, KSG k = {s['k_neighbors']}; Gaussian mechanisms at σ = {s['sigma']:g}, "
        "Laplace ones at ε = 1:",
        table(("mechanism", "attacker", "M-NMI", "M-NMI (z-scored)", "formal ε"), rows),
    )


def pndp_distance() -> str:
    d = load("pndp_distance")
    rows = []
    for name, g in d["graphs"].items():
        for observer, data in g["observers"].items():
            for r in data["by_distance"]:
                rows.append(
                    (
                        name,
                        observer,
                        r["distance"],
                        r["pairs"],
                        f"{num(r['rdp_mean'])} ({num(r['rdp_min'])}–{num(r['rdp_max'])})",
                        num(r["ratio_to_ldp_mean"]),
                    )
                )
    c = d["config"]
    return block(
        "pndp_distance",
        f"DP-D-SGD, T = {c['steps']}, σ = {c['noise_multiplier']:g}, RDP at α = "
        f"{c['alpha']:g} (LDP: {num(next(iter(d['graphs'].values()))['ldp_rdp'])}); PNDP "
        "holds for non-adaptive gradients only:",
        table(("graph", "observer", "hops", "pairs", "RDP mean (min–max)", "mean / LDP"), rows),
    )


def sr_gt_sensor_fusion() -> str:
    d = load("sr_gt_sensor_fusion")
    c = d["config"]
    rows = []
    for dl, by_eps in d["results"].items():
        for e, r in by_eps.items():
            a, b = r["sr-gt"], r["dpop"]

            def med(x: dict) -> str:
                q = x["iterations_q25_median_q75"]
                return "–" if q is None else f"{q[1]:g}"

            rows.append(
                (
                    dl,
                    e,
                    f"{num(a['final_mean'])} / {num(b['final_mean'])}",
                    f"{a['reached_threshold']:.0%} / {b['reached_threshold']:.0%}",
                    f"{med(a)} / {med(b)}",
                )
            )
    return block(
        "sr_gt_sensor_fusion",
        f"Sensor fusion (paper 004 §6.1), {c['graph']}, {c['trials']:,} trials × "
        f"{c['steps']} iterations, the §6.1 schedules; sr-gt / DPOP:",
        table(
            (
                "δ",
                "ε",
                "final ‖x − x*‖² (mean)",
                f"trials reaching {c['threshold']:g}",
                "median iterations to it",
            ),
            rows,
        ),
    )


def sr_gt_digits() -> str:
    d = load("sr_gt_digits")
    c = d["config"]
    rows = [
        (
            name,
            f"{fixed(r['sr-gt']['final_accuracy'])} / {fixed(r['dpop']['final_accuracy'])}",
            f"{fixed(r['sr-gt']['best_accuracy'])} / {fixed(r['dpop']['best_accuracy'])}",
            num(r["sr-gt"]["epsilon_spent"]),
        )
        for name, r in d["results"].items()
    ]
    return block(
        "sr_gt_digits",
        f"Digits, {c['model']} (d = {c['dim']}), {c['graph']}, {c['steps']} rounds, "
        f"{c['trials']} trials, example-level δ = {num(c['delta_grad'])}; sr-gt / DPOP:",
        table(("run", "final accuracy", "best accuracy", "ε spent"), rows),
    )


def cross_agent_side_by_side() -> str:
    d = load("cross_agent_side_by_side")
    c = d["config"]
    rows = [
        (
            r["run"],
            f"{num(r['test_loss'], 4)} ± {num(r['test_loss_se'], 2)}",
            num(r.get("post_mixing_variance")),
            num(r["epsilon"]),
            num(r.get("epsilon_insider")),
            num(r.get("epsilon_neighbourhood")),
        )
        for r in d["rows"]
    ]
    return block(
        "cross_agent_side_by_side",
        f"{c['dataset']}, ER({c['n']}, {c['p']}), ε = {c['epsilon']:g} at δ = "
        f"{c['delta']:g}, T = {c['T']:,}, {c['trials']} trials:",
        table(
            ("run", "test loss ± s.e.", "post-mixing variance", "ε", "ε insider", "ε hood"),
            rows,
        ),
    )


def cross_agent_dropout() -> str:
    d = load("cross_agent_dropout")
    rows = [
        (
            res["graph"],
            r["mechanism"],
            f"{r['dropout']:g}",
            num(r["planned"]),
            num(r.get("replanned")),
            num(r["planned_vs_ldp_same_dropout"]),
        )
        for res in d["results"]
        for r in res["rows"]
    ]
    return block(
        "cross_agent_dropout",
        f"Residual noise per step after mixing (unit bound), {d['config']['rounds']} random "
        "online sets per rate; privacy never worse than planned: "
        + ("**yes**." if d["never_worse"] else "**no**."),
        table(("graph", "mechanism", "dropout", "planned", "re-planned", "× LDP"), rows),
    )


def ksg_vs_gaussian() -> str:
    d = load("ksg_vs_gaussian")
    rows = []
    for case, rs in d["cases"].items():
        for n in d["config"]["samples"]:
            sel = [r for r in rs if r["n"] == n]
            worst = max(sel, key=lambda r: abs(r["bias_bits"]))
            rows.append(
                (
                    case,
                    f"{n:,}",
                    f"{worst['bias_bits']:+.4f} (SNR {num(worst['snr'])})",
                    f"{max(r['max_abs_error_bits'] for r in sel):.4f}",
                )
            )
    return block(
        "ksg_vs_gaussian",
        f"KSG (k = {d['config']['k']}) against the exact Gaussian MI, "
        f"{d['config']['repeats']} sample sets per point:",
        table(("case", "N", "largest mean bias (bits)", "largest error (bits)"), rows),
    )


def event_faults() -> str:
    d = load("event_faults")
    rows = [
        (
            r["scenario"],
            r["nodes"],
            r["rounds"],
            num(r["epsilon"]),
            num(r["fault_free_final_test_loss"], 4),
            num(r["faulty_final_test_loss"], 4),
            r["faulty"]["missing"],
            r["faulty"]["crashes"],
        )
        for r in d["rows"]
    ]
    return block(
        "event_faults",
        table(
            (
                "scenario",
                "nodes",
                "rounds",
                "ε (δ = 1e-6)",
                "loss fault-free",
                "loss with faults",
                "missing",
                "crashes",
            ),
            rows,
        ),
    )


def _not_yet(claim: str, e: UnrecordedError | MissingOutputError) -> tuple[str, ...]:
    """The side-by-side row of an experiment whose output is missing or unrecorded."""
    state = "not generated yet" if isinstance(e, MissingOutputError) else "not regenerated yet"
    return (claim, "–", "–", state, f"`make results ONLY={e.name}`")


def papers() -> str:
    """Per paper, its claims side by side with edgedp's (:mod:`paper_rows`)."""
    import paper_rows

    out = []
    for paper, title in paper_rows.PAPERS.items():
        rows = [r for r in paper_rows.ROWS if r.paper == paper]
        out += [f"**{paper}** — {title}.", ""]
        if paper in paper_rows.NO_EXPERIMENT:
            out += [paper_rows.NO_EXPERIMENT[paper], ""]
        cells = []
        for r in rows:
            try:
                o = load(r.experiment)
            except (UnrecordedError, MissingOutputError) as e:
                claim = r.claim if isinstance(r.claim, str) else "(see its section)"
                cells.append(_not_yet(claim, e))
                continue
            env = o["environment"]
            cells.append(
                (
                    r.claim if isinstance(r.claim, str) else r.claim(o),
                    r.theirs(o),
                    r.ours(o),
                    r.verdict(o),
                    f"`make results ONLY={r.experiment}` ({minutes(env.get('wall_seconds'))})",
                )
            )
        for name in paper_rows.OWN_TABLES.get(paper, ()):
            try:
                o = load(name)
            except (UnrecordedError, MissingOutputError) as e:
                cells.append(_not_yet("(see its section)", e))
                continue
            command = (
                f"`make results ONLY={name}` ({minutes(o['environment'].get('wall_seconds'))})"
            )
            cells += [(*row, command) for row in paper_rows.own_rows(name, o)]
        out += [table(("claim", "paper", "edgedp", "verdict", "command (time)"), cells), ""]
    return "\n".join(out)


def step_size() -> str:
    d = load("step_size")
    order = ("old", "rule", "tuned")
    scenarios = list(dict.fromkeys(r["scenario"] for r in d["rows"]))
    rows = []
    for name in scenarios:
        sel = [r for r in d["rows"] if r["scenario"] == name]
        for r in sorted(sel, key=lambda r: (r["mechanism"], order.index(r["variant"]))):
            finals = r["final_loss"]
            below = sum(f < s for f, s in zip(finals, r["start_loss"], strict=True))
            rows.append(
                (
                    f"{name} ({r['engine']})",
                    r["mechanism"],
                    r["variant"],
                    num(r["learning_rate"]),
                    fixed(r["start_loss"][0]),
                    fixed(sum(finals) / len(finals)),
                    f"{below}/{len(finals)}",
                )
            )
    return block(
        "step_size",
        f"Final test loss, mean over {d['seeds']} noise seeds (the scenarios and variants: "
        "experiments/step_size.py; per-seed values in experiments/out/step_size.md); "
        "`below start`: seeds ending below the untrained model's loss:",
        table(
            (
                "scenario (engine)",
                "mechanism",
                "variant",
                "step size",
                "start",
                "final loss",
                "below start",
            ),
            rows,
        ),
    )


def mf_multi_epoch() -> str:
    d = load("mf_multi_epoch")
    t1, c = d["table1"], d["config"]["table1"]
    return block(
        "mf_multi_epoch",
        f"Optimal factorization of the prefix sum, T = {c['steps']:,}, (k, b) = ({c['k']}, "
        f"{c['b']}): loss {num(t1['loss'], 5)}, dual lower bound {num(t1['dual_bound'], 5)} "
        f"(gap {t1['gap']:.1e}, {t1['iterations']} iterations, {minutes(t1['solve_seconds'])}); "
        f"DP-SGD's C = I has {t1['identity_loss_ratio']:.2f}× that loss, C = A (B = I) "
        f"{t1['antipgd_loss_ratio']:.2f}×. Table 6 (n = 6, (k, b) = (3, 2)), root loss: "
        + ", ".join(f"{k.replace('_', ' ')} {v['root_loss']:.4f}" for k, v in d["table6"].items())
        + ".",
    )


def demo_table() -> str:
    """README's demo table: what `edgedp demo` prints, from the stored run."""
    from edgedp_sim import demo_report

    return f"```\n{demo_report.format_table(load('demo_run'))}\n```"


def demo_run() -> str:
    d = load("demo_run")
    a = d["agents"]
    return block(
        "demo_run",
        "The results table `edgedp demo` prints (README shows the same), the leakage table of "
        "the report, and the real agents against the event engine:",
        demo_table(),
        f"Real agents: {a['agents']} `edgedp-agent` processes, {a['steps']} rounds of "
        f"{d['config']['agents_mechanism']}: model digest {a['real_digest'][:16]} "
        f"{'equals' if a['equal'] else '**differs from**'} the event engine's "
        f"{a['simulated_digest'][:16]}. The report: experiments/out/demo_run.png.",
    )


#: the generated blocks of README.md
README_BLOCKS: dict[str, Callable[[], str]] = {"demo_run": demo_table}

BLOCKS: dict[str, Callable[[], str]] = {
    "index": index,
    "demo_run": demo_run,
    "papers": papers,
    "step_size": step_size,
    "mf_multi_epoch": mf_multi_epoch,
    "mafalda_comparison": mafalda_comparison,
    "mafalda_protocol": mafalda_protocol,
    "whisper_fig1": whisper_fig1,
    "whisper_tasks": whisper_tasks,
    "whisper_agent_level": whisper_agent_level,
    "dome_tradeoff": dome_tradeoff,
    "leakage_table4": leakage_table4,
    "audit_table": audit_table,
    "audit_power": audit_power,
    "pndp_fig2": pndp_fig2,
    "sr_gt_table4_fit": sr_gt_table4_fit,
    "leakage_table": leakage_table,
    "pndp_distance": pndp_distance,
    "sr_gt_sensor_fusion": sr_gt_sensor_fusion,
    "sr_gt_digits": sr_gt_digits,
    "cross_agent_side_by_side": cross_agent_side_by_side,
    "cross_agent_dropout": cross_agent_dropout,
    "ksg_vs_gaussian": ksg_vs_gaussian,
    "event_faults": event_faults,
}
