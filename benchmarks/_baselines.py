"""What a user would aggregate runs with instead: pandas, polars and DuckDB.

benchmarks/builder_scale.py times `site_builder.aggregate.aggregate_run`
against these and checks that every one gives the same cell metrics (to
1e-9 relative): total, per-request and between-token speeds, TTFT, completed
requests and average active streams of each decode cell, and the prefill
speed, TTFT and sample count of each prefill cell, with the definitions of
docs/methodology.md. Each is written the way its tool is meant to be used
(pandas: explode and groupby; polars: expressions, `join_asof`; DuckDB: SQL
with `unnest`, window functions and ASOF joins), over the same loaded
Arrow tables the builder gets; converting them is part of each one's time.
They compute the cell metrics only, not the drill-down details the builder
also produces. polars and DuckDB come with the `bench` extra.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rundir import contract
from rundir.io import RunData

PUBLISHED = (contract.VALID, contract.REQUESTS_QUEUED)  # the statuses whose cells have numbers
DECODE_KEYS = ("output_tokens", "total_tok_s", "per_request_tok_s", "tbt_ms", "ttft_ms",
               "completed", "avg_active")
PREFILL_KEYS = ("total_tok_s", "ttft_ms", "completed")
MS_NS = 1_000_000  # the avg_active grid step


def _as_cells(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{"phase-context-concurrency": metrics} from one row per cell."""
    out = {}
    for row in rows:
        keys = PREFILL_KEYS if row["phase"] == contract.PREFILL else DECODE_KEYS
        out[f"{row['phase']}-{row['context']}-{row['concurrency']}"] = {k: row[k] for k in keys}
    return out


# --------------------------------------------------------------------------
# pandas: explode, groupby, filter
# --------------------------------------------------------------------------


def pandas_aggregate(data: RunData) -> dict[str, dict[str, Any]]:
    """Cell metrics of a measured run with pandas: explode, groupby, filter."""
    req = data.requests.to_pandas()
    req["req"] = np.arange(len(req))
    ch = req[["req", "chunk_ns", "chunk_tokens"]].explode(["chunk_ns", "chunk_tokens"])
    ch = ch.dropna().astype({"chunk_ns": "int64", "chunk_tokens": "int64"})
    ch["tokens"] = ch.groupby("req")["chunk_tokens"].diff().fillna(ch["chunk_tokens"])
    ch["tokens"] = ch["tokens"].astype("int64")
    first_tok = ch[ch["tokens"] > 0].groupby("req")["chunk_ns"].first()
    last_ns = ch.groupby("req")["chunk_ns"].last()
    req["first_tok"] = first_tok.reindex(req["req"]).to_numpy()
    req["stop"] = req["end_ns"].fillna(np.maximum(last_ns.reindex(req["req"]).fillna(-1),
                                                  req["send_ns"]))
    req["done"] = req["finish_reason"].notna() & req["error"].isna() & ~req["cancelled"]
    sm = data.server_metrics.to_pandas()
    waiting = sm[sm["name"] == contract.METRIC_WAITING].groupby("t_ns")["value"].sum()
    keys = ["phase", "context", "concurrency", "purpose"]
    ch = ch.merge(req[["req", *keys]], on="req")
    by_cell = {k: g for k, g in ch.groupby(keys)}
    reqs_by_cell = {k: g for k, g in req.groupby(keys)}
    out: dict[str, dict[str, Any]] = {}
    for cell in data.cells.to_pandas().itertuples():
        key = f"{cell.phase}-{cell.context}-{cell.concurrency}"
        if cell.status not in (contract.VALID, contract.REQUESTS_QUEUED):
            continue
        if cell.phase == contract.PREFILL:
            r = reqs_by_cell.get((cell.phase, cell.context, cell.concurrency, contract.PURPOSE_PREFILL))
            if r is None:
                r = req[(req["context"] == cell.context) & (req["purpose"] == contract.PURPOSE_PREFILL)]
            r = r[r["error"].isna() & r["first_tok"].notna() & (r["prompt_tokens"] > 0)]
            ttft = r["first_tok"] - r["send_ns"]
            ttft = ttft[ttft > 0]
            rate = r.loc[ttft.index, "prompt_tokens"] / (ttft / 1e9)
            out[key] = {"total_tok_s": rate.median(), "ttft_ms": (ttft / 1e6).median(),
                        "completed": len(ttft)}
            continue
        s, e = int(cell.window_start_ns), int(cell.window_end_ns)
        k = (cell.phase, cell.context, cell.concurrency, contract.PURPOSE_MEASURE)
        r, chunks = reqs_by_cell[k], by_cell[k]
        win = chunks[(chunks["chunk_ns"] >= s) & (chunks["chunk_ns"] <= e)]
        output = int(win["tokens"].sum())
        g = win[win["tokens"] > 0].groupby("req").agg(
            first_ns=("chunk_ns", "first"), last_ns=("chunk_ns", "last"),
            first_tokens=("tokens", "first"), total=("tokens", "sum"))
        after = g["total"] - g["first_tokens"]
        span = (g["last_ns"] - g["first_ns"]).astype("float64")
        ok = (span > 0) & (after > 0)
        ttft = ((r["first_tok"] - r["send_ns"]) / 1e6).dropna()
        completed = int((r["done"] & (r["end_ns"] >= s) & (r["end_ns"] <= e)).sum())
        grid = np.arange(s, e, 1_000_000, dtype=np.int64)
        if len(waiting) and waiting.index[0] <= e:
            held = waiting.reindex(grid, method="ffill").fillna(0.0).to_numpy()
            flight = (np.searchsorted(np.sort(r["send_ns"]), grid, side="right")
                      - np.searchsorted(np.sort(r["stop"].astype("int64")), grid, side="right"))
            active = float(np.clip(flight - held, 0, None).mean())
        else:
            on = r.dropna(subset=["first_tok"])
            lo = np.maximum(on["first_tok"], s)
            hi = np.minimum(on["end_ns"].fillna(last_ns.reindex(on["req"]).set_axis(on.index)), e)
            active = float((hi - lo).clip(lower=0).sum()) / (e - s)
        out[key] = {"output_tokens": output, "total_tok_s": output / ((e - s) / 1e9),
                    "per_request_tok_s": (after[ok] / (span[ok] / 1e9)).median(),
                    "tbt_ms": ((span[ok] / 1e6) / after[ok]).median(),
                    "ttft_ms": ttft.median(), "completed": completed, "avg_active": active}
    return out


