"""Per-cell power, energy and throttle figures from scripted GPU telemetry."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from rundir import energy
from rundir.energy import CLOCKS_BELOW_APPLICATION, POWER_CAPPED, THERMAL, cell_energy

S = 1_000_000_000
STEP = S // 10  # 10 Hz


def _table(rows: list[dict]) -> pa.Table:
    cols = {k: [r.get(k) for r in rows] for k in
            ("t_ns", "gpu", "power_w", "energy_mj", "throttle_reasons")}
    return pa.table({
        "t_ns": pa.array(cols["t_ns"], pa.int64()), "gpu": pa.array(cols["gpu"], pa.int32()),
        "power_w": pa.array(cols["power_w"], pa.float64()),
        "energy_mj": pa.array(cols["energy_mj"], pa.int64()),
        "throttle_reasons": pa.array(cols["throttle_reasons"], pa.int64()),
    })


def _curve(gpus: int, seconds: float, power, bits=lambda g, t: energy.NVML_GPU_IDLE,
           counter: bool = True) -> pa.Table:
    """Samples every 0.1 s; power(g, t_s) in W; the counter is its exact integral
    for constant or linear power (trapezoid on each step)."""
    rows = []
    for g in range(gpus):
        mj = 5_000_000.0
        prev = None
        for i in range(int(seconds * 10) + 1):
            t = i * STEP
            w = power(g, t / S)
            if prev is not None:
                mj += (w + prev) / 2 * 0.1 * 1000
            prev = w
            rows.append({"t_ns": t, "gpu": g, "power_w": w, "throttle_reasons": bits(g, t / S),
                         "energy_mj": round(mj) if counter else None})
    return _table(rows)


def test_constant_power_exact_joules_per_token_counter_and_integral_agree():
    with_counter = _curve(2, 10, lambda g, t: 300.0)
    fig = cell_energy(with_counter, 1 * S, 6 * S, tokens=1000)
    assert fig.energy_source == "counter"
    assert fig.energy_j == pytest.approx(3000.0)  # 2 GPUs x 300 W x 5 s
    assert fig.j_per_token == pytest.approx(3.0)
    assert fig.avg_w == pytest.approx(600.0)
    assert fig.peak_w == pytest.approx(600.0)
    assert fig.tok_s_per_kw == pytest.approx(200 / 0.6)
    assert [g.avg_w for g in fig.gpus] == [pytest.approx(300.0)] * 2
    no_counter = cell_energy(_curve(2, 10, lambda g, t: 300.0, counter=False),
                             1 * S, 6 * S, tokens=1000)
    assert no_counter.energy_source == "integral"
    assert no_counter.energy_j == pytest.approx(fig.energy_j)


def test_ramp_with_window_edges_between_samples_integrates_exactly():
    ramp = _curve(1, 10, lambda g, t: 100.0 + 10.0 * t, counter=False)
    fig = cell_energy(ramp, int(2.05 * S), int(4.05 * S), tokens=522)
    exact = 100 * 2 + 5 * (4.05**2 - 2.05**2)  # integral of 100 + 10 t
    assert fig.energy_j == pytest.approx(exact, rel=1e-9)
    assert fig.j_per_token == pytest.approx(exact / 522, rel=1e-9)
    assert fig.peak_w == pytest.approx(140.5)
    counted = cell_energy(_curve(1, 10, lambda g, t: 100.0 + 10.0 * t),
                          int(2.05 * S), int(4.05 * S), tokens=522)
    assert counted.energy_source == "counter"
    assert counted.energy_j == pytest.approx(exact, abs=0.002)  # counter in whole mJ


def test_counter_running_backwards_falls_back_to_integral():
    table = _curve(1, 10, lambda g, t: 200.0)
    mj = table.column("energy_mj").to_pylist()
    mj[30:] = [v - 4_000_000 for v in mj[30:]]  # a driver reset at 3 s
    table = table.set_column(3, "energy_mj", pa.array(mj, pa.int64()))
    fig = cell_energy(table, 1 * S, 5 * S, tokens=100)
    assert fig.energy_source == "integral"
    assert fig.energy_j == pytest.approx(800.0)


def _episodes(g: int, t: float) -> int:
    bits = energy.NVML_GPU_IDLE | energy.NVML_APPLICATIONS_CLOCKS_SETTING  # ignored
    step = round(t * 10)
    if g == 0 and 20 <= step < 30:
        bits |= energy.NVML_SW_POWER_CAP
    if g == 0 and 50 <= step < 54:
        bits |= energy.NVML_HW_THERMAL_SLOWDOWN
    if g == 1 and 40 <= step < 44:
        bits |= energy.NVML_SW_THERMAL_SLOWDOWN
    if g == 1 and 45 <= step < 47:
        bits |= energy.NVML_HW_SLOWDOWN
    return bits


def test_throttle_shares_are_exact_and_flag_over_threshold():
    fig = cell_energy(_curve(2, 10, lambda g, t: 500.0, bits=_episodes), 1 * S, 6 * S, 10)
    gpu0, gpu1 = fig.gpus
    assert gpu0.throttle_shares[POWER_CAPPED] == pytest.approx(1.0 / 5)
    assert gpu0.throttle_shares[THERMAL] == pytest.approx(0.4 / 5)
    assert gpu1.throttle_shares[THERMAL] == pytest.approx(0.4 / 5)
    assert gpu1.throttle_shares[CLOCKS_BELOW_APPLICATION] == pytest.approx(0.2 / 5)
    # the cell: some GPU had the class active
    assert fig.throttle_shares == {POWER_CAPPED: pytest.approx(0.2),
                                   THERMAL: pytest.approx(0.16),
                                   CLOCKS_BELOW_APPLICATION: pytest.approx(0.04)}
    assert fig.throttle_flags == [POWER_CAPPED, THERMAL]
    quiet = cell_energy(_curve(1, 10, lambda g, t: 500.0), 1 * S, 6 * S, 10)
    assert quiet.throttle_flags == [] and set(quiet.throttle_shares.values()) == {0.0}


def test_no_telemetry_for_the_window_invents_nothing():
    table = _curve(2, 3, lambda g, t: 300.0)
    assert cell_energy(table.slice(0, 0), 0, S, 10) is None
    assert cell_energy(table, 5 * S, 6 * S, 10) is None  # samples end at 3 s
    one_gpu_short = table.filter(pa.compute.or_(
        pa.compute.equal(table.column("gpu"), 0), pa.compute.less(table.column("t_ns"), S)))
    fig = cell_energy(one_gpu_short, int(1.5 * S), int(2.5 * S), 10)
    assert fig.energy_j is None and fig.j_per_token is None and fig.peak_w is None
    no_tokens = cell_energy(table, S, 2 * S, tokens=0)
    assert no_tokens.energy_j == pytest.approx(600.0)
    assert no_tokens.j_per_token is None and no_tokens.tok_s_per_kw is None


def test_edges_held_within_slack_only():
    table = _curve(1, 3, lambda g, t: 100.0)
    late = cell_energy(table, int(2.8 * S), int(3.2 * S), 10)  # 0.2 s past the last sample
    assert late.energy_source == "integral" and late.energy_j == pytest.approx(40.0, abs=0.01)
    assert cell_energy(table, int(2.0 * S), int(3.0 * S) + energy.EDGE_SLACK_NS + 1, 10) is None


def test_bits_match_nvml():
    pynvml = pytest.importorskip("pynvml")
    assert energy.NVML_SW_POWER_CAP == pynvml.nvmlClocksThrottleReasonSwPowerCap
    assert energy.NVML_HW_SLOWDOWN == pynvml.nvmlClocksThrottleReasonHwSlowdown
    assert energy.NVML_SYNC_BOOST == pynvml.nvmlClocksThrottleReasonSyncBoost
    assert energy.NVML_SW_THERMAL_SLOWDOWN == pynvml.nvmlClocksThrottleReasonSwThermalSlowdown
    assert energy.NVML_HW_THERMAL_SLOWDOWN == pynvml.nvmlClocksThrottleReasonHwThermalSlowdown
    assert (energy.NVML_HW_POWER_BRAKE_SLOWDOWN
            == pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown)
    assert energy.NVML_DISPLAY_CLOCK_SETTING == pynvml.nvmlClocksThrottleReasonDisplayClockSetting
    assert energy.NVML_GPU_IDLE == pynvml.nvmlClocksThrottleReasonGpuIdle


def test_prefill_samples_add_up_and_weigh_by_length():
    table = _curve(1, 10, lambda g, t: 100.0 if t < 5 else 400.0,
                   bits=lambda g, t: energy.NVML_SW_POWER_CAP if t >= 8 else 0)
    fig = energy.spans_energy(table, [(1 * S, 2 * S), (6 * S, 9 * S)], tokens=1300)
    assert fig.energy_j == pytest.approx(100 + 1200)
    assert fig.j_per_token == pytest.approx(1.0)
    assert fig.avg_w == pytest.approx(1300 / 4)
    assert fig.peak_w == pytest.approx(400.0)
    assert fig.throttle_shares[POWER_CAPPED] == pytest.approx(1 / 4)
    assert fig.throttle_flags == [POWER_CAPPED]
    assert energy.spans_energy(table, [(1 * S, 2 * S), (20 * S, 21 * S)], 10) is None


# ---- the builder: figures on the run's pages, only where telemetry was taken ----


def _write_telemetry(run: Path, watts: float, bits: int) -> None:
    """Two GPUs at constant power over the whole run, 10 Hz, with the counter."""
    from rundir import contract, io
    req = io.read_table(run, contract.REQUESTS_FILE)
    t0 = min(req.column("send_ns").to_pylist()) - S
    t1 = max(v for v in req.column("end_ns").to_pylist() if v is not None) + S
    rows = []
    for i in range((t1 - t0) // STEP + 2):
        for g in range(2):
            rows.append({"t_ns": t0 + i * STEP, "gpu": g, "gpu_name": "Test GPU",
                         "power_w": watts, "energy_mj": round(1e6 + watts * i * 100),
                         "throttle_reasons": bits})
    schema = contract.GPU_METRICS_SCHEMA
    table = pa.table({f.name: pa.array([r.get(f.name) for r in rows], f.type) for f in schema})
    io.write_table(run, contract.GPU_METRICS_FILE, table)


def test_builder_shows_energy_only_for_runs_with_telemetry(tmp_path: Path) -> None:
    from rundir.io import read_run
    from site_builder.aggregate import aggregate_run
    from site_builder.publish import build_site
    from tests.support.chromium import parse_html
    from tests.support.synthetic_runs import make_measured_run

    data = tmp_path / "data"
    kw = dict(contexts=[1024], concurrency=[1, 2], prefill_contexts=[1024], prefill_repeats=2)
    hot = make_measured_run(data / "hot", run_id="hot", **kw)
    make_measured_run(data / "cold", run_id="cold", seed=1, **kw)
    _write_telemetry(hot, 250.0, energy.NVML_GPU_IDLE | energy.NVML_SW_POWER_CAP)

    agg = aggregate_run(read_run(hot))
    assert agg.telemetry
    for cell in agg.decode():
        assert cell.energy_source == "counter"
        assert cell.avg_w == pytest.approx(500.0)
        assert cell.j_per_token == pytest.approx(500.0 * cell.measured_s / cell.output_tokens)
        assert cell.throttle == [POWER_CAPPED]
    (prefill,) = agg.prefill()
    assert prefill.avg_w == pytest.approx(500.0) and prefill.j_per_token > 0
    cold = aggregate_run(read_run(data / "cold"))
    assert not cold.telemetry
    assert all(x.avg_w is None and x.throttle is None for x in cold.cells)

    site = tmp_path / "site"
    report = build_site(data, site)
    assert report.errors == []

    def table(slug: str) -> list[list[str]]:
        doc = parse_html((site / f"runs/{slug}/index.html").read_text(encoding="utf-8"))
        return doc.find("table", "measurements").rows()

    hot_rows, cold_rows = table("hot"), table("cold")
    assert hot_rows[0][-3:] == ["J/token", "Avg W", "Throttling"]
    assert hot_rows[0][:-3] == cold_rows[0]  # the published columns stay as they are
    assert cold_rows[0][-1] == "Measured for"
    decode_row = hot_rows[-1]
    assert decode_row[-2:] == ["500", "Power-capped"]
    hot_csv = (site / "runs/hot/cells.csv").read_text(encoding="utf-8").splitlines()[0]
    assert "j_per_token" in hot_csv and "throttle" in hot_csv
    cold_csv = (site / "runs/cold/cells.csv").read_text(encoding="utf-8").splitlines()[0]
    assert "j_per_token" not in cold_csv


def test_telemetry_is_part_of_the_runs_digest(tmp_path: Path) -> None:
    """New telemetry for a run already built must re-aggregate it, not reuse the cache."""
    from site_builder.load import content_digest
    from tests.support.synthetic_runs import make_measured_run

    run = make_measured_run(tmp_path / "r", run_id="r", contexts=[1024], concurrency=[1])
    before = content_digest(run)
    _write_telemetry(run, 100.0, 0)
    assert content_digest(run) != before


def test_cache_keeps_the_telemetry(tmp_path: Path) -> None:
    from rundir.io import read_run
    from site_builder.aggregate import AggregateCache, aggregate_run
    from tests.support.synthetic_runs import make_measured_run

    run = make_measured_run(tmp_path / "r", run_id="r", contexts=[1024], concurrency=[1])
    _write_telemetry(run, 100.0, 0)
    agg = aggregate_run(read_run(run), "d" * 64)
    cache = AggregateCache(tmp_path / "cache")
    cache.put(agg)
    back = cache.get("d" * 64, details=False)
    assert back.telemetry and back.cells == agg.cells
    assert back.decode()[0].throttle == [] and back.decode()[0].avg_w == pytest.approx(200.0)
