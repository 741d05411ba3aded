"""Latency through the real language server: open -> diagnostics and edit -> diagnostics.

    python bench/bench_lsp.py [--edits N] [--file PATH]
    python bench/bench_lsp.py --workspace DIR [--opens N]

Starts `python -m gradguard lsp` over stdio, opens a ~2,000-line training script (by
default the corpus cases joined into one module: real training code with real bugs) and
measures how long until the diagnostics for that version arrive; then makes N small edits
(a number changed inside the file, one keystroke each, waiting for each version's
diagnostics) and reports p50/p95, the same for a line typed in one character at a time
(most of its texts do not parse), and the peak resident memory of the server and its worker
processes (Linux).  The same run times `ast.parse` and the analysis of the text in this
process as baselines, so the figures can be read as ratios on any machine.
With --workspace, the server's root is DIR (a large project) and it opens, one after the
other, N of DIR's training scripts (files that call a backward, whose imports of DIR's own
modules are followed): the time to each file's first diagnostics, against `ast.parse` of it.
It only reports: timings depend on the machine.
"""
from __future__ import annotations

import argparse
import ast
import asyncio
import json
import os
import sys
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "server"))

from gradguard.analysis import run as analyse  # noqa: E402
from gradguard.api import iter_python_files  # noqa: E402
from gradguard.encoding import decode  # noqa: E402
from gradguard.engine.binder import BACKWARD  # noqa: E402

import server_memory  # noqa: E402  (bench/)

CORPUS = REPO.parent / "shared" / "corpus"


def dense_script(lines: int = 2000) -> str:
    """The worst case: the corpus cases joined into one module (a training loop every ~70
    lines, all run at module level), cut to `lines` lines."""
    parts = []
    for case in json.loads((CORPUS / "manifest.json").read_text()):
        parts.append((CORPUS / case["file"]).read_text().replace('if __name__ == "__main__":', "if True:"))
    return "\n".join("\n".join(parts).splitlines()[:lines]) + "\n"


MODEL = """

class Block{i}(nn.Module):
    \"\"\"Residual block variant {i}.\"\"\"

    def __init__(self, dim, hidden=64, dropout=0.1):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)
        self.scale = nn.Parameter(torch.ones(dim) * 0.{i})

    def forward(self, x, mask=None):
        h = self.norm(x)
        h = F.gelu(self.fc1(h))
        if mask is not None:
            h = h.masked_fill(mask, 0.0)
        h = self.drop(self.fc2(h))
        return x + self.scale * h


def make_block{i}(dim, depth=2):
    layers = [Block{i}(dim) for _ in range(depth)]
    return nn.Sequential(*layers)


def block{i}_stats(model):
    total = 0
    for p in model.parameters():
        total += p.numel()
    return {{"params": total, "name": "block{i}"}}
"""

TRAIN = """

def train_epoch(model, loader, optimizer, scaler=None, clip=1.0):
    model.train()
    running = 0.0
    for step, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        out = model(x)
        loss = F.mse_loss(out, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        running += loss.item()
    return running / max(1, len(loader))


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    total = 0.0
    for x, y in loader:
        total += F.mse_loss(model(x), y).item()
    return total / max(1, len(loader))


def main(epochs=3, dim=16):
    torch.manual_seed(0)
    model = nn.Sequential(make_block0(dim), make_block1(dim), nn.Linear(dim, dim))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = [(torch.randn(8, dim), torch.randn(8, dim)) for _ in range(4)]
    hidden = torch.zeros(8, dim)
    for epoch in range(epochs):
        loss = train_epoch(model, loader, optimizer)
        val = evaluate(model, loader)
        print(epoch, loss, val)


if __name__ == "__main__":
    main()
"""


