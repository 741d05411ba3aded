"""The fuzzing suite at full size, and a soak of the language server.

    python bench/bench_fuzz.py [--sources 10000] [--sequences 1000] [--soak 5000]
                               [--seed 1] [--timeout 2] [--jobs 2] [--out DIR]

Sources (tests/fuzz_support.py): Python drawn from its grammar by hypothesmith, generated
training scripts, and the corpus mutated line-, character- and byte-wise, and small
adversarial inputs mutated, each checked by `api.check_source` (or `check_file`, for bytes)
with `--timeout` seconds: no exception may leave it, a file not analysed must say why in one
line, and no check may take longer than its budget + 10% + 0.5 s.  They run in `--jobs`
processes, in chunks of 100 of one kind and seed (seeds from `--seed` up).

Edit sequences: `--sequences` random sequences of didChange notifications (1-25 each, UTF-16
positions, mixed line breaks, astral characters) sent to one real `gradguard lsp` over
stdio; after each, the diagnostics pulled for the edited document must equal those of the
locally edited text opened fresh, and the findings must have hovers.

Soak: `--soak` edits to one ~400-line training script, each followed by a pull of its
diagnostics, and the resident memory of the server and its workers (Linux) sampled every
100 edits: after the first tenth (caches filled), it must not grow by more than 10% + 10 MB.

Prints failures grouped by kind (a failing sample's text is written to `--out`, if given) and
the figures; exits 1 if anything failed.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "server"), str(ROOT / "tests")]  # this checkout, and the suite the tests use

import fuzz_support as fuzz  # noqa: E402
import server_memory  # noqa: E402  (bench/)

CHUNK = 100
# Shares of the sources by kind: the hypothesmith kinds draw slowly (~0.05 and ~0.1 s a source).
SHARES = {"grammar": 0.12, "node": 0.06, "progen": 0.27, "corpus": 0.3, "bytes": 0.1, "adversarial": 0.15}


def chunks(total: int, seed: int) -> list[tuple[str, int, int]]:
    """(kind, seed, count) for `total` sources in `SHARES`, chunks of at most `CHUNK`."""
    out = []
    for k, (kind, share) in enumerate(SHARES.items()):
        left = round(total * share) if k < len(SHARES) - 1 else total - sum(c for _, _, c in out)
        for i in range(0, left, CHUNK):
            out.append((kind, seed + i // CHUNK, min(CHUNK, left - i)))
    return out


def run_chunk(kind: str, seed: int, count: int, timeout: float, out: str | None) -> tuple[list, float]:
    """Failures `(name, failure)` among one chunk's samples, and its longest check in seconds."""
    failures, longest = [], 0.0
    with tempfile.TemporaryDirectory(prefix="gg_fuzz_") as tmp:
        for sample in fuzz.samples(kind, seed, count):
            start = time.perf_counter()
            failure = fuzz.fault(sample, timeout, os.path.join(tmp, f"{sample.name}.py"))
            longest = max(longest, time.perf_counter() - start)
            if failure:
                failures.append((sample.name, failure))
                if out:
                    fuzz.save(sample, failure, Path(out))
    return failures, longest


def fuzz_sources(total: int, seed: int, timeout: float, jobs: int, out: str | None) -> int:
    start = time.perf_counter()
    work = chunks(total, seed)
    failures, longest, done = [], 0.0, Counter()
    with ProcessPoolExecutor(jobs) as pool:
        futures = {pool.submit(run_chunk, *chunk, timeout, out): chunk for chunk in work}
        for future, (kind, _, count) in futures.items():
            found, slowest = future.result()
            failures += found
            longest = max(longest, slowest)
            done[kind] += count
    wall = time.perf_counter() - start
    print(f"sources: {sum(done.values()):,} checked in {wall:.0f} s with {jobs} processes "
          f"({', '.join(f'{kind} {n:,}' for kind, n in done.items())}); longest check {longest:.2f} s "
          f"with a budget of {timeout:g} s")
    report(failures)
    return len(failures)


def report(failures: list[tuple[str, str]]) -> None:
    kinds = Counter(fuzz.signature(failure) for _, failure in failures)
    first = {}
    for name, failure in failures:
        first.setdefault(fuzz.signature(failure), (name, failure))
    print(f"  {len(failures)} failure(s)" + ("" if failures else ": none"))
    for signature, n in kinds.most_common():
        name, failure = first[signature]
        print(f"  {n:5d} x  e.g. {name}: {failure[:200]}")


