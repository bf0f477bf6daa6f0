"""Print deploy/k8s/configmap.yaml: configs/production.yaml wrapped in the kdsm-config ConfigMap.

    python deploy/k8s/configmap.py > deploy/k8s/configmap.yaml

tests/test_deploy.py fails when the committed ConfigMap differs from this output.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEADER = """\
# The product config, mounted at /etc/kdsm/config.yaml. GENERATED from configs/production.yaml:
#   python deploy/k8s/configmap.py > deploy/k8s/configmap.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: kdsm-config
  namespace: kdsm
  labels:
    app.kubernetes.io/part-of: kdsm-stream
data:
  config.yaml: |
"""


def render(config_text: str) -> str:
    body = "".join("    " + line if line.strip() else "\n" for line in config_text.splitlines(keepends=True))
    return HEADER + body


if __name__ == "__main__":
    print(render((ROOT / "configs" / "production.yaml").read_text()), end="")
