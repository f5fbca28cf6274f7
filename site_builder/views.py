"""What a page says about a run: title, summary line, fact blocks, matrix, records.

Turns a validated RunInfo plus its aggregated cells into the plain values
the templates print, so the templates hold no logic beyond loops and the
index, CSV and JSON downloads describe a run with the same words.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from markupsafe import Markup

from rundir import contract, slugs, tails, words
from rundir.contract import RunInfo
from site_builder import formats, metrictable, throttle
from site_builder.aggregate import CellResult, RunAggregate
from site_builder.families import family_of
from site_builder.lengths import request_length_rows
from site_builder.prices import Price

_CODES = {
    "fixed_duration": "Fixed duration",
    "decode_warmup": "Measured during decode warm-up",
    "during_decode_warmup": "Measured during decode warm-up",
    "cold": "Cold requests",
    "cold_requests": "Cold requests",
    "separate": "Separate cold requests",
}


def humanize(code: str | None) -> str | None:
    """A parameter code as words: ``fixed_duration`` -> ``Fixed duration``."""
    if not code:
        return None
    if code in _CODES:
        return _CODES[code]
    if "_" in code and code == code.lower() and " " not in code:
        words = code.replace("_", " ")
        return words[:1].upper() + words[1:]
    return code


def model_name(info: RunInfo) -> str:
    """Display name: model.name, else the repository id's last part, else the served name."""
    m = info.model
    if m.name:
        return m.name
    if m.repository_id:
        return m.repository_id.rstrip("/").split("/")[-1]
    return m.served_name or "Unknown model"


def hardware_label(info: RunInfo) -> str:
    """``H200 SXM 141GB ×8``: GPU with per-GPU memory and count (×N only above one)."""
    h = info.hardware
    name = h.gpu_name or h.cpu or h.type or "unknown hardware"
    parts = [name]
    if h.gpu_name and h.vram_gb_per_gpu:
        parts.append(formats.vram_gb(h.vram_gb_per_gpu))
    if h.gpu_name and h.gpu_count and h.gpu_count > 1:
        parts.append(f"×{h.gpu_count}")
    return " ".join(parts)


# ---- percentile levels (the selector: templates/static/tails.js) -----------
# Every figure with tails is printed here at every level, in tails.LEVELS order,
# so the script only swaps texts the build formatted (it never formats a number).

TAIL_CHOICES: list[tuple[str, str]] = [
    (lv, "median (p50)" if lv == tails.DEFAULT_LEVEL else lv) for lv in tails.LEVELS]
# A header of the tables or the charts -> the figure whose tails it shows.
TAILED_HEADERS: dict[str, tails.TailMetric] = {
    m.header: tm for m in metrictable.TABLE if (tm := tails.BY_KEY.get(m.key)) is not None}
_TOTAL_NOTE = "Total tok/s is output across all simultaneous requests."


def rank_label(metric: tails.TailMetric, level: str) -> str:
    """The rank a level shows of a figure: p99 of a latency, p1 of a rate (its slow 1%)."""
    return "p" + f"{metric.rank(level):.1f}".rstrip("0").rstrip(".")


def level_header(header: str, level: str) -> str:
    """A header at a level: ``TTFT`` at the median, ``TTFT p99``, ``Per request tok/s p1``."""
    metric = TAILED_HEADERS.get(header)
    if metric is None or level == tails.DEFAULT_LEVEL:
        return header
    return f"{header} {rank_label(metric, level)}"


def header_levels(header: str) -> list[str] | None:
    """A header at every level, or None for a column without tails."""
    if header not in TAILED_HEADERS:
        return None
    return [level_header(header, lv) for lv in tails.LEVELS]


def cell_levels(metric: metrictable.Metric, cell: CellResult) -> list[str] | None:
    """A cell's figure at every level as the pages print it ("—": too few requests
    for that rank, never the median instead), or None for a figure without tails."""
    if metric.key not in tails.BY_KEY:
        return None
    return [metric.fmt(cell.tail(metric.key, lv)) for lv in tails.LEVELS]


def matrix_ttft_levels(cell: CellResult) -> list[str]:
    """A matrix cell's TTFT line at every level: ``1,317 ms TTFT``, ``2,040 ms TTFT p99``."""
    return [f"{formats.ttft(cell.tail('ttft_ms', lv))} {level_header('TTFT', lv)}"
            for lv in tails.LEVELS]


