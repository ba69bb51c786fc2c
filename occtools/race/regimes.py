"""The race's regimes and variants. Regimes come from the matched-regimes file (helper of issue
49 item 3: docs/results/regimes-matched.json; only the fields below are read) or, for --quick,
the built-in tiny one. Each regime's layout is derived from its train flags and its node count;
its variants are the issue's list, those its layout can run.

  {"regimes": [{"name", "real_setting", "real": {"shares": {...}, "pp_to_dp_bytes"},
                "emulated": {"train_flags": [...], "nodes", "ranks_per_node", "bandwidth",
                             "latency", "shares": {...}, "pp_to_dp_bytes"}}]}
"""

import json

from occtools.common.errors import Failure
from occtools.compressors import variants as compressor_variants
from occtools.speedup import variants as speedup_variants

# Flags a regime's train_flags must not hold: the variants add compression themselves.
COMPRESSION_PREFIXES = ("--grad-comp", "--inter-grad-comp", "--activation-comp", "--use-error-feedback",
                        "--emb-comm-opt", "--selective-grad-comp", "--diloco-")

QUICK = {
    "name": "quick", "real_setting": "none: the CI-sized check of the race's plumbing (--quick)",
    "real": None,
    "emulated": {"train_flags": ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                                 "--seq-length", "64", "--max-position-embeddings", "64", "--micro-batch-size", "4",
                                 "--global-batch-size", "16", "--pipeline-model-parallel-size", "2"],
                 "nodes": 2, "ranks_per_node": 1, "bandwidth": "100mbit", "latency": "0", "shares": None,
                 "pp_to_dp_bytes": None},
}
QUICK_VARIANTS = ("baseline", "pp_mxfp4_lep_rans")


def flag_value(flags, name, default):
    """The value after the last NAME in FLAGS, else DEFAULT."""
    value = default
    for i, f in enumerate(flags[:-1]):
        if f == name:
            value = flags[i + 1]
    return value


def _need(doc, path, kind, where):
    cur = doc
    for key in path.split("."):
        if not isinstance(cur, dict) or key not in cur:
            raise Failure(f"{where}: no {path}; the regimes file needs it (schema in occtools/race/regimes.py)")
        cur = cur[key]
    if not isinstance(cur, kind) or isinstance(cur, bool):
        raise Failure(f"{where}: {path} is {cur!r}, not {getattr(kind, '__name__', 'a number')}; fix the regimes file")
    return cur


def check(regime, where):
    """REGIME with its layout added (tensor, pipeline, dp, world); Failure naming what is wrong."""
    name = _need(regime, "name", str, where)
    where = f"{where} ({name})"
    _need(regime, "real_setting", str, where)
    em = _need(regime, "emulated", dict, where)
    flags = _need(regime, "emulated.train_flags", list, where)
    nodes = _need(regime, "emulated.nodes", int, where)
    rpn = _need(regime, "emulated.ranks_per_node", int, where)
    for key in ("bandwidth", "latency"):
        _need(regime, f"emulated.{key}", str, where)
    if nodes < 1 or rpn < 1:
        raise Failure(f"{where}: emulated.nodes and ranks_per_node must be >= 1")
    bad = [f for f in flags if not isinstance(f, str) or f.startswith(COMPRESSION_PREFIXES)]
    if bad:
        raise Failure(f"{where}: emulated.train_flags holds compression flag {bad[0]!r}: the race adds each "
                      f"variant's own; leave compression out of the regime")
    try:
        tensor = int(flag_value(flags, "--tensor-model-parallel-size", "1"))
        pipeline = int(flag_value(flags, "--pipeline-model-parallel-size", "1"))
    except ValueError:
        raise Failure(f"{where}: a parallel size in emulated.train_flags is not a whole number") from None
    world = nodes * rpn
    if tensor < 1 or pipeline < 1 or world % (tensor * pipeline):
        raise Failure(f"{where}: T{tensor} x P{pipeline} does not divide {nodes} nodes x {rpn} ranks; fix its "
                      f"train_flags or node count")
    return dict(regime, name=name, emulated=em, tensor=tensor, pipeline=pipeline, dp=world // (tensor * pipeline),
                world=world)


def load(path):
    """The regimes of PATH, each checked (check())."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise Failure(f"--regimes {path}: cannot read it ({e.strerror}); make it (issue 49's matched regimes) or "
                      f"pass --quick") from None
    except json.JSONDecodeError as e:
        raise Failure(f"--regimes {path}: not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("regimes"), list) or not doc["regimes"]:
        raise Failure(f"--regimes {path}: needs a non-empty list \"regimes\"")
    out = [dict(check(r, f"{path}: regimes[{i}]"), file_note=doc.get("note")) for i, r in enumerate(doc["regimes"])]
    names = [r["name"] for r in out]
    if len(set(names)) != len(names):
        raise Failure(f"--regimes {path}: two regimes share a name; names must be unique")
    return out


def quick():
    return check(QUICK, "the --quick regime")


def dp_crosses_nodes(regime):
    """Whether a data-parallel group spans nodes (Megatron's order: rank = pp*D*T + dp*T + tp)."""
    t, d, p, rpn = regime["tensor"], regime["dp"], regime["pipeline"], regime["emulated"]["ranks_per_node"]
    return d > 1 and any(len({(pp * d * t + dp * t + tp) // rpn for dp in range(d)}) > 1
                         for pp in range(p) for tp in range(t))


def variants(regime, names=None):
    """[(name, compression flags as a list, why it is left out or None)] in the issue's order:
    the baseline, DP-only PowerSGD, the paper's full Optimus-CC, the block codecs (MXFP4 + rANS on
    the pipeline links with LEP; MXFP4 + EF on DP), DiLoCo and Streaming DiLoCo where DP crosses a
    slow link, then the auto plan ("auto": its flags come from `plan --auto` at run time)."""
    p, d = regime["pipeline"], regime["dp"]
    sp = speedup_variants.flags(p)
    dp_mxfp4 = next(v["flags"] for v in compressor_variants.all_variants() if v["name"] == "dp_mxfp4")
    crossing = dp_crosses_nodes(regime)
    table = [
        ("baseline", sp["baseline"], None),
        ("dp_powersgd", sp["dp_powersgd"], None if d > 1 else "no data parallelism"),
        ("full", sp["full"], None if p > 1 and d > 1 else "needs pipeline and data parallelism"),
        ("pp_mxfp4_lep_rans", sp["pp_mxfp4_lep_rans"], None if p > 1 else "no pipeline"),
        ("dp_mxfp4", dp_mxfp4, None if d > 1 else "no data parallelism"),
        ("diloco_h8", sp["diloco_h8"], None if crossing else "DP does not cross a slow link"),
        ("streaming_int8", sp["streaming_int8"], None if crossing else "DP does not cross a slow link"),
        ("auto", "", None),
    ]
    if names:
        known = {n for n, _, _ in table}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise Failure(f"--variants: no variant {', '.join(unknown)} (have {', '.join(n for n, _, _ in table)})")
        table = [t for t in table if t[0] in names]
    return [(n, f.split(), why) for n, f, why in table]
