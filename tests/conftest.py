"""Shared fixtures: real local services (Tansu broker, Redis) and a small trained model.

Services: if KDSM_TEST_KAFKA / KDSM_TEST_REDIS are set (``.ci/run`` starts
them), those are used; otherwise the session starts its own on free ports and
stops them at the end. No Kafka or Redis is mocked.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import numpy as np
import pytest

from streamer.dev import local_services


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory) -> str:
    if os.environ.get("KDSM_TEST_KAFKA"):  # started by deploy/local/run-tests.sh (CI)
        yield os.environ["KDSM_TEST_KAFKA"]
        return
    svc = local_services.Service("kafka", local_services.free_port(), tmp_path_factory.mktemp("kafka"))
    svc.start()
    yield svc.url
    svc.stop()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory) -> str:
    if os.environ.get("KDSM_TEST_REDIS"):
        yield os.environ["KDSM_TEST_REDIS"]
        return
    svc = local_services.Service("redis", local_services.free_port(), tmp_path_factory.mktemp("redis"))
    svc.start()
    yield svc.url
    svc.stop()


@pytest.fixture
def redis_client(redis_url):
    import redis

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def unique() -> str:
    """A unique suffix for topic, group and key names (Tansu is shared across tests)."""
    return uuid.uuid4().hex[:10]


def make_blobs(n: int = 1200, d: int = 6, n_out: int = 30, seed: int = 0):
    """Inliers from a correlated Gaussian with one heavy-tailed and one binary feature; planted far outliers."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d, d)) / np.sqrt(d)
    X = rng.normal(size=(n, d)) @ A + 0.2 * rng.normal(size=(n, d))
    X[:, 0] = rng.laplace(size=n)
    X[:, -1] = (rng.random(n) < 0.3).astype(float)
    out = rng.normal(size=(n_out, d)) * 0.5 + rng.choice([-6.0, 6.0], size=(n_out, d))
    out[:, -1] = rng.integers(0, 2, n_out)
    return X, out


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A small K-DSM artifact trained on ``make_blobs`` (features f0..f5), shared by the session."""
    from offline_train.config import ModelConfig, OptimConfig
    from offline_train.detector import KDSM

    X, _ = make_blobs()
    det = KDSM(model=ModelConfig(width=64, depth=2), train=OptimConfig(steps=400, seed=0)).fit(X)
    return det.save(tmp_path_factory.mktemp("model") / "tiny")
