"""The speedup benchmark's targets (the paper's Table 2 claims, and the quality-aware plan's):
(check, met, value) for the variants that ran."""


def targets(res, label):
    out = []
    full, dpo = res.get("full"), res.get("dp_powersgd")
    if full and dpo:
        out += [
            ("full Optimus-CC removes >= 70 % of the baseline's exposed communication",
             full["overhead_removed"] is not None and full["overhead_removed"] >= 0.70,
             f"{100 * (full['overhead_removed'] or 0):.0f} %"),
            ("full Optimus-CC beats DP-only PowerSGD", full["ms_median"] < dpo["ms_median"],
             f"{full['ms_median']:.0f} vs {dpo['ms_median']:.0f} ms"),
            ("full Optimus-CC within 1 % of the baseline's final training loss", abs(full["loss_vs_baseline"]) <= 0.01,
             f"{100 * full['loss_vs_baseline']:+.2f} %"),
        ]
    auto = res.get("auto")
    if auto:
        # Within 0.5 % of the baseline's loss, the fastest such variant, and faster than DP-only
        # PowerSGD and full Optimus-CC with 95 % intervals that do not overlap.
        ranked = [v for v in res if v != "nocomm"]
        near = [v for v in ranked if abs(res[v]["loss_vs_baseline"]) <= 0.005]
        fastest_near = min(near, key=lambda v: res[v]["ms_median"]) if near else None
        out += [
            ("auto plan within 0.5 % of the baseline's final training loss", abs(auto["loss_vs_baseline"]) <= 0.005,
             f"{100 * auto['loss_vs_baseline']:+.2f} %"),
            ("auto plan is the fastest variant within 0.5 % of the baseline's loss (median)", fastest_near == "auto",
             f"fastest such: {label(fastest_near) if fastest_near else 'none'}"),
        ]
        for other in ("dp_powersgd", "full"):
            if other in res:
                out.append((f"auto plan beats {label(other)} with non-overlapping 95 % intervals",
                            res["auto"]["ms_median_ci95"][1] < res[other]["ms_median_ci95"][0],
                            "[{:.0f}, {:.0f}] vs [{:.0f}, {:.0f}] ms".format(*auto["ms_median_ci95"],
                                                                            *res[other]["ms_median_ci95"])))
    return out
