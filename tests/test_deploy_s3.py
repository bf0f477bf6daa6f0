"""The object-storage variants of the deployment (deploy/compose.s3.yaml, deploy/k8s/s3/), checked without
Docker or a cluster, like tests/test_deploy.py: env names through Settings, commands through the real parser,
references resolved, and the shared volume gone."""

from __future__ import annotations

import os

import pytest
import yaml
from test_deploy import (
    DEPLOY,
    K8S,
    ROOT,
    SETTINGS_ENV,
    InterpolationError,
    _argvs_in_shell,
    _k8s_docs,
    _parse,
    _pod_spec,
    as_env,
    env_file,
    kdsm_argvs,
    load_compose,
)

from offline_train.config import load_settings
from streamer.config import Settings

S3_ENV = {"KDSM_ARCHIVE__DIR", "KDSM_REGISTRY__STORE_DIR", "KDSM_STREAM__MODEL", "KDSM_STORAGE__S3_ENDPOINT",
          "KDSM_STORAGE__S3_ACCESS_KEY", "KDSM_STORAGE__S3_SECRET_KEY", "KDSM_ARCHIVE__SPOOL_DIR"}


@pytest.fixture(autouse=True)
def _no_kdsm_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("KDSM_") and "__" in name:
            monkeypatch.delenv(name)


def _settings_with(env: dict[str, str]) -> Settings:
    os.environ.update(env)
    try:
        return load_settings(Settings, ROOT / "configs" / "production.yaml")
    finally:
        for k in env:
            del os.environ[k]


def test_compose_s3_variant_puts_archive_and_models_in_the_bucket():
    c = load_compose("compose.yaml", "compose.s3.yaml")
    with pytest.raises(InterpolationError, match="S3_SECRET_KEY"):
        load_compose("compose.yaml", "compose.s3.yaml",
                     env={k: v for k, v in env_file(DEPLOY / ".env.example").items() if k != "S3_SECRET_KEY"})
    services = c["services"]
    assert {"seaweedfs", "s3-bucket"} <= set(services) and "s3-data" in c["volumes"]
    for name in ("bootstrap-model", "streamer", "retrain", "retrain-watch"):
        env = as_env(services[name]["environment"])
        assert S3_ENV <= set(env), name
        assert {k for k in env if k.startswith("KDSM_")} <= SETTINGS_ENV, name
        s = _settings_with({k: v for k, v in env.items() if k.startswith("KDSM_")})
        assert s.archive.dir == "s3://kdsm/archive" and s.registry.store_dir == "s3://kdsm/models"
        assert s.storage.s3_endpoint == "http://seaweedfs:8333"
        assert s.storage.s3_secret_key.get_secret_value() == "change-me-s3"
    for name, svc in services.items():
        for dep in (svc.get("depends_on") or {}):
            assert dep in services, f"{name} depends on unknown {dep}"
    assert services["bootstrap-model"]["depends_on"]["s3-bucket"]["condition"] == "service_completed_successfully"
    # the bootstrap script: skip when the registry has a current version, else train into the bucket and promote
    listing, train, add = (_parse(a) for a in kdsm_argvs(services["bootstrap-model"]))
    assert (listing.command, listing.action) == ("models", "list")
    streamer_model = as_env(services["streamer"]["environment"])["KDSM_STREAM__MODEL"]
    assert train.command == "train" and train.out == add.model == streamer_model == "s3://kdsm/bootstrap-model"
    assert add.promote


def test_k8s_s3_variant_replaces_the_shared_volume():
    base = _k8s_docs()
    folder = K8S / "s3"
    kust = yaml.safe_load((folder / "kustomization.yaml").read_text())
    assert kust["resources"][0] == "../"
    listed = set(kust["resources"][1:]) | {p["path"] for p in kust["patches"]}
    assert listed == {p.name for p in folder.glob("*.yaml")} - {"kustomization.yaml", "s3-secret.example.yaml"}
    # The Secret is created by hand: as a resource, every `kubectl apply -k` would put the placeholders back.
    own = [yaml.safe_load((folder / r).read_text()) for r in kust["resources"][1:]]
    assert not [d for d in own if d["kind"] == "Secret"]
    secret = yaml.safe_load((folder / "s3-secret.example.yaml").read_text())
    assert secret["kind"] == "Secret" and set(secret["stringData"].values()) == {"CHANGE-ME"}
    patches = [yaml.safe_load((folder / p["path"]).read_text()) for p in kust["patches"]]
    deleted = [p for p in patches if p.get("$patch") == "delete"]
    assert [(d["kind"], d["metadata"]["name"]) for d in deleted] == [("PersistentVolumeClaim", "kdsm-data")]
    patched = {(p["kind"], p["metadata"]["name"]): p for p in patches if p.get("$patch") != "delete"}
    # every workload that mounted the PVC is patched, and only resources that exist are
    users = {key for key, d in base.items() if d["kind"] in ("Deployment", "CronJob", "Job")
             and any("persistentVolumeClaim" in v for v in _pod_spec(d)["volumes"])}
    assert set(patched) == users
    for key, patch in patched.items():
        pod, base_pod = _pod_spec(patch), _pod_spec(base[key])
        vol = {v["name"]: v for v in pod["volumes"]}["data"]
        assert vol["persistentVolumeClaim"] is None and vol["emptyDir"] == {}
        ctr = pod["containers"][0]
        assert ctr["name"] in {c["name"] for c in base_pod["containers"]}, key
        env = {e["name"]: e for e in ctr["env"]}
        assert S3_ENV <= set(env) and set(env) <= SETTINGS_ENV, key
        for e in env.values():
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]
        plain = {k: str(e["value"]) for k, e in env.items() if "value" in e}
        s = _settings_with(plain)
        assert s.archive.dir.startswith("s3://") and s.registry.store_dir.startswith("s3://")
        assert s.stream.model.startswith("s3://") and s.archive.spool_dir.startswith("/var/lib/kdsm/")
        for script in ctr.get("args", []):
            for argv in _argvs_in_shell(script):
                args = _parse(argv)
                assert args.config == "/etc/kdsm/config.yaml"
                if args.command == "train":
                    assert args.data.startswith("s3://") and args.out == s.stream.model