def latency_notes(median_note: str) -> list[str]:
    """All measurements' note at every level (the median's is the page's own)."""
    out = [median_note]
    for lv in tails.LEVELS[1:]:
        need = formats.count(tails.MIN_SAMPLES[lv])
        out.append(f"Latencies are the {lv} of each cell's requests (per request tok/s: its "
                   f"slow side, {rank_label(tails.PER_REQUEST, lv)}); {words.MISSING} where a "
                   f"cell has fewer than {need}. {_TOTAL_NOTE}")
    return out


def family_matrix_notes() -> list[str]:
    """The family page's note above its matrices, at every level."""
    return [f"total tok/s with {'median' if lv == tails.DEFAULT_LEVEL else lv} TTFT · rows are "
            "context length, columns are simultaneous requests" for lv in tails.LEVELS]


def sample_needs() -> list[str]:
    """What each rank above the median needs (rundir.tails.MIN_SAMPLES), as the
    pages write it: ``p90 10``, ``p95 20``, …"""
    return [f"{lv} {formats.count(n)}" for lv, n in tails.MIN_SAMPLES.items() if n > 1]


def sample_needs_text() -> str:
    """``p90 needs 10, p95 20, p99 100, p99.9 1,000``: the notes' parenthesis."""
    first, *rest = sample_needs()
    return ", ".join([first.replace(" ", " needs ", 1), *rest])


def level_notes() -> list[str]:
    """What the selector's choice means, at every level (empty at the median)."""
    out = [""]
    for lv in tails.LEVELS[1:]:
        slow = f"{100 * (1 - tails.QUANTILE[lv]):.1f}".rstrip("0").rstrip(".") + "%"
        out.append(f"{lv}: the slowest {slow} of each cell's requests; {words.MISSING} where "
                   f"fewer than {formats.count(tails.MIN_SAMPLES[lv])} requests")
    return out


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


@dataclass
class MatrixRow:
    context: int
    cells: list[CellResult]


@dataclass(frozen=True)
class Fall:
    """A headline figure's largest fall from a series' previous run, as its badge
    says it (site_builder/series.py finds it by site_builder/changes.py's rule)."""

    note: str  # "Total tok/s at 1K × 1 −13.4% vs vllm 0.29.0 (Sep 2, 2026)"
    established: bool
    why: str

    @property
    def label(self) -> str:
        return "regression" if self.established else "change not established"

    @property
    def title(self) -> str:
        """The full sentence (the badge's title, the run page's note)."""
        if self.established:
            return f"Regression: {self.note}"
        return f"Change not established: {self.note}; {self.why}"

    @property
    def badge_class(self) -> str:
        return "badge regression" if self.established else "badge"



