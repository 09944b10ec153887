#!/usr/bin/env bash
# One edgedp-agent as a real aarch64 process (qemu-user) in a loopback ring of x86 agents.
#
#   scripts/arm64_agent.sh [arm64_agent.py options, e.g. --steps 20 --cpu cortex-a76]
#
# 1. An arm64 Debian bookworm root from Debian's packages: debootstrap's first stage only
#    (--foreign: its second stage, like `chroot`, needs to run arm64 programs, which this
#    works without — no binfmt_misc needed), then the unpacked-but-unconfigured packages
#    of the base set extracted and Python's standard library byte-compiled under qemu (what
#    python3.11's postinst would do).
# 2. The device install: the project's wheel plus numpy, pyzmq, msgpack and PyNaCl as
#    manylinux aarch64 wheels, installed by the host's pip into ROOT/opt/edgedp/site
#    (versions pinned to the host Python's, so both sides run the same numpy).
# 3. scripts/arm64_agent.py: imports, memory, numeric probe, and the ring runs (node 0 under
#    qemu-aarch64-static -L ROOT ROOT/usr/bin/python3.11 SITE/bin/edgedp-agent).
#
# Environment: ARM64_ROOT (/tmp/arm64-root), ARM64_WHEELS (/tmp/arm64-wheels), ARM64_WORK
# (/tmp/arm64-run), NATIVE_PY (REPO/.venv/bin/python: the operator's Python with the
# project's extras), MIRROR (http://deb.debian.org/debian), PIN (1: pin the device
# dependencies to NATIVE_PY's versions; 0: newest), REBUILD_ROOT (0; 1 starts the root over).
# Needs root for debootstrap (and apt-get if debootstrap or qemu-user-static are missing).
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
ROOT="${ARM64_ROOT:-/tmp/arm64-root}"
WHEELS="${ARM64_WHEELS:-/tmp/arm64-wheels}"
WORK="${ARM64_WORK:-/tmp/arm64-run}"
NATIVE_PY="${NATIVE_PY:-$REPO/.venv/bin/python}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
PIN="${PIN:-1}"
SITE="$ROOT/opt/edgedp/site"
QEMU=qemu-aarch64-static

say() { printf '== %s\n' "$*"; }

if ! command -v debootstrap >/dev/null || ! command -v "$QEMU" >/dev/null; then
    say "installing debootstrap and qemu-user-static"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap qemu-user-static
fi

guest_python() {  # an aarch64 python3.11 of ROOT under qemu-user
    env -i PATH=/usr/bin:/bin LANG=C.UTF-8 \
        LD_LIBRARY_PATH=/lib/aarch64-linux-gnu:/usr/lib/aarch64-linux-gnu \
        PYTHONNOUSERSITE=1 "$@"
}

# -- 1. the arm64 root ---------------------------------------------------------------------
if [[ "${REBUILD_ROOT:-0}" == 1 || ! -x "$ROOT/usr/bin/python3.11" ]]; then
    say "debootstrap (first stage) of an arm64 bookworm root in $ROOT"
    rm -rf "$ROOT"
    debootstrap --foreign --arch=arm64 --variant=minbase \
        --include=python3,python3-minimal,libpython3.11-stdlib bookworm "$ROOT" "$MIRROR"
    # The first stage extracts only the 'required' packages; the rest of the base set
    # (python3 and its libraries) is unpacked by the second stage, which cannot run here.
    # Unpack it the same way (keeping the merged-/usr symlinks /lib -> usr/lib, ...).
    for pkg in $(cat "$ROOT/debootstrap/base"); do
        deb=$(awk -v p="$pkg" '$1 == p { print $2 }' "$ROOT/debootstrap/debpaths")
        dpkg-deb --fsys-tarfile "$ROOT$deb" | tar -x --keep-directory-symlink -C "$ROOT"
    done
    say "byte-compiling the arm64 standard library under qemu (python3.11's postinst step)"
    guest_python "$QEMU" -L "$ROOT" "$ROOT/usr/bin/python3.11" \
        -m compileall -q "$ROOT/usr/lib/python3.11" >/dev/null || true
fi
guest_python "$QEMU" -L "$ROOT" "$ROOT/usr/bin/python3.11" \
    -c 'import platform, sys; print("guest:", platform.machine(), sys.version.split()[0])'

# -- 2. the device install -----------------------------------------------------------------
say "building the project wheel"
rm -rf "$WHEELS" && mkdir -p "$WHEELS/src"
# a copy of the work tree's files that git knows or would add (no stale build/ folder)
(cd "$REPO" && git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [[ -e "$f" ]] && cp --parents -t "$WHEELS/src" "$f"; done)
"$NATIVE_PY" -m pip wheel -q --no-deps -w "$WHEELS" "$WHEELS/src" 2>"$WHEELS/wheel.log" ||
    { cat "$WHEELS/wheel.log"; exit 1; }
rm -rf "$WHEELS/src"
WHEEL=$(ls "$WHEELS"/edgedp-*.whl)

# manylinux tags up to the root's glibc (pip's --platform does not imply older ones)
GLIBC_MINOR=$(awk '$1 == "libc6" { print $2 }' "$ROOT/debootstrap/debpaths" |
    sed -E 's/.*libc6_2\.([0-9]+).*/\1/')
PLATFORMS=(--platform manylinux2014_aarch64)
for m in $(seq 17 "$GLIBC_MINOR"); do PLATFORMS+=(--platform "manylinux_2_${m}_aarch64"); done
DEPS=(numpy pyzmq msgpack pynacl)
if [[ "$PIN" == 1 ]]; then
    mapfile -t DEPS < <("$NATIVE_PY" -c '
from importlib.metadata import version
for d in ("numpy", "pyzmq", "msgpack", "PyNaCl"):
    print(f"{d}=={version(d)}")')
fi
say "pip install --target $SITE (aarch64, cp311): $(basename "$WHEEL") ${DEPS[*]}"
rm -rf "$SITE"
"$NATIVE_PY" -m pip install -q --target "$SITE" "${PLATFORMS[@]}" --python-version 3.11 \
    --implementation cp --only-binary=:all: "$WHEEL" "${DEPS[@]}"
# console scripts name the host's interpreter: make them the device's
sed -i "1s|^#!.*python.*|#!/usr/bin/python3.11|" "$SITE"/bin/*
du -sh "$SITE"

# -- 3. the runs ---------------------------------------------------------------------------
say "runs (work folder $WORK)"
exec "$NATIVE_PY" "$REPO/scripts/arm64_agent.py" --root "$ROOT" --site "$SITE" --work "$WORK" "$@"
