"""The contract's shared vocabulary: file names, phases, statuses, purposes, counting
methods, metric names, the run.yaml parameter groups, and ContractError.

Separate because both other parts (runyaml.py, tables.py) and most readers use these
words and nothing else: a module that needs a status need not load the schemas.
"""

from __future__ import annotations

import re

SCHEMA_VERSION = 1

RUN_YAML = "run.yaml"
REQUESTS_FILE = "requests.parquet"
CELLS_FILE = "cells.parquet"
SERVER_METRICS_FILE = "server_metrics.parquet"
GPU_METRICS_FILE = "gpu_metrics.parquet"  # optional: GPU telemetry (absent: none taken)
# Raw rows of attempts a cell no longer reports (a re-measured Error cell, an
# attempt cut short): kept as evidence, same schema as requests.parquet, and
# never read by the builder.
SUPERSEDED_REQUESTS_FILE = "superseded_requests.parquet"
# Optional: the windows of decode cells measured more than once (`bench run --repeats k`),
# one row per (cell, window id 0..k-1); absent, every cell is one window (rundir/windows.py).
WINDOWS_FILE = "windows.parquet"
# Optional: per decode cell of a many-host run (`bench run --shard i/N`), each remote
# shard's clock offset from shard 0's and its bound; absent, every time is one host's.
CLOCK_OFFSETS_FILE = "clock_offsets.parquet"

# Phases of a cell.
PREFILL = "prefill"
DECODE = "decode"
# Traffic cells (`bench run --prefix-reuse`, `--turns`): keyed also by the optional
# key columns (TRAFFIC_KEY); a reader that knows only the matrix reads PREFILL and
# DECODE rows and leaves these to the parts that know them (docs/data-format.md).
PREFIX = "prefix"  # prompts that share a prefix with other requests, at a target reuse
CONVERSATION = "conversation"  # one turn of multi-turn conversations that resend their history
RATE = "rate"  # requests sent on a schedule at an offered rate (open loop), not C restarted streams
PHASES = (PREFILL, DECODE, PREFIX, CONVERSATION, RATE)
MATRIX_PHASES = (PREFILL, DECODE)
TRAFFIC_PHASES = (PREFIX, CONVERSATION, RATE)

# Cell statuses (see docs/methodology.md for what each means).
VALID = "valid"
OVER_CAPACITY = "over_capacity"
REQUESTS_QUEUED = "requests_queued"
LOOPED = "looped"
ERROR = "error"
PENDING = "pending"  # planned, not (yet) measured: an interrupted run
# Traffic cells only: the reuse the server delivered is off the target (or its two
# measures disagree), or nothing the server reports can tell it (never published Valid).
REUSE_OFF_TARGET = "reuse_off_target"
REUSE_UNVERIFIED = "reuse_unverified"
# Rate cells only: the client did not send the load its schedule asked for (too few
# requests sent, sends late, or gaps unlike the arrival process): never published Valid.
LOAD_NOT_DELIVERED = "load_not_delivered"
STATUSES = (VALID, OVER_CAPACITY, REQUESTS_QUEUED, LOOPED, ERROR, PENDING, REUSE_OFF_TARGET,
            REUSE_UNVERIFIED, LOAD_NOT_DELIVERED)

# A prefill sample the collector rejected (a prefix-cache hit) keeps its row; its
# `error` starts with this, so readers tell a rejection from a failure.
PREFILL_REJECTED_PREFIX = "rejected:"

# Why a request was sent.
PURPOSE_MEASURE = "measure"  # a saturating decode stream (clipped to the window)
PURPOSE_PREFIX_FILL = "prefix_fill"  # warms the prefix cache before a decode cell
PURPOSE_PREFILL = "prefill_sample"  # a cold request timed for prefill
PURPOSE_PRIME = "prefix_prime"  # puts a prefix group's shared prefix in the cache before a prefix cell
PURPOSE_REUSE = "reuse_sample"  # a measured request of a prefix cell
PURPOSE_TURN = "turn"  # a measured conversation turn (a turn `--turns` lists)
PURPOSE_TURN_FILL = "turn_fill"  # a turn between the listed ones: sent, kept, not measured
PURPOSE_ARRIVAL = "arrival"  # a rate cell's request, sent at its scheduled time
PURPOSES = (PURPOSE_MEASURE, PURPOSE_PREFIX_FILL, PURPOSE_PREFILL, PURPOSE_PRIME, PURPOSE_REUSE,
            PURPOSE_TURN, PURPOSE_TURN_FILL, PURPOSE_ARRIVAL)