@dataclass
class RunView:
    """One run as the pages present it."""

    info: RunInfo
    agg: RunAggregate
    slug: str
    source_dir: str = ""
    raw_files: list[tuple[str, int]] = field(default_factory=list)  # (name, bytes)
    price: Price | None = None  # its GPU's price (build-site --prices), else no cost
    slo: object = None  # the build's SLO for this run (site_builder/slo.RunSlo), set by publish
    # Its site-wide distinct name (site_builder/names.py), set by publish; the title until then.
    name: str = ""
    # Its history (site_builder/series.py), set by publish: the series' slug (empty: no
    # series), its previous and next run as (slug, name), and its headline's fall
    # against the previous run (a regression, or a change not established).
    series_slug: str = ""
    series_prev: tuple[str, str] | None = None
    series_next: tuple[str, str] | None = None
    regression: Fall | None = None
    # The comparison page of its server measured by several tools (site_builder/toolpages.py),
    # set by publish; empty: none.
    tool_compare: str = ""

    def __post_init__(self) -> None:
        self.name = self.name or self.title

    # ---- identity -------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self.info.run_id

    @property
    def imported(self) -> bool:
        return self.info.source == contract.SOURCE_IMPORTED

    @property
    def not_checked(self) -> bool:
        """Another tool's summary-only run: its cells hold the tool's figures, which nothing
        checked, so the page labels them "Not checked", never as passed (issue 36)."""
        imp = self.info.imported
        return imp is not None and imp.tool is not None and imp.tier == contract.IMPORT_TIER_AGGREGATE

    @property
    def throttling(self) -> throttle.ThrottleAnswer:
        """"Was it power-capped or throttled?", from its GPU telemetry (or why not known)."""
        peer = self.info.imported is not None and self.info.imported.tool is not None
        return throttle.answer(self.agg, imported=self.imported, peer=peer)

    @property
    def model(self) -> str:
        return model_name(self.info)

    @property
    def hardware(self) -> str:
        return hardware_label(self.info)

    @property
    def family(self) -> str:
        """The base model the run belongs to (site_builder/families.py): model pages group by it."""
        return family_of(self.model, self.info.engine.quantization, self.info.model.family)[0]

    @property
    def family_slug(self) -> str:
        """The family's slug: runs whose families share it share `models/<slug>.html`."""
        return slugs.slugify(self.family, "model")

    @property
    def variant(self) -> str:
        """The quantization / format the family was run in (``NVFP4``); empty when not stated."""
        return family_of(self.model, self.info.engine.quantization, self.info.model.family)[1]

    @property
    def title(self) -> str:
        return f"{self.model} on {self.hardware}"

    @property
    def short_label(self) -> str:
        """A legend label for comparison charts: hardware, engine, variant (quantization)."""
        e = self.info.engine
        bits = [self.hardware, " ".join(x for x in (e.name, e.version) if x), self.variant]
        return " · ".join(b for b in bits if b)

    @property
    def page(self) -> str:
        return f"runs/{self.slug}/index.html"

    @property
    def series_page(self) -> str:
        """Its series' page (`series/<slug>.html`), or empty when it is in no series."""
        return f"series/{self.series_slug}.html" if self.series_slug else ""

    # ---- summary line ---------------------------------------------------
    @property
    def engine_summary(self) -> str:
        e = self.info.engine
        return " · ".join(x for x in (e.name, e.version, e.quantization) if x)

    @property
    def decode_contexts(self) -> list[int]:
        planned = set(self.info.parameters.contexts)
        return sorted(planned | {x.context for x in self.agg.decode()})

    @property
    def levels(self) -> list[int]:
        planned = set(self.info.parameters.concurrency)
        return sorted(planned | {x.concurrency for x in self.agg.decode()})

    @property
    def prefill_contexts(self) -> list[int]:
        return sorted({x.context for x in self.agg.prefill()})

    @property
    def matrix_summary(self) -> str:
        ctx, lv = self.decode_contexts, self.levels
        if not ctx or not lv:  # a rate-only run (an imported tool's open loop) has no decode levels
            return ""
        ctx_range = formats.range_label([words.context_label(ctx[0]), words.context_label(ctx[-1])]
                                  if len(ctx) > 1 else [words.context_label(ctx[0])])
        lv_range = formats.range_label([str(lv[0]), str(lv[-1])] if len(lv) > 1 else [str(lv[0])])
        return (f"{_plural(len(ctx), 'context')} ({ctx_range}) × "
                f"{_plural(len(lv), 'concurrency level')} ({lv_range})")

    @property
    def prefill_summary(self) -> str:
        labels = [words.context_label(x) for x in self.prefill_contexts]
        return "prefill at " + ", ".join(labels) if labels else ""

    @property
    def byline(self) -> str:
        """``by @name dev import · Measured Sep 27, 2026, 19:59 UTC``, as published."""
        parts = []
        label = self.info.imported.byline_label if self.info.imported else None
        if self.info.submitter:
            parts.append(" ".join(["by @" + self.info.submitter.lstrip("@"), *filter(None, [label])]))
        elif label:
            parts.append(label)
        if self.info.measured_at:
            parts.append("Measured " + formats.published_datetime(self.info.measured_at))
        return " · ".join(parts)

    # ---- fact blocks ----------------------------------------------------
    @property
    def hardware_rows(self) -> list[tuple[str, str]]:
        h = self.info.hardware
        rows = [("Type", h.type), ("GPU", h.gpu_name)]
        if h.gpu_count and h.gpu_count > 1:
            rows.append(("GPU count", str(h.gpu_count)))
        if h.vram_gb_per_gpu:
            rows.append(("VRAM", formats.vram_block(h.vram_gb_per_gpu, h.gpu_count)))
        rows += [("CPU", h.cpu), ("OS", h.os), ("Driver", h.driver), ("CUDA", h.cuda)]
        return [(k, v) for k, v in rows if v]

    @property
    def engine_rows(self) -> list[tuple[str, str]]:
        e = self.info.engine
        rows = [("Engine", e.name), ("Version", e.version), ("Quantization", e.quantization),
                ("Backend", e.backend), ("Repository", e.repository), ("Build", e.build),
                ("Commit", e.commit)]
        return [(k, v) for k, v in rows if v]

    @property
    def run_rows(self) -> list[tuple[str, str]]:
        p, m, kv = self.info.parameters, self.info.model, self.info.kv_budget
        tool = None
        if p.tool_name:
            v = p.tool_version or ""
            tool = f"{p.tool_name} {v if v.startswith('v') or not v else 'v' + v}".strip()
        rows = [
            ("Served model", m.served_name),
            ("Revision", m.revision),
            ("Benchmark tool", tool),
            ("Tool revision", revision_label(p.collector_revision)),  # absent: such pages as they were
            ("Decode test", humanize(p.decode_test)),
            ("Prefill mode", humanize(p.prefill_mode)),
            ("Time per measurement", formats.param_seconds(p.duration_s) if p.duration_s else None),
            ("Max output", formats.tokens(p.max_output_tokens) if p.max_output_tokens else None),
            ("Max model length", formats.tokens(m.max_model_len) if m.max_model_len else None),
            ("Prompts", prompt_source_label(p)),  # absent for filler: such pages as they were
            *length_rows(p),  # none at the defaults: such pages as they were
            *request_length_rows(self.agg.lengths),  # none without per-request lengths
        ]
        if kv.tokens:
            how = f" ({kv.source})" if kv.source else ""
            rows.append(("KV cache", formats.tokens(kv.tokens) + how))
        return [(k, v) for k, v in rows if v]

    # ---- tables ---------------------------------------------------------
    def _placeholder(self, ctx: int, conc: int) -> CellResult:
        return CellResult(phase=contract.DECODE, context=ctx, concurrency=conc, status=contract.PENDING)

    @property
    def matrix(self) -> list[MatrixRow]:
        by_key = {(x.context, x.concurrency): x for x in self.agg.decode()}
        return [MatrixRow(ctx, [by_key.get((ctx, n)) or self._placeholder(ctx, n)
                                for n in self.levels]) for ctx in self.decode_contexts]

    @property
    def prefill_rows(self) -> list[CellResult]:
        return self.agg.prefill()

    @property
    def measurement_rows(self) -> list[CellResult]:
        return self.prefill_rows + [x for row in self.matrix for x in row.cells]

    def status_notes(self, cells: list[CellResult]) -> list[str]:
        """The notes explaining each status that appears in cells, in the seeds'
        order; the Error note says what those cells' reasons say. Another tool's
        summary-only run has one note: its cells were not checked."""
        if self.not_checked and cells:
            return [words.NOT_CHECKED_NOTE]
        notes = []
        for status in words.STATUS_NOTES:
            these = [x for x in cells if x.status == status]
            if these:
                note = words.status_note(status, [x.reason for x in these],
                                         on_pages=any(x.has_detail for x in these))
                notes += [note] if note else []
        return notes

    @property
    def has_tails(self) -> bool:
        """Whether its cells have percentiles (a measured run): its page gets the selector."""
        return any(x.tails for x in self.agg.cells)

    @property
    def any_client_bound(self) -> bool:
        return any(x.client_bound for x in self.agg.cells)

    # ---- headline numbers (index, model pages) --------------------------
    @property
    def single_stream(self) -> CellResult | None:
        """Decode tok/s of one request at a time at the smallest context measured."""
        ones = [x for x in self.agg.decode() if x.concurrency == 1 and x.has_numbers
                and x.total_tok_s is not None]
        return min(ones, key=lambda x: x.context) if ones else None

    @property
    def peak(self) -> CellResult | None:
        """The decode cell with the highest total tok/s (queued cells count: it is real output)."""
        cells = [x for x in self.agg.decode() if x.has_numbers and x.total_tok_s is not None]
        return max(cells, key=lambda x: x.total_tok_s or 0) if cells else None

    @property
    def peak_note(self) -> str:
        """The status word shown beside the peak when its cell is not Valid
        (``Requests queued``), as the run page's matrix marks that cell; else empty."""
        pk = self.peak
        return words.status_label(pk.status) if pk and pk.status != contract.VALID else ""

    @property
    def measured_date(self) -> str:
        """The day measured, for table columns: ``Sep 27, 2026`` (the byline's style)."""
        return formats.published_date(self.info.measured_at) if self.info.measured_at else ""

    @property
    def prefill_8k(self) -> CellResult | None:
        hits = [x for x in self.agg.prefill() if x.context // 1024 == 8 and x.has_numbers
                and x.total_tok_s is not None]
        return hits[0] if hits else None


