"""A seeded sample of the fuzzing suite (tests/fuzz_support.py; bench/bench_fuzz.py runs it at
full size): generated and mutated sources through the engine, random edit sequences through
the real language server.  The seed is fixed, so a failure here is the same on every run; the
checks of the property itself come first, so that a property that cannot fail does not pass."""
from __future__ import annotations

import random

import pytest
import pytest_lsp
from gradguard.api import Checked
from lsprotocol import types
from pytest_lsp import LanguageClient

from fuzz_support import (KINDS, EditSequence, Sample, apply_change, edit_sequence, fault, pulling_capabilities,
                          random_change, replay, samples, verdict)
from lsp_support import SERVER
from test_lsp_lifecycle import BUGGY

SEED = 2026  # change it to explore; bench/bench_fuzz.py draws many seeds
PER_KIND, SEQUENCES, TIMEOUT = 12, 6, 2.0


def test_the_property_sees_an_escaped_exception_an_internal_error_and_an_overrun(tmp_path):
    assert fault(Sample("none", None), TIMEOUT, str(tmp_path / "x.py")).startswith("exception escaped: TypeError")
    internal = Checked("x.py").failed("internal error in GradGuard: KeyError: 'x'", internal=True)
    assert verdict(internal, 0.1, TIMEOUT) == "internal error in GradGuard: KeyError: 'x'"
    assert verdict(Checked("x.py"), TIMEOUT * 2 + 1, TIMEOUT).startswith("took ")
    assert verdict(Checked("x.py"), 0.1, TIMEOUT) is None


@pytest.mark.parametrize("kind", KINDS)
def test_generated_sources_are_checked_within_budget_without_internal_errors(kind, tmp_path):
    failures = {sample.name: failure for sample in samples(kind, SEED, PER_KIND)
                if (failure := fault(sample, TIMEOUT, str(tmp_path / f"{sample.name}.py")))}
    assert failures == {}


def test_a_random_change_is_applied_as_an_editor_applies_it():
    """The local copy the server is compared with: UTF-16 positions (an astral character is
    two units), a position past a line's end is its end, a reversed range is not drawn."""
    text = "a\U0001f600b\r\ncd\n"
    change = types.TextDocumentContentChangePartial(
        range=types.Range(start=types.Position(line=0, character=3), end=types.Position(line=1, character=9)), text="X")
    assert apply_change(text, change) == "a\U0001f600X\n"
    rng = random.Random(0)
    for _ in range(200):
        change = random_change(rng, text)
        if isinstance(change, types.TextDocumentContentChangePartial):
            start, end = change.range.start, change.range.end
            assert (start.line, start.character) <= (end.line, end.character)
        text = apply_change(text, change)


@pytest_lsp.fixture(config=SERVER)
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(types.InitializeParams(capabilities=pulling_capabilities()))
    yield lsp_client
    await lsp_client.shutdown_session()


async def test_random_edit_sequences_leave_the_server_with_the_editors_text(client: LanguageClient, tmp_path):
    starts = [sample.text for sample in samples("progen", SEED, 4)] + [BUGGY]
    failures = {}
    for index in range(SEQUENCES):
        seq = edit_sequence(SEED, index, starts)
        failure = await replay(client, seq, tmp_path.as_uri(), timeout=30)
        if failure:
            failures[seq.name] = failure
    assert failures == {}


async def test_a_server_text_that_differs_from_the_editors_is_seen(client: LanguageClient, tmp_path):
    """`replay` against a local copy that is not the server's: the freed graph only it has."""
    seq = EditSequence("differs", BUGGY.replace("loss.backward()  # raises", "pass  # raises"),
                       [[types.TextDocumentContentChangeWholeDocument(text=BUGGY.replace("loss.backward()  #", "x  #"))]])
    seq.final = seq.changes[0][0].text
    failure = await replay(client, seq, tmp_path.as_uri(), timeout=30, local=lambda _: BUGGY)
    assert failure is not None and failure.startswith("diagnostics after the edits differ from a fresh open's: fresh only")
    assert await replay(client, seq, tmp_path.as_uri(), timeout=30) is None
