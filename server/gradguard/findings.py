"""What an analysis reports: plain data, free of any editor or LSP type.

Positions are 1-based lines and 0-based *character* columns (not UTF-8 bytes, not UTF-16
units): the CLI prints them 1-based, the language server converts them to UTF-16.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Span:
    line: int
    column: int
    end_line: int
    end_column: int
    path: str | None = None  # another file of the workspace (an imported module); None: the file analysed


@dataclass(frozen=True)
class Related:
    """A cause location: where the graph was freed, where the value came from, ..."""

    span: Span
    message: str


@dataclass(frozen=True)
class Edit:
    """One change a fix makes, computed from the data flow; the language server turns it
    into a libcst edit lazily.  Kinds:

    - "detach": append `.detach()` to the expression at `span`;
    - "clone": append `.clone()` to the expression at `span`;
    - "unwrap_numpy": `torch.from_numpy(x.cpu().data.numpy()[i])` at `span` becomes `x[i]`;
    - "detach_before" / "detach_after": insert `NAME = NAME.detach()` before / after the
      statement at `span`; "detach_if_before" only when NAME has a `detach` (it starts as
      `None` or `0`); "detach_tuple_before" / "detach_tuple_after" detach each tensor of a
      tuple (`(h, c)`), "detach_tuple_if_before" unless it is None; "detach_list_before" /
      "detach_list_if_before" / "detach_list_after" the same for each tensor of a list;
    - "no_grad": wrap the statement at `span` in `with torch.no_grad():`;
    - "retain_graph": add `retain_graph=True` to the call at `span`;
    - "inplace_false": set the `inplace` flag of the call at `span` to False (positional at
      index `name`, when given);
    - "item": append `.item()` to the expression at `span`;
    - "clone_before": insert `NAME = NAME.clone()` before the statement at `span`;
    - "out_of_place": turn the in-place call at `span` (`x.relu_()`, `x.masked_fill_(...)`)
      into an assignment of its out-of-place form (`x = x.relu()`), or inside an expression
      into the out-of-place call (`h.sigmoid_()` -> `h.sigmoid()`); `x += y` becomes `x = x + y`,
      and `xs[i] += y` too when `name` is "item" (`xs` is a list);
    - "retain_grad": insert `NAME.retain_grad()` after the statement at `span`;
    - "requires_grad_after": insert `NAME.requires_grad_()` after the statement at `span`;
    - "zero_grad": insert `NAME.zero_grad()` before the statement at `span`;
    - "move_into_loop": move the statement at `span` to the top of the loop body at `target`;
    - "move_after": move the statement at `span` to just after the statement at `target`;
    - "new_leaf": the expression at `span` becomes `(X).detach().requires_grad_()`;
    - "detach_each": the list at `span` becomes `[t.detach() for t in X]`, or of tuples
      `[(h.detach(), c.detach()) for h, c in X]` (names in `name`, "tuple" when not written);
    - "remove_detach": the expression at `span` is `X.detach()` or `X.data`: it becomes `X`;
    - "remove_item": the call at `span` is `X.item()`: it becomes `X`;
    - "stack": the call at `span` is `torch.tensor(xs)`: it becomes `torch.stack(xs)`;
    - "create_graph": add (or set) `create_graph=True` in the call at `span`;
    - "materialize_grads": add (or set) `materialize_grads=True` in the call at `span`;
    - "grad_outputs": add `grad_outputs=torch.ones_like(NAME)` to the call at `span`;
    - "mean" / "sum": append `.mean()` / `.sum()` to the expression at `span`;
    - "unwrap_item": the call at `span` is `torch.tensor(X.item())`: it becomes `X`;
    - "soft_argmax": the call at `span` is an argmax or argmin: it becomes the expected index under
      a softmax, a float that gradients flow through;
    - "soft_compare": the comparison used as a number at `span` (`(p > 0.5).float()`,
      `pred == y` inside arithmetic) becomes a probability: a threshold's (`target` None;
      `name` "prob" if the compared tensor is one, else "logit"), or softmax's probability
      of the class when `target` is the argmax call (`name`: the variable given its result);
    - "to_torch": the function at `span` is written with torch where it used numpy (a loss
      computed on `.numpy()` arrays and wrapped back with `torch.tensor`);
    - "unwrap": the `with` statement (or `if` without `else`) at `span` is replaced by its
      body, dedented;
    - "delete": delete the statement (or decorator) at `span` (`pass` if its block empties);
    - "replace": the text at `span` becomes `name` (a comment's edit, which no syntax tree holds).
    """

    kind: str
    span: Span
    name: str = ""
    target: Span | None = None


@dataclass(frozen=True)
class Fix:
    """A fix: its title and the edits that make it (a fix may need two, as
    `retain_graph=True` on one backward plus `.detach()` in the next loss)."""

    title: str
    edits: tuple[Edit, ...]
    preferred: bool = False
    # ruff's applicability: "safe" cannot change what the program computes beyond removing the
    # crash; "unsafe" changes which gradients flow, or what memory is held
    applicability: str = "unsafe"

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(e.kind for e in self.edits)


@dataclass(frozen=True)
class Finding:
    code: str
    name: str
    severity: str  # "error" | "warning" | "info"
    message: str
    span: Span
    related: tuple[Related, ...] = ()
    fixes: tuple[Fix, ...] = ()
    predicts: str | None = None

    def with_severity(self, severity: str) -> "Finding":
        return Finding(self.code, self.name, severity, self.message, self.span,
                       self.related, self.fixes, self.predicts)


@dataclass
class FileResult:
    """The outcome of checking one source text: findings, or one line saying why not."""

    path: str
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