def cell_title(x: CellResult) -> str:
    """``8K context × 16 requests at once`` / ``Prefill at 8K``."""
    if x.phase == contract.PREFILL:
        return f"Prefill at {words.context_label(x.context)} context"
    word = "request" if x.concurrency == 1 else "requests"
    return f"{words.context_label(x.context)} context × {x.concurrency} {word} at once"


@dataclass
class FamilyGroup:
    """All runs of one model family (site_builder/families.py), for its page `models/<slug>.html`."""

    name: str
    slug: str
    runs: list[RunView] = field(default_factory=list)

    @property
    def all_cells(self) -> list[CellResult]:
        return [x for r in self.runs for row in r.matrix for x in row.cells]

    @property
    def has_tails(self) -> bool:
        """Whether any of its runs has percentiles: the page gets the selector."""
        return any(r.has_tails for r in self.runs)

    @property
    def variants(self) -> list[str]:
        """The family's variants in the runs' order, each once (empty ones left out)."""
        return list(dict.fromkeys(r.variant for r in self.runs if r.variant))


def family_groups(runs: list[RunView]) -> list[FamilyGroup]:
    """Runs grouped by family slug (so case and separators never split a family),
    families in slug order, runs by hardware then variant. The family's name is
    the one most of its runs give, explicit `model.family` names first."""
    groups: dict[str, list[RunView]] = {}
    for r in runs:
        groups.setdefault(r.family_slug, []).append(r)
    out = []
    for slug in sorted(groups):
        members = sorted(groups[slug], key=lambda r: (r.hardware.lower(), r.variant.lower(),
                                                      r.run_id))
        names = ([r.family for r in members if (r.info.model.family or "").strip()]
                 or [r.family for r in members])
        out.append(FamilyGroup(max(names, key=names.count), slug, members))
    return out