# How a cell's chunk token counts were obtained. Readers show any other value
# as it is written (the column is free text), so older run directories stay readable.
# Without per-chunk usage each text chunk counts one token, a guess until the
# server confirms it; the value says how it did, or that nothing could.
COUNT_USAGE_CONTINUOUS = "usage_continuous"  # server's cumulative usage per chunk
COUNT_CHUNKS_USAGE = "chunks_usage"  # one per text chunk, agreeing with the server's final usage
COUNT_CHUNKS_TOKENIZED = "chunks_tokenized"  # ... agreeing with /tokenize of the streamed text
COUNT_CHUNKS_UNVERIFIED = "chunks_unverified"  # ... confirmed by nothing: never published Valid
TOKEN_COUNTING = (COUNT_USAGE_CONTINUOUS, COUNT_CHUNKS_USAGE, COUNT_CHUNKS_TOKENIZED,
                  COUNT_CHUNKS_UNVERIFIED)
# Written by collectors before the values above (one per text chunk, compared with
# the final usage of requests that completed, if any): read and shown as written.
# Also the stream parser's per-request method, before the cell's count is checked.
COUNT_CHUNKS = "chunks"
# Imported from another tool's per-request output (importer/peers; docs/data-format.md):
COUNT_PEER_CHUNKS = "peer_chunk_counts"  # the format's own cumulative count at each chunk
COUNT_PEER_CHUNKS_TOTAL = "peer_chunks_total"  # one per chunk, equal to the tool's per-request total
# The tool's per-request total spread over its chunks by rule (chunks that carried
# several tokens cannot be told apart): like COUNT_CHUNKS_UNVERIFIED, never published Valid.
COUNT_PEER_SPREAD = "peer_total_spread"
# Request tier: first and last token and the total only. A row's chunk lists then hold
# two stamps (first token: count 1, last token: the total), never per-chunk data: no
# time between tokens or windowed rate is computed from them.
COUNT_PEER_REQUEST = "peer_request_totals"
COUNT_PEER_AGGREGATE = "peer_aggregate"  # summary figures only: nothing counted by us
IMPORT_TOKEN_COUNTING = (COUNT_PEER_CHUNKS, COUNT_PEER_CHUNKS_TOTAL, COUNT_PEER_SPREAD,
                         COUNT_PEER_REQUEST, COUNT_PEER_AGGREGATE)
# Counts no check confirmed: a cell with one is never published Valid.
UNVERIFIED_COUNTING = (COUNT_CHUNKS_UNVERIFIED, COUNT_PEER_SPREAD)
# finish_reason of an imported request that succeeded where the tool kept no finish reason.
FINISH_NOT_RECORDED = "not_recorded"

SOURCE_MEASURED = "measured"
SOURCE_IMPORTED = "imported"

# Canonical server-metric names in server_metrics.parquet.
METRIC_RUNNING = "running"
METRIC_WAITING = "waiting"
METRIC_KV_USAGE = "kv_usage"
METRIC_GENERATION_TOKENS = "generation_tokens_total"
METRIC_PROMPT_TOKENS = "prompt_tokens_total"
METRIC_PREFIX_CACHE_HITS = "prefix_cache_hits_total"


class ContractError(ValueError):
    """A run directory does not meet the contract; the message is one line
    naming the file and the field."""


# Groups of run.yaml's `parameters` fields written only when set (runyaml.RunInfo.to_dict).
TRAFFIC_PARAMETERS = ("prefix_reuse", "turns", "traffic_concurrency", "rate", "arrivals",
                      "arrival_seed", "rate_cap", "rate_output_tokens", "rate_reuse")
PROMPT_PARAMETERS = ("prompt_source", "prompt_seed", "prompt_file_sha256")
# Written only when set (the run came from a collector image that was told its digest;
# the collector knew its own source revision).
PROVENANCE_PARAMETERS = ("collector_image", "collector_revision")
# `sha256:HEX` or `NAME@sha256:HEX`: a digest names the image's content; a tag does not.
IMAGE_DIGEST = re.compile(r"(?:[^\s@]+@)?sha256:[0-9a-f]{64}")
# A full git commit id (SHA-1: 40 hex, SHA-256 repositories: 64 hex), `-dirty` when the
# checkout it was built from had uncommitted changes: an abbreviation or a branch name
# could later name another commit.
SOURCE_REVISION = re.compile(r"(?:[0-9a-f]{40}|[0-9a-f]{64})(?:-dirty)?")
LENGTH_PARAMETERS = ("output_lengths", "input_lengths", "length_seed", "honor_eos", "temperature", "top_p")

# Fidelity tiers of an imported run: what its source kept of each request.
IMPORT_TIER_CHUNK = "chunk"  # every chunk's arrival stamp
IMPORT_TIER_GAP = "gap"  # start + TTFT + gaps: chunk stamps rebuilt
IMPORT_TIER_REQUEST = "request"  # first and last token times and counts only
IMPORT_TIER_AGGREGATE = "aggregate"  # summary figures only (as pages are imported)
IMPORT_TIERS = (IMPORT_TIER_CHUNK, IMPORT_TIER_GAP, IMPORT_TIER_REQUEST, IMPORT_TIER_AGGREGATE)

PEER_IMPORT_FIELDS = ("tool", "tool_version", "tier", "clock", "lost", "published", "definitions")
