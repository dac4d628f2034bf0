"""The builder's files in `output_dir`: dataset/ (`Dataset.save_to_disk`), pairs.parquet, prefixes.jsonl,
stats.json and gains.png (matplotlib, imported only to draw it)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import datasets

from procrl.data_builders.pum_math.config import PAIR_TYPES, PUMMathConfig
from procrl.utils import get_logger

logger = get_logger(__name__)


OUTPUT_COLUMNS = (
    "prompt", "chosen", "rejected", "margin", "pair_type", "problem_id", "gain_chosen", "gain_rejected",
    "n_rollouts", "is_tie", "chosen_tokens", "rejected_tokens", "delta_std",
)  # fmt: skip


def write_outputs(config: PUMMathConfig, result: dict, stats: dict):
    """dataset/ (save_to_disk), pairs.parquet, stats.json and gains.png in `config.output_dir`."""
    output_dir = Path(config.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    columns = {name: [row[name] for row in result["rows"]] for name in OUTPUT_COLUMNS}
    features = datasets.Features(
        {
            "prompt": datasets.Value("string"),
            "chosen": datasets.Value("string"),
            "rejected": datasets.Value("string"),
            "margin": datasets.Value("float64"),
            "pair_type": datasets.Value("string"),
            "problem_id": datasets.Value("string"),
            "gain_chosen": datasets.Value("float64"),
            "gain_rejected": datasets.Value("float64"),
            "n_rollouts": datasets.Value("int64"),
            "is_tie": datasets.Value("bool"),
            "chosen_tokens": datasets.Value("int64"),
            "rejected_tokens": datasets.Value("int64"),
            "delta_std": datasets.Value("float64"),
        }
    )
    dataset = datasets.Dataset.from_dict(columns, features=features)
    if len(dataset) == 0:
        logger.warning(
            "no pair passed the margin filter (see stats.json); more rollouts (n_rollouts), more trajectories, a "
            "stronger student or a lower kappa give more pairs"
        )
    dataset.save_to_disk(str(output_dir / "dataset"))
    dataset.to_parquet(str(output_dir / "pairs.parquet"))
    with open(output_dir / "prefixes.jsonl", "w") as f:
        for key, rates in result["rates"].items():
            record = {
                "key": key,
                "problem_id": result["prefixes"][key].problem_id,
                "prefix": result["prefixes"][key].text,
                "n_tokens": result["prefixes"][key].n_tokens,
                "at_step": result["prefixes"][key].at_step,
                "successes": rates.successes,
                "n": rates.n,
                "bare_successes": rates.bare,
                "n_bare": rates.n_bare,
                "gains": [round(g, 6) for g in rates.gains()],
                "utility": round(result["utility"][key], 6),
            }
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    stats = {**stats, "config": asdict(config)}
    (output_dir / "stats.json").write_text(json.dumps(stats, indent=2, ensure_ascii=False))
    plot_gains(result, config, output_dir / "gains.png")
    return dataset


def plot_gains(result: dict, config: PUMMathConfig, path: Path) -> None:
    """Histograms: raw gains g_s per student; |ΔG| of kept pairs per pair type (a PNG at `path`)."""
    # optional heavy dependency: matplotlib is imported only to draw this figure (slow to import)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # optional heavy dependency, as above (after the Agg backend is chosen)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    bins = [i / 8 - 1.0 - 1 / 16 for i in range(18)]
    for s, gains in result["raw_gains"].items():
        axes[0].hist(gains, bins=bins, alpha=0.5, label=f"student {s}: {config.students[s]}")
    axes[0].set_xlabel("gain g_s(x,p) = q_s(x,p) - q_s(x,∅)")
    axes[0].set_ylabel("prefixes")
    axes[0].set_title("Prefix gains per student")
    axes[0].legend(fontsize=8)
    for kind in PAIR_TYPES:
        margins = [r["margin"] for r in result["rows"] if r["pair_type"] == kind]
        if margins:
            axes[1].hist(margins, bins=20, alpha=0.5, label=f"{kind} ({len(margins)})")
    axes[1].set_xlabel("|ΔG| of kept pairs (normalised gain units)")
    axes[1].set_ylabel("pairs")
    axes[1].set_title("Kept pairs per type")
    if result["rows"]:
        axes[1].legend(fontsize=8)
    else:
        axes[1].text(0.5, 0.5, "no pair kept (see stats.json)", ha="center", va="center", transform=axes[1].transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
