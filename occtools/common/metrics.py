"""What the engine's metrics JSONL (`train --metrics`) says about a run: its rows (a run still
being written may end in a partial line), whether it reached its final evaluation, its
validation curve and its bytes per iteration per link class."""

import json
import os
import statistics

CLASSES = ("pp_fwd", "pp_bwd", "dp", "emb")  # the link classes a row's "bytes" counts


def read_run(path):
    """The rows of one metrics file, or None when it does not exist; lines that do not parse
    (the partial last line of a run still writing) are skipped."""
    if not os.path.exists(path):
        return None
    rows = []
    with open(path) as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def finished(rows, iters):
    """The run's last row is its final evaluation, at iteration ITERS."""
    return bool(rows) and "val_loss" in rows[-1] and rows[-1].get("iter") == iters


def file_finished(path, iters):
    return finished(read_run(path), iters)


def val_curve(rows):
    """[(iteration, validation loss)] of the evaluation rows."""
    return [(r["iter"], r["val_loss"]) for r in rows if "val_loss" in r]


def last_80_percent(rows):
    """rows[len // 5:]: the window every report's byte and ratio means are taken over."""
    return rows[len(rows) // 5:]


def mean_bytes(rows, classes=CLASSES):
    """{class: mean bytes per row} (0 where a row does not count that class)."""
    return {k: statistics.mean(r.get("bytes", {}).get(k, 0) for r in rows) for k in classes}


def pct_vs(x, base):
    """100 (x - base) / base: a run's loss against its baseline's, in %."""
    return 100 * (x - base) / base