async def started(errors: list[str]) -> LanguageClient:
    """A server whose error log messages (an exception the server caught) go to `errors`."""
    client = LanguageClient("bench-fuzz", "0")

    @client.feature(types.WINDOW_LOG_MESSAGE)
    def log(params: types.LogMessageParams):
        if params.type == types.MessageType.Error:
            errors.append(" ".join(params.message.split())[:300])

    @client.feature(types.WORKSPACE_CONFIGURATION)
    def configuration(params: types.ConfigurationParams):
        return [None for _ in params.items]

    await client.start_io(sys.executable, "-m", "gradguard", "lsp", env={**os.environ, "PYTHONPATH": str(ROOT / "server")})
    await client.initialize_async(types.InitializeParams(capabilities=fuzz.pulling_capabilities()))
    client.initialized(types.InitializedParams())
    return client


async def stopped(client: LanguageClient) -> None:
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()


async def fuzz_edits(count: int, seed: int, directory: str) -> int:
    starts = [sample.text for sample in fuzz.samples("progen", seed, 40)] + fuzz.corpus()[:40]
    errors: list[str] = []
    client = await started(errors)
    start, failures, changes = time.perf_counter(), [], 0
    for index in range(count):
        seq = fuzz.edit_sequence(seed, index, starts)
        changes += sum(len(batch) for batch in seq.changes)
        failure = await fuzz.replay(client, seq, directory)
        failures += [(seq.name, failure)] if failure else []
        failures += [(seq.name, f"server logged an error: {error}") for error in errors]
        errors.clear()
    await stopped(client)
    print(f"edit sequences: {count:,} ({changes:,} changes) replayed in {time.perf_counter() - start:.0f} s")
    report(failures)
    return len(failures)


async def soak(edits: int, seed: int, directory: str) -> int:
    text = "\n\n".join(sample.text for sample in fuzz.samples("progen", seed, 12))
    uri, rng = f"{directory}/soak.py", random.Random(f"soak:{seed}")
    errors: list[str] = []
    client = await started(errors)
    pid = client._server.pid
    fuzz.opened(client, uri, text)
    samples, start = [], time.perf_counter()
    for version in range(2, edits + 2):
        change = fuzz.random_change(rng, text)
        if isinstance(change, types.TextDocumentContentChangeWholeDocument) or len(text) > 60_000:
            change = types.TextDocumentContentChangeWholeDocument(text=text[:30_000])  # bounded size
        text = fuzz.apply_change(text, change)
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version), content_changes=[change]))
        await fuzz.pulled(client, uri, 60)
        if version % 100 == 0:
            samples.append(server_memory.resident(pid))
    await stopped(client)
    for error in errors:
        print(f"  soak: server logged an error: {error}")
    if not samples or samples[0] is None:
        print(f"soak: {edits:,} edits in {time.perf_counter() - start:.0f} s; memory not measured here (no /proc)")
        return len(errors)
    settled = samples[len(samples) // 10]
    limit = settled * 1.1 + 10 * 2**20
    mb = 2**20
    print(f"soak: {edits:,} edits in {time.perf_counter() - start:.0f} s; server + workers resident "
          f"{samples[0] / mb:.0f} MB at 100 edits, {settled / mb:.0f} MB after a tenth, {samples[-1] / mb:.0f} MB at "
          f"the end, max {max(samples) / mb:.0f} MB (limit {limit / mb:.0f} MB)")
    step = max(1, len(samples) // 10)
    print(f"  MB every {step * 100:,} edits: {' '.join(f'{m / mb:.0f}' for m in samples[::step])}")
    grew = max(samples[len(samples) // 10:]) > limit
    print("  memory grew past the limit" if grew else "  memory flat")
    return int(grew) + len(errors)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=10_000)
    parser.add_argument("--sequences", type=int, default=1_000)
    parser.add_argument("--soak", type=int, default=5_000, help="edits of the soak")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=2.0, help="the time budget of each check, in seconds")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", help="a directory for failing samples (JSON)")
    args = parser.parse_args()
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    failed = fuzz_sources(args.sources, args.seed, args.timeout, args.jobs, args.out) if args.sources else 0
    with tempfile.TemporaryDirectory(prefix="gg_fuzz_lsp_") as tmp:
        if args.sequences:
            failed += asyncio.run(fuzz_edits(args.sequences, args.seed, Path(tmp).as_uri()))
        if args.soak:
            failed += asyncio.run(soak(args.soak, args.seed, Path(tmp).as_uri()))
    print(f"{failed} failure(s)" if failed else "no failures")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