# --------------------------------------------------------------------------
# polars: expressions, one frame per step
# --------------------------------------------------------------------------


def polars_aggregate(data: RunData) -> dict[str, dict[str, Any]]:
    """Cell metrics of a measured run with polars."""
    import polars as pl

    keys = ["phase", "context", "concurrency"]
    requests = pl.from_arrow(data.requests)
    chunks = (
        requests.select("request_id", "chunk_ns", "chunk_tokens")
        .explode("chunk_ns", "chunk_tokens")
        .drop_nulls("chunk_ns")
        .with_columns(tokens=pl.col("chunk_tokens").diff().over("request_id")
                      .fill_null(pl.col("chunk_tokens")))
    )
    per_request = chunks.group_by("request_id").agg(
        first_tok=pl.col("chunk_ns").filter(pl.col("tokens") > 0).min(),
        last_ns=pl.col("chunk_ns").max(),
    )
    req = requests.drop("chunk_ns", "chunk_tokens").join(per_request, on="request_id",
                                                         how="left").with_columns(
        stop=pl.coalesce("end_ns", pl.max_horizontal(pl.col("last_ns").fill_null(-1),
                                                     "send_ns")),
        done=pl.col("finish_reason").is_not_null() & pl.col("error").is_null()
        & ~pl.col("cancelled"),
        ttft_ns=pl.col("first_tok") - pl.col("send_ns"),
    )
    cells = pl.from_arrow(data.cells).filter(pl.col("status").is_in(PUBLISHED))

    prefill = (
        req.filter(pl.col("purpose") == contract.PURPOSE_PREFILL, pl.col("error").is_null(),
                   pl.col("first_tok").is_not_null(), pl.col("prompt_tokens") > 0,
                   pl.col("ttft_ns") > 0)
        .join(cells.filter(pl.col("phase") == contract.PREFILL).select(keys), on=keys)
        .group_by(keys)
        .agg(total_tok_s=(pl.col("prompt_tokens") / (pl.col("ttft_ns") / 1e9)).median(),
             ttft_ms=(pl.col("ttft_ns") / 1e6).median(), completed=pl.len())
    )

    windows = cells.filter(pl.col("phase") == contract.DECODE).select(
        *keys, s=pl.col("window_start_ns"), e=pl.col("window_end_ns"))
    measured = req.filter(pl.col("purpose") == contract.PURPOSE_MEASURE).join(windows, on=keys)
    inside = (chunks.join(measured.select("request_id", *keys, "s", "e"), on="request_id")
              .filter(pl.col("chunk_ns").is_between(pl.col("s"), pl.col("e"))))
    output = inside.group_by(keys).agg(output_tokens=pl.col("tokens").sum())
    streams = (
        inside.filter(pl.col("tokens") > 0)
        .group_by(*keys, "request_id")  # rows keep their order inside a group
        .agg(first_ns=pl.col("chunk_ns").first(), last_ns=pl.col("chunk_ns").last(),
             first_tokens=pl.col("tokens").first(), total=pl.col("tokens").sum())
        .with_columns(after=pl.col("total") - pl.col("first_tokens"),
                      span=(pl.col("last_ns") - pl.col("first_ns")).cast(pl.Float64))
        .filter(pl.col("span") > 0, pl.col("after") > 0)
        .group_by(keys)
        .agg(per_request_tok_s=(pl.col("after") / (pl.col("span") / 1e9)).median(),
             tbt_ms=((pl.col("span") / 1e6) / pl.col("after")).median())
    )
    per_cell = measured.group_by(keys).agg(
        ttft_ms=(pl.col("ttft_ns") / 1e6).median(),
        completed=(pl.col("done") & pl.col("end_ns").is_between(pl.col("s"), pl.col("e"))).sum(),
        overlap=(pl.min_horizontal(pl.col("end_ns").fill_null(pl.col("last_ns")), "e")
                 - pl.max_horizontal("first_tok", "s")).clip(lower_bound=0)
        .filter(pl.col("first_tok").is_not_null()).sum(),
    )

    # Average active streams: in flight minus the server's waiting gauge, on a
    # 1 ms grid, where the gauge was sampled by the window's end; else the
    # streams' time from first token to end inside the window.
    waiting = (pl.from_arrow(data.server_metrics).filter(pl.col("name") == contract.METRIC_WAITING)
               .group_by("t_ns").agg(held=pl.col("value").sum()).sort("t_ns"))
    first_gauge = waiting["t_ns"].min() if waiting.height else None
    events = (
        pl.concat([measured.select(*keys, t=pl.col("send_ns"), d=pl.lit(1)),
                   measured.select(*keys, t=pl.col("stop"), d=pl.lit(-1))])
        .group_by(*keys, "t").agg(pl.col("d").sum())
        .sort("t")
        .with_columns(flight=pl.col("d").cum_sum().over(keys))
    )
    grid = (windows.with_columns(t=pl.int_ranges("s", "e", MS_NS)).explode("t")
            .drop_nulls("t").sort("t"))
    gauged = (
        grid.join_asof(events.select(*keys, "t", "flight"), on="t", by=keys,
                       strategy="backward", check_sortedness=False)  # sorted by t above
        .join_asof(waiting, left_on="t", right_on="t_ns", strategy="backward")
        .group_by(keys)
        .agg(gauged=(pl.col("flight").fill_null(0) - pl.col("held").fill_null(0.0))
             .clip(lower_bound=0).mean())
    )
    overlap = pl.col("overlap") / (pl.col("e") - pl.col("s"))
    active = overlap if first_gauge is None else (
        pl.when(pl.col("e") >= first_gauge).then(pl.col("gauged")).otherwise(overlap))
    decode = (
        windows.join(output, on=keys, how="left").join(streams, on=keys, how="left")
        .join(per_cell, on=keys, how="left").join(gauged, on=keys, how="left")
        .with_columns(output_tokens=pl.col("output_tokens").fill_null(0))
        .with_columns(total_tok_s=pl.col("output_tokens") / ((pl.col("e") - pl.col("s")) / 1e9),
                      avg_active=active)
    )
    return _as_cells(prefill.to_dicts() + decode.to_dicts())


