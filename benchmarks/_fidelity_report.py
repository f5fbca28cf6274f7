"""Tables, per-round goals and the client-bound calibration of
benchmarks/client_fidelity.py (pure: trials in, printed tables and a summary out)."""

from __future__ import annotations

import numpy as np

ORDER = {"ours": 0, "ours_gpu": 1, "raw": 2, "kernel": 3, "vllm": 4}  # ours_gpu: sampler on
# A trial during which other processes took more than this share of the
# client's or the server's core, or the hypervisor took either (steal: /proc/
# stat counts it in 10 ms ticks, each longer than a token gap), measured the
# host, not the client: it is run again (--retries), every attempt listed.
DISTURBED = 0.10


def disturbed(t: dict) -> bool:
    """Something else took the client's or the server's core during the trial."""
    others = max(t.get("others_cpu_frac", 0.0), t.get("others_cpu_frac_server", 0.0))
    return others > DISTURBED or t.get("steal_ms", 0) > 0


def _pct(a: np.ndarray, q: float) -> float | None:
    return round(float(np.percentile(a, q)), 4) if len(a) else None


def _p99_ms(t: dict) -> float | None:
    return round(float(np.percentile(t["err"], 99)) / 1e6, 4) if len(t["err"]) else None


def summarise(trials: list[dict]) -> dict:
    """Pool the rounds of one (kind, mode, C, tls) cell."""
    err = np.concatenate([t["err"] for t in trials]) / 1e6
    itl = np.abs(np.concatenate([t["itl"] for t in trials])) / 1e6
    ev = sum(t["n_events"] for t in trials)
    span = sum(t["span_s"] for t in trials)
    cpu = sum(t["cpu_s"] for t in trials)
    rounds = [p for t in trials if (p := _p99_ms(t)) is not None]
    rates = [t["n_events"] / t["span_s"] for t in trials if t["span_s"]]
    return {"events": ev, "events_per_s": round(ev / span) if span else None,
            "events_per_s_worst": round(min(rates)) if rates else None,
            "p99_ms_by_round": rounds,
            "p99_ms_worst_round": max(rounds) if rounds else None,
            "p99_ms_median_round": round(float(np.median(rounds)), 4) if rounds else None,
            "p50_ms": _pct(err, 50), "p99_ms": _pct(err, 99),
            "max_ms": round(float(err.max()), 4) if len(err) else None,
            "itl_p99_ms": _pct(itl, 99),
            "itl_max_ms": round(float(itl.max()), 4) if len(itl) else None,
            "cpu_s_per_100k": round(cpu / ev * 1e5, 3) if ev and cpu == cpu else None,
            "lost": sum(t["lost"] for t in trials),
            "client_bound": sum(bool(t.get("bound_reason")) for t in trials),
            "errors": sum(len(t["errors"]) for t in trials),
            "first_error": next((e for t in trials for e in t["errors"]), None)}


def _by_round(trials: list[dict]) -> dict[int, float]:
    return {t["round"]: p for t in trials if (p := _p99_ms(t)) is not None}


def _trial_line(key: tuple, t: dict) -> str:
    kind, mode, c, tls = key
    hog = f" loop busy {t['hog'][0]:g}/{t['hog'][1]:g} ms" if t.get("hog") else ""
    pace = f" {1e3 / t['interval_ms']:g} tok/s" if t["interval_ms"] != 5 else ""
    return (f"r{t['round']} {kind} {mode} C={c}{' TLS' if tls else ''}{pace}{hog}: "
            f"p99 {_p99_ms(t)} ms ({t.get('unsure_frac', 0):.1%} of sends unsure), "
            f"others' CPU on the client's core {t.get('others_cpu_frac', '?')}, on the "
            f"server's {t.get('others_cpu_frac_server', '?')}, steal {t.get('steal_ms', '?')} ms, "
            f"GC {t['gc_pauses']} (max {t['gc_max_ms']} ms)")


