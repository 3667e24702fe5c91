#!/usr/bin/env bash
# `pip install --no-build-isolation .` as a user with their own torch runs it,
# then `import opt4store`, the CLI and the Python tests from another folder,
# against the installed package only.
#
#   tests/pip_install_check.sh [PYTHON]     (default: $OPT4STORE_PYTHON or
#                                            /usr/bin/python3)
#
# The install goes into a new virtual environment that also sees PYTHON's
# own site-packages (its torch, numpy, pytest), so nothing is installed into
# PYTHON's environment. PYTHON's environment must have scikit-build-core
# (and pybind11, or the system's pybind11-dev); Debian 12 packages no
# scikit-build-core, so `./build.sh test` does not run this check:
# bench/gpu_device.sh check does, and so can anyone whose PYTHON has it.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
PYTHON=${1:-${OPT4STORE_PYTHON:-/usr/bin/python3}}

log() { printf '[pip_install_check] %s\n' "$*" >&2; }
die() { printf '[pip_install_check] error: %s\n' "$*" >&2; exit 1; }

"$PYTHON" -c 'import torch' 2>/dev/null || die "$PYTHON cannot import torch"
"$PYTHON" -c 'import scikit_build_core' 2>/dev/null \
  || die "$PYTHON has no scikit-build-core (pip install scikit-build-core pybind11)"

work=$(mktemp -d /tmp/opt4store-pip.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$PYTHON" -m venv --system-site-packages "$work/venv"
py=$work/venv/bin/python
# --system-site-packages shows the base interpreter's packages; when PYTHON
# is itself a virtual environment, its own site-packages come in by a .pth.
"$PYTHON" -c 'import site, sysconfig; print("\n".join(dict.fromkeys(
    [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]] + site.getsitepackages())))' \
  > "$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/opt4store-parent-env.pth"

log "pip install --no-build-isolation . into $work/venv (torch $("$py" -c 'import torch; print(torch.__version__)'))"
"$py" -m pip install --no-build-isolation --no-deps --no-cache-dir . >"$work/pip.log" 2>&1 \
  || { tail -40 "$work/pip.log"; die "pip install failed (log above)"; }

cd "$work"
unset PYTHONPATH OPT4STORE_BUILD_DIR
installed=$("$py" -c 'import opt4store; print(opt4store.__file__)')
case "$installed" in
  "$work"/venv/*) log "import opt4store from $(pwd): $installed" ;;
  *) die "import opt4store found $installed, not the installed package" ;;
esac
"$work/venv/bin/opt4store" --help >/dev/null || die "the installed CLI does not run"
log "Python tests from $(pwd) against the installed package"
"$py" -m pytest -q -p no:cacheprovider "$repo/tests/python"
