"""Shared fixtures: real local services (Tansu broker, Redis, SeaweedFS S3) and a small trained model.

Services: if KDSM_TEST_KAFKA / KDSM_TEST_REDIS / KDSM_TEST_S3 are set
(``.ci/run`` starts them), those are used; otherwise the session starts its
own on free ports (SeaweedFS only when a test asks for it) and stops them at
the end. No Kafka, Redis or S3 is mocked.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import numpy as np
import pytest

from streamer.dev import local_services


def _service(name: str, env: str, tmp_path_factory, timeout: float = 20.0):
    """The URL of the service CI started (``env``, set by deploy/local/run-tests.sh), else one of our own."""
    if os.environ.get(env):
        yield os.environ[env]
        return
    svc = local_services.Service(name, local_services.free_port(), tmp_path_factory.mktemp(name)).start(timeout)
    yield svc.url
    svc.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory) -> str:
    yield from _service("kafka", "KDSM_TEST_KAFKA", tmp_path_factory)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory) -> str:
    yield from _service("redis", "KDSM_TEST_REDIS", tmp_path_factory)


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory) -> str:
    """http://host:port of a SeaweedFS S3 server with the dev credentials and the buckets of ``local_services``."""
    yield from _service("s3", "KDSM_TEST_S3", tmp_path_factory, timeout=60)


@pytest.fixture
def s3_root(s3_endpoint, monkeypatch, unique) -> str:
    """A fresh ``s3://kdsm/<unique>`` prefix; this process and its child processes reach it through KDSM_STORAGE__*."""
    from offline_train import storage
    from offline_train.config import StorageConfig

    env = {"KDSM_STORAGE__S3_ENDPOINT": s3_endpoint, "KDSM_STORAGE__S3_ACCESS_KEY": local_services.S3_ACCESS_KEY,
           "KDSM_STORAGE__S3_SECRET_KEY": local_services.S3_SECRET_KEY}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    storage.configure(StorageConfig(s3_endpoint=s3_endpoint, s3_access_key=local_services.S3_ACCESS_KEY,
                                    s3_secret_key=local_services.S3_SECRET_KEY))
    yield f"s3://kdsm/{unique}"
    storage.configure(StorageConfig())


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
