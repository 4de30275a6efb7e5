import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # makes `tests.tiny_models:make_mlp` importable as a `module:callable` model
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """One real run of the whole workflow on the tiny config, shared by the tests that read its results."""
    from tests.helpers import TINY, snakemake

    work = tmp_path_factory.mktemp("tiny")
    proc = snakemake("--configfile", str(TINY), "--cores", "1", cwd=work)
    (work / "snakemake.out").write_text(proc.stderr)  # Snakemake logs to stderr, in order
    return work


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)
    yield
