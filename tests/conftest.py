import os

import pytest
import torch

os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
torch.set_num_threads(max(1, min(2, torch.get_num_threads())))

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "cuda" in item.keywords or "cuda" in getattr(item, "callspec", type("", (), {"id": ""})).id.split("-"):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    """CLI commands set torch's thread count for their process; put it back after each test."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture
def regression_data():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(64, 3, generator=g) * 4 - 2
    y = torch.sin(x[:, :1]) + 0.5 * x[:, 1:2] + 0.1 * torch.randn(64, 1, generator=g)
    return x, y
