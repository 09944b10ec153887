"""Shared test configuration: one deterministic hypothesis profile and small fixtures."""

import numpy as np
import pytest
from hypothesis import settings

settings.register_profile("edgedp", derandomize=True, database=None, deadline=None, max_examples=40)
settings.load_profile("edgedp")


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