def typical_script(lines: int = 2000) -> str:
    """A typical large training script: many model variants and helpers, one training loop."""
    text = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
    i = 0
    while text.count("\n") + TRAIN.count("\n") < lines - MODEL.count("\n"):
        text += MODEL.format(i=i)
        i += 1
    return text + TRAIN


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(text: str, edits: int) -> dict:
    client = LanguageClient("bench", "0")
    arrived: dict[int, float] = {}
    wake = asyncio.Event()

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def diagnostics(ls, params: types.PublishDiagnosticsParams):
        arrived[params.version] = time.perf_counter()
        wake.set()

    @client.feature(types.WINDOW_LOG_MESSAGE)
    def log(ls, params):  # a text that does not parse is logged: not this report's to print
        pass

    env = dict(os.environ, PYTHONPATH=str(REPO / "server"))
    await client.start_io(sys.executable, "-m", "gradguard", "lsp", env=env)
    await client.initialize_async(types.InitializeParams(capabilities=types.ClientCapabilities()))
    client.initialized(types.InitializedParams())
    uri = "file:///tmp/gradguard-bench/train.py"

    async def until(version: int) -> float:
        while version not in arrived:
            wake.clear()
            await asyncio.wait_for(wake.wait(), 60)
        return arrived[version]

    start = time.perf_counter()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    opened = await until(1) - start
    lines = text.splitlines()
    row = next(i for i, line in enumerate(lines) if "manual_seed(0)" in line)
    col = lines[row].index("0")
    latencies, typed = [], []

    async def change(version: int, start: tuple, end: tuple, new: str) -> float:
        sent = time.perf_counter()
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(start=types.Position(line=start[0], character=start[1]),
                                  end=types.Position(line=end[0], character=end[1])), text=new)]))
        return await until(version) - sent
    for version in range(2, edits + 2):
        latencies.append(await change(version, (row, col), (row, col + 1), str(version % 10)))
    # a line typed one character at a time after that one: most of its texts do not parse
    version = edits + 2
    at = (row + 1, 0)
    for k, ch in enumerate(TYPED_LINE):
        typed.append((await change(version, at, at, ch), _parses(lines, row + 1, TYPED_LINE[:k + 1])))
        at = (at[0] + 1, 0) if ch == "\n" else (at[0], at[1] + 1)
        version += 1
    peak = server_memory.peak(client._server.pid) if client._server is not None else None
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return {"open": opened, "edits": latencies, "typed": typed, "peak": peak}


TYPED_LINE = "    scale = torch.ones(dim) * 0.5\n"


def _parses(lines: list[str], row: int, typed: str) -> bool:
    """Whether the text with `typed` inserted at the start of line `row` parses."""
    try:
        ast.parse("\n".join(lines[:row]) + "\n" + typed + "\n".join(lines[row:]) + "\n")
    except SyntaxError:
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edits", type=int, default=60)
    parser.add_argument("--file", type=Path, help="a script to use instead of the generated ones")
    parser.add_argument("--workspace", type=Path, help="a project to open training scripts of")
    parser.add_argument("--opens", type=int, default=20, help="with --workspace: how many scripts to open")
    args = parser.parse_args()
    if args.workspace:
        return report_workspace(args.workspace.resolve(), args.opens)
    inputs = {"given": args.file.read_text()} if args.file else {
        "typical (model variants, helpers, one training loop)": typical_script(),
        "dense (a training loop every ~70 lines)": dense_script()}
    for title, text in inputs.items():
        print(f"== {title}")
        report(text, args.edits)
    print("goal: p50 at most 30 ms, p95 at most 60 ms")
    return 0