# --------------------------------------------------------------------------
# DuckDB: SQL over the Arrow tables
# --------------------------------------------------------------------------

DUCKDB_SQL = """
CREATE TEMP TABLE chunk AS
SELECT request_id, i, t, cum - coalesce(lag(cum) OVER (PARTITION BY request_id ORDER BY i), 0)
       AS tokens
FROM (SELECT request_id, unnest(chunk_ns) AS t, unnest(chunk_tokens) AS cum,
             unnest(range(len(chunk_ns))) AS i
      FROM requests);

CREATE TEMP TABLE req AS
SELECT r.phase, r.context, r.concurrency, r.request_id, r.purpose, r.send_ns, r.end_ns,
       r.prompt_tokens, r.error, p.first_tok, p.last_ns,
       coalesce(r.end_ns, greatest(coalesce(p.last_ns, -1), r.send_ns)) AS stop,
       r.finish_reason IS NOT NULL AND r.error IS NULL AND NOT r.cancelled AS done,
       p.first_tok - r.send_ns AS ttft_ns
FROM requests r
LEFT JOIN (SELECT request_id, min(t) FILTER (WHERE tokens > 0) AS first_tok, max(t) AS last_ns
           FROM chunk GROUP BY request_id) p USING (request_id);

CREATE TEMP TABLE win AS
SELECT phase, context, concurrency, window_start_ns AS s, window_end_ns AS e
FROM cells WHERE phase = 'decode' AND status IN ('valid', 'requests_queued');

CREATE TEMP TABLE measured AS
SELECT * FROM req JOIN win USING (phase, context, concurrency) WHERE purpose = 'measure';

-- For average active: streams in flight after each send or stop, the
-- waiting gauge, and each window's 1 ms grid. Tables, not CTEs: DuckDB
-- plans an ASOF join over CTEs of this size 100 times slower.
CREATE TEMP TABLE flight AS
SELECT phase, context, concurrency, t,
       sum(d) OVER (PARTITION BY phase, context, concurrency ORDER BY t) AS flight
FROM (SELECT phase, context, concurrency, t, sum(d) AS d
      FROM (SELECT phase, context, concurrency, send_ns AS t, 1 AS d FROM measured
            UNION ALL
            SELECT phase, context, concurrency, stop, -1 FROM measured)
      GROUP BY phase, context, concurrency, t);

CREATE TEMP TABLE waiting AS
SELECT t_ns, sum(value) AS held FROM server_metrics WHERE name = 'waiting' GROUP BY t_ns;

CREATE TEMP TABLE grid AS
SELECT phase, context, concurrency, unnest(range(s, e, 1000000)) AS t FROM win;
"""

