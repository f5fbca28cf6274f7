"""The run-directory contract shared by the collector and the site builder."""

from rundir.contract import SCHEMA_VERSION, ContractError, RunInfo
from rundir.io import RunData, read_run, write_run_info, write_table

__all__ = [
    "SCHEMA_VERSION",
    "ContractError",
    "RunData",
    "RunInfo",
    "read_run",
    "write_run_info",
    "write_table",
]
