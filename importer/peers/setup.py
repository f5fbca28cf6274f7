"""Hardware, engine and model facts declared for an imported tool run (issue 36).

Why: a tool's file rarely names the hardware or the engine it measured, so an
imported run would sit under "unknown hardware" and never share a setup
(site_builder/setups.setup_key: model, variant, GPU name and count, engine)
with our own run of the same server. The maintainer who ran the tool knows
the setup and declares it at import, either by pointing at one of our run
directories of the same server (``--setup-from``) or field by field. The
facts are recorded as declared, never as measured (notes and the page say
so); the model name the tool sent stays as the served name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from rundir.contract import Engine, Hardware, Model


@dataclass(frozen=True)
class DeclaredSetup:
    """Facts to put in the imported run's run.yaml, and where they came from (one line)."""

    hardware: Hardware | None = None
    engine: Engine | None = None
    model: Model | None = None
    source: str = ""  # "run directory X" or "--hardware/--engine/--model"


class SetupError(ValueError):
    """A flag or run directory that cannot give the setup: one line."""


def from_run_dir(run_dir: Path) -> DeclaredSetup:
    """Hardware, engine and model of one of our run directories (its run.yaml)."""
    from rundir.contract import ContractError
    from rundir.io import read_run_info

    if not (Path(run_dir) / "run.yaml").is_file():
        raise SetupError(f"--setup-from {run_dir}: not a run directory (expected its run.yaml)")
    try:
        info = read_run_info(Path(run_dir))
    except (ContractError, OSError) as exc:
        raise SetupError(f"--setup-from {run_dir}: {' '.join(str(exc).split())}") from exc
    model = Model(name=info.model.name, repository_id=info.model.repository_id,
                  revision=info.model.revision, family=info.model.family)
    return DeclaredSetup(hardware=dataclasses.replace(info.hardware), engine=dataclasses.replace(info.engine),
                         model=model, source=f"run directory {info.run_id}")


def from_flags(hardware: str | None, gpu_count: int | None, engine: str | None,
               model: str | None) -> DeclaredSetup | None:
    """``--hardware TEXT --gpu-count N --engine NAME[=VERSION] --model NAME``; None when none given."""
    if hardware is None and gpu_count is None and engine is None and model is None:
        return None
    if gpu_count is not None and gpu_count < 1:
        raise SetupError(f"--gpu-count {gpu_count}: expected a whole number of at least 1")
    if gpu_count is not None and not hardware:
        raise SetupError("--gpu-count needs --hardware (the GPU it counts)")
    for flag, value in (("--hardware", hardware), ("--engine", engine), ("--model", model)):
        if value is not None and not value.strip():
            raise SetupError(f"{flag}: expected a non-empty name")
    eng = None
    if engine is not None:
        name, _, version = engine.partition("=")
        if not name.strip() or (_ and not version.strip()):
            raise SetupError(f"--engine {engine!r}: expected NAME or NAME=VERSION, e.g. vllm=0.11.0")
        eng = Engine(name=name.strip(), version=version.strip() or None)
    hw = Hardware(gpu_name=hardware.strip(), gpu_count=gpu_count) if hardware else None
    flags = [f for f, v in (("--hardware", hardware), ("--engine", engine), ("--model", model)) if v]
    return DeclaredSetup(hardware=hw, engine=eng, model=Model(name=model.strip()) if model else None,
                         source=", ".join(flags))


def combine(base: DeclaredSetup | None, flags: DeclaredSetup | None) -> DeclaredSetup | None:
    """``--setup-from`` with single flags on top (a flag wins for its own field)."""
    if base is None or flags is None:
        return base or flags
    return DeclaredSetup(hardware=flags.hardware or base.hardware, engine=flags.engine or base.engine,
                         model=flags.model or base.model, source=f"{base.source}, then {flags.source}")


__all__ = ["DeclaredSetup", "SetupError", "combine", "from_flags", "from_run_dir"]
