"""``bench import``: a published "Speed test matrix" page, saved as text, -> a run directory.

Imported runs have no raw data: cells.parquet carries the page's aggregates
in its ``pub_*`` columns and run.yaml says ``source: imported``. The parser
(:mod:`.parse`) is pure; :mod:`.write` is the only part that touches disk.
"""

from importer.parse import PageError, PublishedCell, PublishedPage, parse_page
from importer.write import (
    ImportResult,
    TargetError,
    import_file,
    run_id_for,
    write_run,
)

__all__ = [
    "ImportResult",
    "PageError",
    "PublishedCell",
    "PublishedPage",
    "TargetError",
    "import_file",
    "parse_page",
    "run_id_for",
    "write_run",
]