DUCKDB_PREFILL = """
SELECT phase, context, concurrency,
       median(prompt_tokens / (ttft_ns / 1e9)) AS total_tok_s,
       median(ttft_ns / 1e6) AS ttft_ms, count(*) AS completed
FROM req JOIN cells USING (phase, context, concurrency)
WHERE phase = 'prefill' AND status IN ('valid', 'requests_queued')
  AND purpose = 'prefill_sample' AND error IS NULL AND first_tok IS NOT NULL
  AND prompt_tokens > 0 AND ttft_ns > 0
GROUP BY ALL
"""

DUCKDB_DECODE = """
WITH inside AS (
    SELECT m.phase, m.context, m.concurrency, c.request_id, c.i, c.t, c.tokens
    FROM chunk c JOIN measured m USING (request_id)
    WHERE c.t BETWEEN m.s AND m.e
), output AS (
    SELECT phase, context, concurrency, sum(tokens) AS output_tokens FROM inside GROUP BY ALL
), streams AS (
    SELECT phase, context, concurrency,
           sum(tokens) - arg_min(tokens, i) AS after,
           (max(t) - min(t))::DOUBLE AS span
    FROM inside WHERE tokens > 0 GROUP BY phase, context, concurrency, request_id
), speeds AS (
    SELECT phase, context, concurrency,
           median(after / (span / 1e9)) AS per_request_tok_s,
           median((span / 1e6) / after) AS tbt_ms
    FROM streams WHERE span > 0 AND after > 0 GROUP BY ALL
), per_cell AS (
    SELECT phase, context, concurrency, median(ttft_ns / 1e6) AS ttft_ms,
           count(*) FILTER (WHERE done AND end_ns BETWEEN s AND e) AS completed,
           sum(greatest(least(coalesce(end_ns, last_ns), e) - greatest(first_tok, s), 0))
               FILTER (WHERE first_tok IS NOT NULL) AS overlap
    FROM measured GROUP BY ALL
), gauged AS (
    SELECT g.phase, g.context, g.concurrency,
           avg(greatest(coalesce(ev.flight, 0) - coalesce(w.held, 0), 0)) AS gauged
    FROM grid g
    ASOF LEFT JOIN flight ev
        ON g.phase = ev.phase AND g.context = ev.context AND g.concurrency = ev.concurrency
       AND g.t >= ev.t
    ASOF LEFT JOIN waiting w ON g.t >= w.t_ns
    GROUP BY ALL
)
SELECT phase, context, concurrency,
       coalesce(output_tokens, 0) AS output_tokens,
       coalesce(output_tokens, 0) / ((e - s) / 1e9) AS total_tok_s,
       per_request_tok_s, tbt_ms, ttft_ms, completed,
       CASE WHEN e >= (SELECT min(t_ns) FROM waiting) THEN gauged
            ELSE overlap / (e - s) END AS avg_active
FROM win
LEFT JOIN output USING (phase, context, concurrency)
LEFT JOIN speeds USING (phase, context, concurrency)
LEFT JOIN per_cell USING (phase, context, concurrency)
LEFT JOIN gauged USING (phase, context, concurrency)
"""


def duckdb_aggregate(data: RunData) -> dict[str, dict[str, Any]]:
    """Cell metrics of a measured run with DuckDB SQL."""
    import duckdb

    with duckdb.connect() as con:
        con.register("requests", data.requests)
        con.register("cells", data.cells)
        con.register("server_metrics", data.server_metrics)
        con.execute(DUCKDB_SQL)
        rows = []
        for query in (DUCKDB_PREFILL, DUCKDB_DECODE):
            result = con.execute(query)
            names = [d[0] for d in result.description]
            rows += [dict(zip(names, row, strict=True)) for row in result.fetchall()]
    return _as_cells(rows)


BASELINES = {"pandas": pandas_aggregate, "polars": polars_aggregate, "duckdb": duckdb_aggregate}