def _aws_env(ctr: dict, secret: dict) -> dict[str, str]:
    """A container's AWS_* / BUCKET env, its keys taken from the kdsm-s3 Secret (checked against it)."""
    out = {}
    for e in ctr["env"]:
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"], e
            out[e["name"]] = f"secret:{ref['key']}"
        else:
            out[e["name"]] = str(e["value"])
    return out


def test_k8s_s3_variant_creates_the_bucket_its_workloads_use():
    """compose.s3.yaml's one-shot, in Kubernetes: a Job creates the bucket the s3:// settings name, at the same
    endpoint with the same keys, from a pinned public image; the bootstrap Job waits for it before training."""
    folder = K8S / "s3"
    kust = yaml.safe_load((folder / "kustomization.yaml").read_text())
    secret = yaml.safe_load((folder / "s3-secret.example.yaml").read_text())
    assert "s3-bucket-job.yaml" in kust["resources"]
    job = yaml.safe_load((folder / "s3-bucket-job.yaml").read_text())
    assert job["kind"] == "Job" and (job["kind"], job["metadata"]["name"]) not in _k8s_docs()
    assert job["metadata"]["namespace"] == "kdsm" and job["spec"]["backoffLimit"] >= 1
    pod = _pod_spec(job)
    assert pod["restartPolicy"] == "Never" and pod["securityContext"]["runAsNonRoot"] is True
    (ctr,) = pod["containers"]
    image = ctr["image"]
    assert image.startswith("amazon/aws-cli:") and image.split(":")[1][0].isdigit()  # pinned, not :latest
    env = _aws_env(ctr, secret)
    assert env["AWS_ACCESS_KEY_ID"] == "secret:access-key" and env["AWS_SECRET_ACCESS_KEY"] == "secret:secret-key"
    script = " ".join(ctr["args"])
    # create only when missing: a second apply (or a bucket made by hand) is not an error
    assert script == 'aws s3api head-bucket --bucket "$BUCKET" || aws s3 mb "s3://$BUCKET"'
    # the bucket and endpoint are the ones every workload's settings use
    for name in ("streamer-s3.yaml", "retrain-s3.yaml", "retrain-watch-s3.yaml", "bootstrap-s3.yaml"):
        wl = _pod_spec(yaml.safe_load((folder / name).read_text()))
        plain = {e["name"]: str(e["value"]) for e in wl["containers"][0]["env"] if "value" in e}
        assert plain["KDSM_STORAGE__S3_ENDPOINT"] == env["AWS_ENDPOINT_URL"], name
        s = _settings_with(plain)
        for uri in (s.archive.dir, s.registry.store_dir, s.stream.model):
            assert uri.startswith(f"s3://{env['BUCKET']}/"), (name, uri)
    # the bootstrap Job trains into the bucket: it first waits for it, with the same image, endpoint and keys
    boot = _pod_spec(yaml.safe_load((folder / "bootstrap-s3.yaml").read_text()))
    inits = {c["name"]: c for c in boot["initContainers"]}
    # the base Job's wait for train.parquet on the shared volume is deleted (that volume is an emptyDir here,
    # the file would never come); the strategic-merge delete names a container the base really has
    assert inits.pop("wait-for-history") == {"name": "wait-for-history", "$patch": "delete"}
    base_inits = [c["name"] for c in _pod_spec(_k8s_docs()[("Job", "kdsm-bootstrap-model")])["initContainers"]]
    assert base_inits == ["wait-for-history"]
    (wait,) = inits.values()
    assert wait["image"] == image and _aws_env(wait, secret) == env
    script = wait["args"][0]
    # the bucket, up to 5 min (60 x 5 s; then fail and let backoffLimit retry)...
    assert script.startswith('for i in $(seq 60); do aws s3api head-bucket --bucket "$BUCKET" && break; sleep 5; done;')
    assert 'aws s3api head-bucket --bucket "$BUCKET" || exit 1;' in script
    # ...then, with no limit, the history the train container reads (an object under its --data prefix, not the
    # prefix's own directory marker), unless the model it would train is there already
    train = next(_parse(a) for a in _argvs_in_shell(boot["containers"][0]["args"][0]) if a and a[0] == "train")
    assert train.data == f"s3://{env['BUCKET']}/history/" and train.out == f"s3://{env['BUCKET']}/bootstrap-model"
    assert "until aws s3api head-object --bucket \"$BUCKET\" --key bootstrap-model/metadata.json" in script
    assert "list-objects-v2 --bucket \"$BUCKET\" --prefix history/ --max-items 1" in script
    assert "in history/?*) true;; *) false;; esac; do sleep 10; done" in script
