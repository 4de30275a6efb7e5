import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # makes `tests.tiny_models:make_mlp` importable as a `module:callable` model
    sys.path.insert(0, str(ROOT))


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)
    yield