def calibration(cells: dict[tuple, list[dict]]) -> dict:
    """Every ours trial against the truth: a paced trial's stamps were off
    when over 1% of its events were stamped more than half a token gap late
    (TCP merged their packets); floods are saturated by design. Rates of the
    rule (bench/measure/monitor.py) and of the old fixed-threshold flag."""
    rows = []
    for (kind, mode, c, tls), trials in cells.items():
        if kind != "ours":
            continue
        for t in trials:
            if mode == "flood":
                truth = "saturated"
            elif len(t["err"]):
                late = float(np.mean(t["err"] > t["interval_ms"] * 1e6 / 2))
                truth = "off" if late > 0.01 else "exact"
            else:
                continue
            rows.append((truth, bool(t.get("bound_reason")), bool(t.get("old_bound_reason")),
                         (kind, mode, c, tls), t))
    out: dict = {}
    for rule, i in (("new", 1), ("old", 2)):
        exact = [r for r in rows if r[0] == "exact"]
        hit = [r for r in rows if r[0] != "exact"]
        out[rule] = {"false_positives": sum(r[i] for r in exact), "exact_trials": len(exact),
                     "hits": sum(r[i] for r in hit), "off_or_saturated_trials": len(hit)}
    print("\n## client-bound calibration (ours' trials; truth from the server's send log)\n")
    for rule in ("new", "old"):
        o = out[rule]
        print(f"- {rule} rule: fired on {o['false_positives']} of {o['exact_trials']} trials whose"
              f" stamps were exact; on {o['hits']} of {o['off_or_saturated_trials']} whose stamps"
              " were off or that were floods")
    for truth, new, old, key, t in rows:
        if key[1] == "flood" and new and old:
            continue  # floods fire on both: not worth a line each
        print(f"  [{truth}; new {'fires' if new else 'quiet'}; old {'fires' if old else 'quiet'}]"
              f" {_trial_line(key, t)}; TBT {t.get('tbt_ms') and round(t['tbt_ms'], 3)} ms, read"
              f" delay p99 {_r(t.get('read_delay_p99_ms'))}, stall wait p99"
              f" {_r(t.get('stall_wait_p99_ms'))} ms; {t.get('bound_reason') or '-'}")
    return out


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def report(cells: dict[tuple, list[dict]], concs: list[int],
           redone: list[tuple[tuple, dict]]) -> dict:
    """Print the tables; return the summary (ours at 128 x 200 tok/s unless named).
    `redone`: attempts run again because other processes took the cores."""
    table = {k: summarise(v) for k, v in sorted(
        cells.items(), key=lambda kv: (kv[0][1], kv[0][3], kv[0][2], ORDER[kv[0][0]]))}
    cols = ["events_per_s", "p50_ms", "p99_ms", "p99_ms_by_round", "max_ms", "itl_p99_ms",
            "itl_max_ms", "cpu_s_per_100k", "lost", "client_bound", "errors"]
    print("| client | mode | C | TLS | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 4) + "|")
    for (kind, mode, c, tls), s in table.items():
        print(f"| {kind} | {mode} | {c} | {'yes' if tls else 'no'} | "
              + " | ".join(str(s[k]) for k in cols) + " |")
        if s["first_error"]:
            print(f"  first error: {str(s['first_error'])[-300:]}")
    print("\n## trials of ours, raw and the kernel probe over 0.1 ms at p99\n")
    for key, trials in cells.items():
        for t in trials:
            p = _p99_ms(t)
            if key[0] != "vllm" and key[1] == "paced" and p is not None and p > 0.1:
                print(f"  {_trial_line(key, t)}")

    if redone:
        print(f"\n## {len(redone)} attempt(s) run again: other processes took the cores\n")
        for key, t in redone:
            print(f"  {_trial_line(key, t)}")
    kept = [t for trials in cells.values() for t in trials]

    def get(kind, mode, c, tls, field):
        return table.get((kind, mode, c, tls), {}).get(field)

    def rounds(kind, tls=False):
        return _by_round(cells.get((kind, "paced", 128, tls), []))

    def ratio(a, b):
        return round(a / b, 3) if a is not None and b else None

    ours, ours_tls, raw_tls = rounds("ours"), rounds("ours", True), rounds("raw", True)
    kernel, vllm, raw = rounds("kernel"), rounds("vllm"), rounds("raw")
    tls_ratios = {r: ratio(ours_tls[r], raw_tls.get(r)) for r in sorted(ours_tls)}
    vllm_ratios = {r: ratio(ours[r], vllm.get(r)) for r in sorted(ours) if r in vllm}
    print("\n## ours at 128 x 200 tok/s, p99 by round (ms)\n")
    def others(kind: str, tls: bool, r: int) -> str:
        t = next((t for t in cells.get((kind, "paced", 128, tls), []) if t["round"] == r), {})
        return f"{t.get('others_cpu_frac', '?')}/{t.get('others_cpu_frac_server', '?')}"

    print("| round | ours | kernel probe | raw | vllm | ours TLS | raw TLS | TLS ratio | "
          "others' CPU, client/server core: ours; ours TLS |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in sorted(set(ours) | set(ours_tls)):
        print(f"| {r} | {ours.get(r)} | {kernel.get(r)} | {raw.get(r)} | {vllm.get(r, '–')} | "
              f"{ours_tls.get(r)} | {raw_tls.get(r)} | {tls_ratios.get(r)} | "
              f"{others('ours', False, r)}; {others('ours', True, r)} |")
    on = gpu_sampling(cells, ours)
    floods = {c: get("ours", "flood", c, False, "events_per_s_worst") for c in concs}
    lost = sum(s["lost"] for (kind, *_), s in table.items() if kind == "ours")
    worst = max(ours.values()) if ours else None
    worst_tls = max((v for v in tls_ratios.values() if v is not None), default=None)
    worst_vllm = max((v for v in vllm_ratios.values() if v is not None), default=None)
    fl = min((v for v in floods.values() if v), default=None)
    summary = {
        "p99_error_ms": get("ours", "paced", 128, False, "p99_ms"),
        "p99_error_ms_by_round": [ours[r] for r in sorted(ours)],
        "p99_error_ms_worst_round": worst,
        "p99_error_ms_median_round": get("ours", "paced", 128, False, "p99_ms_median_round"),
        "kernel_limit_p99_error_ms_by_round": [kernel[r] for r in sorted(kernel)],
        "p99_error_ms_tls": get("ours", "paced", 128, True, "p99_ms"),
        "p99_error_ms_tls_by_round": [ours_tls[r] for r in sorted(ours_tls)],
        "raw_tls_p99_error_ms_by_round": [raw_tls[r] for r in sorted(raw_tls)],
        "p99_error_ratio_vs_raw_tls_by_round": list(tls_ratios.values()),
        "p99_error_ratio_vs_raw_tls_worst_round": worst_tls,
        "vllm_p99_error_ms_by_round": [vllm[r] for r in sorted(vllm)],
        "p99_error_ratio_vs_vllm_worst_round": worst_vllm,
        "itl_distortion_p99_ms": get("ours", "paced", 128, False, "itl_p99_ms"),
        "lost_events": lost,
        "flood_events_per_s": fl, "flood_events_per_s_by_c": floods,
        "cpu_s_per_100k_paced_128": get("ours", "paced", 128, False, "cpu_s_per_100k"),
        "cpu_s_per_100k_paced_128_tls": get("ours", "paced", 128, True, "cpu_s_per_100k"),
        "client_bound": calibration(cells),
        "p99_error_ms_gpu_sampling": get("ours_gpu", "paced", 128, False, "p99_ms"),
        "p99_error_ms_gpu_sampling_by_round": [on[r] for r in sorted(on)],
        "p99_error_ms_gpu_sampling_worst_round": max(on.values()) if on else None,
        "attempts_run_again": len(redone),
        "kept_trials_still_disturbed": sum(disturbed(t) for t in kept),
    }
    summary["goals"] = {  # every round must hold: judged on the worst
        "p99_le_0.1ms_every_round": worst is not None and worst <= 0.1,
        "tls_le_1.25x_raw_every_round": worst_tls is not None and worst_tls <= 1.25,
        "ahead_of_vllm": None if worst_vllm is None else worst_vllm < 1,  # None: not compared
        "p99_le_0.1ms_every_round_gpu_sampling":  # None: not run (--gpu-sampling off)
            None if not on else max(on.values()) <= 0.1,
        "no_lost_events": lost == 0,
        "flood_ge_150k": fl is not None and fl >= 150_000}
    return summary


def gpu_sampling(cells: dict[tuple, list[dict]], off: dict[int, float]) -> dict[int, float]:
    """Print ours at 128 x 200 tok/s with the GPU sampler off and on, round by
    round (same run, same rounds); return the on figures by round."""
    trials = cells.get(("ours_gpu", "paced", 128, False), [])
    on = _by_round(trials)
    if not trials:
        return on
    print("\n## GPU telemetry sampling at 128 x 200 tok/s: stamp error p99 off vs on (ms)\n")
    print("| round | sampling off | sampling on | samples | sample wall p50/max ms | "
          "sampler CPU ms/s | others' CPU client/server core, on |")
    print("|---|---|---|---|---|---|---|")
    for t in sorted(trials, key=lambda t: t["round"]):
        r = t["round"]
        print(f"| {r} | {off.get(r)} | {on.get(r)} | {t.get('gpu_samples')} | "
              f"{t.get('sample_ms_p50')}/{t.get('sample_ms_max')} | "
              f"{t.get('sampler_cpu_ms_per_s')} | "
              f"{t.get('others_cpu_frac', '?')}/{t.get('others_cpu_frac_server', '?')} |")
    return on