__all__ = ["RunView", "MatrixRow", "FamilyGroup", "cell_title", "family_groups", "humanize",
           "model_name", "hardware_label"]


def length_rows(p: contract.Parameters) -> list[tuple[str, str]]:
    """The run's output length mix, EOS and sampling as the run page's details say them;
    none for a run at the defaults (fixed lengths, EOS ignored, the server's sampling)."""
    rows = []
    if p.output_lengths == "file":
        rows.append(("Output lengths", "file: each request's max_tokens its prompt item's reply length "
                     "in the file, at most the run's max output (items without a reply not used)"))
    elif p.output_lengths:
        seed = f", seed {p.length_seed}" if p.length_seed is not None else ""
        rows.append(("Output lengths", f"{p.output_lengths}{seed}: max_tokens drawn per request"))
    if p.input_lengths == "file":
        rows.append(("Input lengths", "rate cells: each prompt its file item's own length, at most the "
                     "cell's context"))
    elif p.input_lengths:
        seed = f", seed {p.length_seed}" if p.length_seed is not None else ""
        rows.append(("Input lengths", f"rate cells: {p.input_lengths} of the cell's context{seed}, drawn "
                     "per request; the context is the longest prompt, TTFT mixes prompt lengths"))
    if p.honor_eos:
        rows.append(("End of sequence", "honoured: requests could end before max_tokens, so "
                     "per-request tok/s mixes lengths (compare only runs that honoured EOS)"))
    if p.temperature is not None or p.top_p is not None:
        rows.append(("Sampling", "temperature " + _sampling(p.temperature) + ", top_p "
                     + _sampling(p.top_p)))
    return rows


def _sampling(value: float | None) -> str:
    return "server default" if value is None else f"{value:g}"


_SOURCE_WORDS = {"natural": "natural: English prose the tool generates",
                 "adversarial": "adversarial: random strings the tool generates"}


def prompt_source_label(p: contract.Parameters) -> str | None:
    """The run's prompt source as the run page says it (None: filler, said nowhere)."""
    if not p.prompt_source:
        return None
    if p.prompt_source.startswith("file:"):
        what = f"from the file {p.prompt_source[len('file:'):]}"
        if p.prompt_file_sha256:
            what += f" (SHA-256 {p.prompt_file_sha256})"
    else:
        what = _SOURCE_WORDS.get(p.prompt_source, p.prompt_source)
    seed = f", seed {p.prompt_seed}" if p.prompt_seed is not None else ""
    return f"{what}{seed}; cut or padded to each cell's context"



def revision_label(revision: str | None) -> Markup | None:
    """The collector's source revision as the run page says it: the commit's first 12 hex
    (what `git log` users read), `-dirty` kept, the whole id in the title to copy."""
    if not revision:
        return None
    commit, dirty, _ = revision.partition("-dirty")
    return Markup('<span title="{}">{}</span>').format(revision, commit[:12] + dirty)
