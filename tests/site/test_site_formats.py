"""Number formats exactly as the published pages print them."""

from __future__ import annotations

import math

import pytest

from rundir.words import context_label, tok_s, ttft
from site_builder import formats


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (6216.0, "6,216.0"),
        (8820.0, "8,820.0"),
        (2777.1, "2,777.1"),
        (203.9, "203.9"),
        (26.2, "26.2"),
        (9.9, "9.9"),
        (0.0, "0.0"),
        (17600.0, "17.6K"),
        (17649.0, "17.6K"),
        (32700.0, "32.7K"),
        (10000.0, "10K"),
        (9999.96, "10K"),  # rounds to 10,000.0, so it reads in K
        (12000.0, "12K"),
        (18650.0, "18.7K"),  # half up
        (999_949.0, "999.9K"),
        (1_250_000.0, "1.3M"),
        (2_000_000.0, "2M"),
    ],
)
def test_tok_s(value: float, text: str) -> None:
    assert tok_s(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(6216.0, "6,216"), (8820.0, "8,820"), (8808.4, "8,808"), (3299.0, "3,299"),
     (17600.0, "17.6K"), (32700.0, "32.7K"), (10000.0, "10K"), (9999.6, "10K")],
)
def test_tok_s_whole_for_the_prefill_list(value: float, text: str) -> None:
    assert tok_s(value, whole=True) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(56.0, "56 ms"), (81.0, "81 ms"), (137.4, "137 ms"), (1064.0, "1,064 ms"),
     (1317.0, "1,317 ms"), (79118.0, "79,118 ms"), (28621.0, "28,621 ms"), (465.5, "466 ms"),
     (4.84, "4.8 ms"), (9.96, "10 ms"), (0.4, "0.4 ms")],
)
def test_ttft(value: float, text: str) -> None:
    assert ttft(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(4.8, "4.8 ms"), (18.2, "18.2 ms"), (43.3, "43.3 ms"), (99.4, "99.4 ms"),
     (100.6, "100.6 ms"), (101.1, "101.1 ms"), (1234.56, "1,234.6 ms"), (5.25, "5.3 ms")],
)
def test_time_between_tokens_keeps_one_decimal_at_any_size(value: float, text: str) -> None:
    assert formats.tbt(value) == text


def test_durations_counts_and_averages() -> None:
    assert formats.seconds(30.0) == "30.0 s"
    assert formats.seconds(29.94) == "29.9 s"
    assert formats.seconds(29.96) == "30.0 s"
    assert formats.param_seconds(30.0) == "30 s"
    assert formats.param_seconds(7.5) == "7.5 s"
    assert formats.count(1648) == "1,648"
    assert formats.count(0) == "0"
    assert formats.count(83240) == "83,240"
    assert formats.average(127.4) == "127.4"
    assert formats.average(1.0) == "1.0"
    assert formats.tokens(4096) == "4,096 tokens"


@pytest.mark.parametrize("fn", [tok_s, ttft, formats.tbt, formats.seconds, formats.count,
                                formats.average, formats.tokens,
                                formats.param_seconds])
def test_missing_is_an_em_dash(fn) -> None:
    assert fn(None) == "—"
    assert fn(math.nan) == "—"


@pytest.mark.parametrize(
    ("tokens", "label"),
    [(8192, "8K"), (16384, "16K"), (131072, "128K"), (262144, "256K"),
     (262144 - 4096 - 64, "251K"), (257024, "251K"), (1024, "1K"), (1500, "1K"), (512, "512")],
)
def test_context_labels_are_whole_k_rounded_down(tokens: int, label: str) -> None:
    assert context_label(tokens) == label


def test_hardware_strings() -> None:
    assert formats.vram_block(141.0, 8) == "1128 GB (8 × 141 GB)"
    assert formats.vram_block(96.0, 8) == "768 GB (8 × 96 GB)"
    assert formats.vram_block(96.0, 1) == "96 GB"
    assert formats.vram_block(96.0, None) == "96 GB"
    assert formats.vram_gb(141.0) == "141GB"
    assert formats.vram_gb(79.6) == "79.6GB"


def test_percent_change_and_dates() -> None:
    assert formats.percent_change(110.0, 100.0) == "+10.0%"
    assert formats.percent_change(96.0, 100.0) == "−4.0%"
    assert formats.percent_change(100.0, 100.0) == "0.0%"
    assert formats.percent_change(1.0, 0.0) == "—"
    assert formats.percent_change(None, 1.0) == "—"
    assert formats.utc_datetime("2025-11-29T07:06:40Z") == "2025-11-29 07:06 UTC"
    assert formats.utc_datetime("2025-11-29T09:06:40+02:00") == "2025-11-29 07:06 UTC"
    assert formats.utc_datetime("2025-11-29") == "2025-11-29 UTC"
    assert formats.utc_datetime(None) == ""
    assert formats.range_label(["8K", "251K"]) == "8K–251K"


def test_formats_of_every_kind_are_read_from_one_module() -> None:
    """The builder reads every format from site_builder/formats.py (issue 19): the
    collector's shared ones are the same functions, the moved ones read as before."""
    assert formats.tok_s is tok_s and formats.ttft is ttft and formats.context_label is context_label
    assert [formats.file_size(n) for n in (None, 512, 1536, 5 * 1024**2, 3 * 1024**4)] == [
        "—", "512 B", "1.5 KB", "5.0 MB", "3,072.0 GB"]
    assert [formats.joules_3g(v) for v in (None, 0.4213, 12.34, 0.000512, 1234.0)] == [
        "—", "0.421", "12.3", "0.000512", "1.23e+03"]
    missing = [n for n in formats.__all__ if not hasattr(formats, n)]
    assert missing == []