def report(text: str, edits: int) -> None:
    t0 = time.perf_counter()
    ast.parse(text)
    parse = time.perf_counter() - t0
    t0 = time.perf_counter()
    analyse(text)
    analysis = time.perf_counter() - t0
    result = asyncio.run(measure(text, edits))
    p50, p95 = percentile(result["edits"], 0.5), percentile(result["edits"], 0.95)
    ms = 1000
    print(f"script:            {len(text.splitlines())} lines")
    print(f"baseline ast.parse {parse * ms:7.1f} ms   in-process analysis {analysis * ms:7.1f} ms")
    print(f"open -> diagnostics {result['open'] * ms:6.1f} ms  ({result['open'] / parse:.1f}x ast.parse)")
    print(f"edit -> diagnostics p50 {p50 * ms:6.1f} ms  ({p50 / parse:.1f}x ast.parse)   "
          f"p95 {p95 * ms:6.1f} ms  ({p95 / parse:.1f}x)   over {len(result['edits'])} edits")
    for title, times in (("typing a line", [t for t, _ in result["typed"]]),
                         ("  of which parse", [t for t, parses in result["typed"] if parses])):
        t50, t95 = percentile(times, 0.5), percentile(times, 0.95)
        print(f"{title:19} p50 {t50 * ms:6.1f} ms  ({t50 / parse:.1f}x ast.parse)   "
              f"p95 {t95 * ms:6.1f} ms  ({t95 / parse:.1f}x)   over {len(times)} keystrokes")
    if result["peak"] is not None:
        print(f"server peak memory {result['peak'] / 2**20:6.1f} MB with its workers (goal: at most 150 MB)")


def report_workspace(root: Path, opens: int) -> int:
    lines, scripts = 0, []
    for path in iter_python_files([root]):
        try:
            text = decode(path.read_bytes())
        except (OSError, SyntaxError, UnicodeDecodeError, LookupError):
            continue
        lines += text.count("\n")
        if BACKWARD.search(text) and ".backward(" in text:
            scripts.append((path, text))
    chosen = scripts[:: max(1, len(scripts) // opens)][:opens]
    parse = []
    for path, text in chosen:
        t0 = time.perf_counter()
        ast.parse(text)
        parse.append(time.perf_counter() - t0)
    result = asyncio.run(open_each(root, chosen))
    ms = 1000
    print(f"workspace:         {root} ({lines / 1000:.0f} KLOC, {len(scripts)} files with a backward)")
    print(f"opened:            {len(chosen)} of them, one after the other, imports followed")
    ratios = [t / p for t, p in zip(result["opens"], parse)]
    p50, p95, worst = (percentile(result["opens"], 0.5), percentile(result["opens"], 0.95), max(result["opens"]))
    print(f"open -> first diagnostics p50 {p50 * ms:6.1f} ms  p95 {p95 * ms:6.1f} ms  max {worst * ms:6.1f} ms "
          f"(goal: at most 1 s)")
    print(f"  as a multiple of ast.parse of the file: p50 {percentile(ratios, 0.5):.1f}x  max {max(ratios):.1f}x")
    if result["peak"] is not None:
        print(f"server peak memory {result['peak'] / 2**20:6.1f} MB with its workers (goal: at most 150 MB)")
    return 0


async def open_each(root: Path, files) -> dict:
    client = LanguageClient("bench", "0")
    arrived: dict[str, float] = {}
    wake = asyncio.Event()

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def diagnostics(ls, params: types.PublishDiagnosticsParams):
        arrived.setdefault(params.uri, time.perf_counter())
        wake.set()

    env = dict(os.environ, PYTHONPATH=str(REPO / "server"))
    await client.start_io(sys.executable, "-m", "gradguard", "lsp", env=env)
    await client.initialize_async(types.InitializeParams(capabilities=types.ClientCapabilities(),
                                                         root_uri=root.as_uri()))
    client.initialized(types.InitializedParams())
    opens = []
    for path, text in files:
        uri = path.as_uri()
        start = time.perf_counter()
        client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
        while uri not in arrived:
            wake.clear()
            await asyncio.wait_for(wake.wait(), 60)
        opens.append(arrived[uri] - start)
        client.text_document_did_close(types.DidCloseTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=uri)))
    peak = server_memory.peak(client._server.pid) if client._server is not None else None
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return {"opens": opens, "peak": peak}


if __name__ == "__main__":
    raise SystemExit(main())
