#!/usr/bin/env bash
# Run HERE (the CPU machine), from the repository root, before a session's first device call.
#
# The device machine (docs/speed.md, "GPU") has PyTorch but not gymnasium or foolbox and can
# reach no package index, and ../shared/data does not travel with the working tree. This
# downloads the missing pure-Python wheels into .whl/ and copies the mushroom data into
# .gpu_data/, both git-ignored through .git/info/exclude, to be named in the call's `carry`:
#
#   run(command="bash experiments/gpu/session.sh", carry=[".whl", ".gpu_data"], timeout_s=560)
set -euo pipefail
cd "$(dirname "$0")/../.."
for path in /.whl/ /.gpu_data/; do
  grep -qxF "$path" .git/info/exclude 2>/dev/null || echo "$path" >> .git/info/exclude
done
mkdir -p .whl
# versions as installed here; all pure Python (py3-none-any), so one download serves Python 3.12 there
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl \
  gymnasium==1.4.0 farama-notifications==0.0.6 foolbox==3.3.4 eagerpy==0.30.0 \
  GitPython==3.2.1 gitdb==4.0.12 smmap==5.0.3
data="${UNCERTAIN_AGENTS_DATA:-../shared/data}"
if [ -d "$data/mushroom" ]; then
  mkdir -p .gpu_data && cp -r "$data/mushroom" .gpu_data/ && cp "$data/README.md" .gpu_data/ 2>/dev/null || true
fi
du -sh .whl .gpu_data 2>/dev/null
