#!/usr/bin/env bash
# Install the tools the test suite drives besides Python packages: Neovim, the real editor
# of tests/test_neovim.py (Debian/Ubuntu's `neovim` package; 0.7 or later), and what
# tests/test_vscode.py drives (code-server, chromium: tests/vscode/install.sh, into a cache
# outside the checkout, so a fresh clone does not install them again), and the extension's own
# npm packages (`npm ci`, as tests/test_vscode.py's npm_ready fixture would, with the same stamp).
# Idempotent: does nothing for a tool already installed.  Needs root (or passwordless
# sudo) and apt-get; otherwise it exits non-zero with one line saying why.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

install_nvim() {
    if command -v nvim >/dev/null 2>&1; then
        echo "install_test_tools: nvim already installed: $(command -v nvim) ($(nvim --version | head -n 1))"
        return 0
    fi

    if [ "$(id -u)" -eq 0 ]; then
        SUDO=()
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    else
        echo "install_test_tools: nvim is missing and installing it needs root: run 'sudo apt-get install -y neovim'" >&2
        exit 1
    fi

    if ! command -v apt-get >/dev/null 2>&1; then
        echo "install_test_tools: nvim is missing and there is no apt-get here: install Neovim (>= 0.7) by hand" >&2
        exit 1
    fi

    echo "install_test_tools: installing neovim with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    if ! { "${SUDO[@]}" apt-get update -qq && "${SUDO[@]}" apt-get install -y -qq --no-install-recommends neovim; } >&2; then
        echo "install_test_tools: 'apt-get install neovim' failed (see above)" >&2
        exit 1
    fi
    if ! command -v nvim >/dev/null 2>&1; then
        echo "install_test_tools: apt-get installed neovim but nvim is not on PATH" >&2
        exit 1
    fi
    echo "install_test_tools: installed $(command -v nvim) ($(nvim --version | head -n 1))"
}

install_extension_packages() {
    local repo stamp want
    repo="$(cd "$here/.." && pwd)"
    stamp="$repo/node_modules/.gradguard-npm-ci"
    want="$(sha256sum "$repo/package-lock.json" | cut -d' ' -f1)"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        echo "install_test_tools: the extension's npm packages are up to date"
        return 0
    fi
    if ! command -v npm >/dev/null 2>&1; then
        echo "install_test_tools: npm is not on PATH: the VS Code extension's build needs Node.js 20+ with npm" >&2
        exit 1
    fi
    if ! (cd "$repo" && npm ci --no-audit --no-fund >&2); then
        echo "install_test_tools: 'npm ci' failed (see above)" >&2
        exit 1
    fi
    printf '%s' "$want" > "$stamp"
    echo "install_test_tools: installed the extension's npm packages (npm ci)"
}

install_nvim
install_extension_packages
echo "install_test_tools: VS Code test tools: $(bash "$here/../tests/vscode/install.sh" | tail -n 1)"
