"""The run-directory contract v1: the one definition both halves share.

A run directory holds `run.yaml` (who, what, how) and Parquet tables of raw
measurements. The collector writes it, the builder reads it; neither knows
the other. Everything a reader may rely on is declared here, so a change to
the format is a change to this package (and `docs/data-format.md`).

The contract is one package of three parts, one concern each; every public name
of each is importable from here, as it was from the one module (`rundir.contract`):

- names.py: the shared vocabulary (file names, phases, statuses, purposes, token
  counting, metric names, parameter groups) and ContractError;
- runyaml.py: run.yaml's dataclasses and their validating reader;
- tables.py: the Parquet schemas and the table checks.
"""

# Re-exported whole, so that no reader changes its imports and a name added to a part
# is the contract's at once.
from rundir.contract.names import *  # noqa: F403
from rundir.contract.runyaml import *  # noqa: F403
from rundir.contract.tables import *  # noqa: F403
