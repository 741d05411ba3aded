"""Generated training programs, labelled by running them: a differential test of GradGuard.

The hand-written cases (tests/programs, ../shared/corpus) cover the shapes someone thought
of.  This module composes small, complete PyTorch training scripts from independent
variation points ("motifs": how the model is built, which activation runs in place and
where, which optimizer owns which parameters, the training pattern, whether the code sits
at module level, in a function or in a method), so shapes nobody wrote by hand turn up in
combination.  Each motif has a correct and a buggy variant drawn about equally often, but
the generator never decides the label: the execution oracle runs every program under torch
and says whether and where it raises.  `judge` then compares that with GradGuard.

A program's random choices are drawn from `random.Random(f"{seed}:{index}")`, so program i
of a seed is the same whatever n is.  In the generated code `$name` marks long-lived state
(models, optimizers, caches), written `name` at module or function level and `self.name`
in a Trainer.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

from corpus_support import run_oracle
from gradguard.analysis import analyze
from gradguard.rules import ALL_RULES

PREDICTS = {r.code: r.predicts for r in ALL_RULES}
BROKEN = ("other_error", "timeout")  # the generator's bugs, not GradGuard's
AGREE = ("found", "clean")


@dataclass(frozen=True)
class Program:
    name: str
    source: str
    motifs: tuple[str, ...]


# Activations between a net's two linear layers: (modules for nn.Sequential, or None when
# there is no module form; statements on `x` for a forward method).  The "_after_" ones
# modify in place the output of an op that saved it for backward (sigmoid, tanh, exp).
ACTS = {
    "relu": (["nn.ReLU()"], ["x = F.relu(x)"]),
    "leaky_relu": (["nn.LeakyReLU(0.2)"], ["x = F.leaky_relu(x, 0.2)"]),
    "tanh": (["nn.Tanh()"], ["x = torch.tanh(x)"]),
    "relu_inplace": (["nn.ReLU(inplace=True)"], ["x = F.relu(x, inplace=True)"]),
    "leaky_relu_inplace": (["nn.LeakyReLU(0.2, inplace=True)"], ["x = F.leaky_relu(x, 0.2, inplace=True)"]),
    "relu_": (None, ["x.relu_()"]),
    "add_inplace": (None, ["x += 1", "x = F.relu(x)"]),
    "relu_inplace_after_sigmoid": (["nn.Sigmoid()", "nn.ReLU(inplace=True)"],
                                   ["x = torch.sigmoid(x)", "x = F.relu(x, inplace=True)"]),
    "leaky_relu_inplace_after_tanh": (["nn.Tanh()", "nn.LeakyReLU(0.2, inplace=True)"],
                                      ["x = torch.tanh(x)", "x = F.leaky_relu(x, 0.2, inplace=True)"]),
    "relu__after_sigmoid": (None, ["x = torch.sigmoid(x)", "x.relu_()"]),
    "add_inplace_after_exp": (None, ["x = torch.exp(x)", "x += 1"]),
}
ACT_GROUPS = {"plain": ["relu", "leaky_relu", "tanh"],
              "inplace_legal": ["relu_inplace", "leaky_relu_inplace", "relu_", "add_inplace"],
              "inplace_saved": ["relu_inplace_after_sigmoid", "leaky_relu_inplace_after_tanh",
                                "relu__after_sigmoid", "add_inplace_after_exp"]}

BLOCK = '''\
def block(in_features, out_features, normalize=True):
    layers = [nn.Linear(in_features, out_features)]
    if normalize:
        layers.append(nn.BatchNorm1d(out_features))
{acts}
    return layers'''

NET = '''\
class Net(nn.Module):
    def __init__(self, in_features, hidden, out_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, out_features)

    def forward(self, x):
        x = self.fc1(x)
{acts}
        return self.fc2(x)'''

MLP = '''\
class MLP(nn.Module):
    def __init__(self, in_features, hidden, out_features, depth=2):
        super().__init__()
        self.layers = nn.ModuleList()
        for i in range(depth):
            self.layers.append(nn.Linear(in_features if i == 0 else hidden, hidden))
        self.out = nn.Linear(hidden, out_features)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
{acts}
        return self.out(x)'''

REPACKAGE = '''\
def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)'''

CELL = '''\
class RecurrentCell(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.ih = nn.Linear(input_size, hidden_size)
        self.hh = nn.Linear(hidden_size, hidden_size)

    def forward(self, x, h=None):
        if h is None:
            h = x.new_zeros(x.shape[0], self.hh.out_features)
        return torch.tanh(self.ih(x) + self.hh(h))'''

BANK = '''\
class MemoryBank(nn.Module):
    """An encoder with a queue of past keys (MoCo-style negatives)."""

    def __init__(self, encoder, size=8, dim=16):
        super().__init__()
        self.encoder = encoder
        self.queue = torch.randn(size, dim)

    def forward(self, x):
        keys = self.encoder(x)
        logits = keys @ self.queue.t()
{update}
        return logits'''

PREDICT = '''\
{decorator}def predict(model, x):
{body}'''


def indent(lines, depth=1):
    return [("    " * depth + line) if line else line for line in lines]


class Draw:
    """One program's random choices; every choice is recorded as a motif `axis:choice`."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.motifs: list[str] = []
        self.helpers: dict[str, str] = {}  # module-level definitions, each emitted once
        self.builder = self.act = self.optim = None

    def pick(self, axis, options):
        """A uniform choice from a list, or a weighted one from {choice: weight}."""
        if isinstance(options, dict):
            choice = self.rng.choices(list(options), weights=list(options.values()))[0]
        else:
            choice = self.rng.choice(options)
        self.motifs.append(f"{axis}:{choice}")
        return choice

    def net(self, in_features, hidden, out_features):
        """An expression building a two-layer net; builder and activation are drawn once per program."""
        if self.builder is None:
            self.draw_builder()
        if self.builder == "sequential":
            return f"nn.Sequential(nn.Linear({in_features}, {hidden}), {', '.join(ACTS[self.act][0])}, " \
                   f"nn.Linear({hidden}, {out_features}))"
        if self.builder == "block":
            return f"nn.Sequential(*block({in_features}, {hidden}, normalize=False), *block({hidden}, {hidden}), " \
                   f"nn.Linear({hidden}, {out_features}))"
        return f"{'Net' if self.builder == 'class' else 'MLP'}({in_features}, {hidden}, {out_features})"

    def draw_builder(self):
        self.builder = self.pick("model", ["sequential", "block", "class", "modulelist"])
        group = ACT_GROUPS[self.pick("act_group", {"plain": 2, "inplace_legal": 1, "inplace_saved": 1})]
        if self.builder in ("sequential", "block"):
            group = [a for a in group if ACTS[a][0]]
        self.act = self.pick("act", group)
        modules, stmts = ACTS[self.act]
        if self.builder == "block":
            acts = [f"layers.append({modules[0]})"] if len(modules) == 1 else [f"layers.extend([{', '.join(modules)}])"]
            if self.pick("block_dropout", ["yes", "no"]) == "yes":
                acts.append("layers.append(nn.Dropout(0.1))")
            self.helpers["block"] = BLOCK.format(acts="\n".join(indent(acts)))
        elif self.builder == "class":
            self.helpers["Net"] = NET.format(acts="\n".join(indent(stmts, 2)))
        elif self.builder == "modulelist":
            self.helpers["MLP"] = MLP.format(acts="\n".join(indent(stmts, 3)))

    def optimizer(self, params):
        if self.optim is None:
            self.optim = self.pick("optim", ["SGD", "Adam"])
        if self.optim == "SGD":
            return f"torch.optim.SGD({params}, lr=0.01, momentum=0.9)"
        return f"torch.optim.Adam({params}, lr=1e-3)"

    def optimizers(self, nets):
        """Set-up, zero_grad and step lines for optimizers over the nets (state names).

        Over all parameters, one optimizer per sub-network, parameter groups, or only the
        last net (the others are then never stepped)."""
        scope = self.pick("opt", ["all", "per_net", "groups", "last_only"] if len(nets) > 1 else ["all"])
        if scope == "per_net":
            names = [f"opt_{net}" for net in nets]
            setup = [f"${name} = {self.optimizer(f'${net}.parameters()')}" for name, net in zip(names, nets)]
            form = self.pick("opt_update", ["lines", "comprehension", "loop"])
            group = "(" + ", ".join(f"${n}" for n in names) + ")"
            if form == "comprehension":  # `[opt.step() for opt in (...)]`
                return setup, [f"[opt.zero_grad() for opt in {group}]"], [f"[opt.step() for opt in {group}]"]
            if form == "loop":
                return setup, [f"for opt in {group}:", "    opt.zero_grad()"], [f"for opt in {group}:", "    opt.step()"]
        else:
            names = ["optimizer"]
            if scope == "all":
                params = " + ".join(f"list(${net}.parameters())" for net in nets) if len(nets) > 1 \
                    else f"${nets[0]}.parameters()"
            elif scope == "groups":
                params = "[" + ", ".join(f'{{"params": ${net}.parameters()}}' for net in nets[:-1]) \
                         + f', {{"params": ${nets[-1]}.parameters(), "lr": 1e-2}}]'
            else:
                params = f"${nets[-1]}.parameters()"
            setup = [f"$optimizer = {self.optimizer(params)}"]
        return setup, [f"${n}.zero_grad()" for n in names], [f"${n}.step()" for n in names]

    def model(self, nets, criterion=True):
        """Lines building the nets ({state name: expression}), their optimizers and a criterion;
        with the zero_grad and step lines and the target expression."""
        setup = [f"${name} = {expr}" for name, expr in nets.items()]
        opt_setup, zero, step = self.optimizers(list(nets))
        setup += opt_setup
        target = "torch.randn(4, 4)"
        if criterion:
            if self.pick("loss", ["cross_entropy", "mse"]) == "cross_entropy":
                setup.append("$criterion = nn.CrossEntropyLoss()")
                target = "torch.randint(0, 4, (4,))"
            else:
                setup.append("$criterion = nn.MSELoss()")
        return setup, zero, step, target

    def loop(self, body, var="step"):
        return [f"for {var} in range({self.rng.choice([2, 3])}):", *indent(body)]


# Training patterns: each returns (set-up lines, training lines).

def plain(d):
    """The control: forward, loss, zero_grad, backward, step."""
    if d.pick("plain", ["one_model", "backbone_head"]) == "one_model":
        nets, forward = {"model": d.net(8, 16, 4)}, "outputs = $model(inputs)"
    else:
        nets, forward = {"backbone": d.net(8, 16, 16), "classifier": d.net(16, 16, 4)}, \
            "outputs = $classifier($backbone(inputs))"
    setup, zero, step, target = d.model(nets)
    return setup, d.loop(["inputs = torch.randn(4, 8)", f"targets = {target}", forward,
                          "loss = $criterion(outputs, targets)", *zero, "loss.backward()", *step])


def gan(d):
    """D and G steps in either order; the fake batch detached for D or not; the first
    backward retaining its graph (then its optimizer step changes weights the second
    backward may need) or not; G's loss on a fresh D(fake) or on D's output reused."""
    order = d.pick("gan_order", ["d_first", "g_first"])
    detach = d.pick("gan_fake", ["detached", "attached"]) == "detached"
    retain = d.pick("gan_first_backward", ["retain_graph", "plain"]) == "retain_graph"
    reuse = order == "d_first" and not detach and d.pick("gan_d_out", ["reused", "fresh"]) == "reused"
    setup = [f"$generator = {d.net(8, 16, 8)}", f"$discriminator = {d.net(8, 16, 1)}",
             f"$opt_g = {d.optimizer('$generator.parameters()')}",
             f"$opt_d = {d.optimizer('$discriminator.parameters()')}",
             "$adversarial_loss = nn.BCEWithLogitsLoss()"]
    backward = ["backward(retain_graph=True)", "backward()"] if retain else ["backward()", "backward()"]
    if order == "g_first":
        backward.reverse()
    d_step = ["$opt_d.zero_grad()", f"d_fake = $discriminator({'fake.detach()' if detach else 'fake'})",
              "loss_d = ($adversarial_loss($discriminator(real), valid) + $adversarial_loss(d_fake, fake_labels)) / 2",
              f"loss_d.{backward[0]}", "$opt_d.step()"]
    g_step = ["$opt_g.zero_grad()",
              f"loss_g = $adversarial_loss({'d_fake' if reuse else '$discriminator(fake)'}, valid)",
              f"loss_g.{backward[1]}", "$opt_g.step()"]
    steps = d_step + [""] + g_step if order == "d_first" else g_step + [""] + d_step
    return setup, d.loop(["real = torch.randn(4, 8)", "valid = torch.ones(4, 1)", "fake_labels = torch.zeros(4, 1)",
                          "fake = $generator(torch.randn(4, 8))", "", *steps])


RNNS = {  # module, zero state, the features the head reads ({state}: the hidden state)
    "LSTM": ("nn.LSTM(8, 16)", "(torch.zeros(1, 4, 16), torch.zeros(1, 4, 16))", "output[-1]"),
    "GRU": ("nn.GRU(8, 16)", "torch.zeros(1, 4, 16)", "output[-1]"),
    "RNN": ("nn.RNN(8, 16)", "torch.zeros(1, 4, 16)", "output[-1]"),
    "LSTMCell": ("nn.LSTMCell(8, 16)", "(torch.zeros(4, 16), torch.zeros(4, 16))", "{state}[0]"),
    "GRUCell": ("nn.GRUCell(8, 16)", "torch.zeros(4, 16)", "{state}"),
    "hand_written": ("RecurrentCell(8, 16)", "torch.zeros(4, 16)", "{state}"),
}


def recurrent(d):
    """A hidden state carried across iterations: detached (before the step or after it),
    kept attached, or kept attached with retain_graph=True (then the optimizer step changes
    weights the next backward needs); zero or None initial state, tensors or (h, c)."""
    kind = d.pick("rnn", list(RNNS))
    module, zeros, features = RNNS[kind]
    if kind == "hand_written":
        d.helpers["RecurrentCell"] = CELL
    carry = d.pick("rnn_carry", {"detach": 2, "attached": 1, "attached_retain_graph": 1})
    initial = zeros if d.pick("rnn_init", ["zeros", "none"]) == "zeros" else "None"
    setup, zero, step, target = d.model({"rnn": module, "head": d.net(16, 16, 4)})
    if d.pick("rnn_state", ["local", "attribute"]) == "attribute":
        setup.append(f"$hidden = {initial}")
        state, before = "$hidden", []
    else:
        state, before = "hidden", [f"hidden = {initial}"]
    if kind.endswith("Cell") or kind == "hand_written":
        forward = ["for x_t in inputs:", f"    {state} = $rnn(x_t, {state})"]
    else:
        forward = [f"output, {state} = $rnn(inputs, {state})"]
    tuple_state = kind.startswith("LSTM")
    detached = d.pick("rnn_detach", ["repackage_hidden", "inline"])
    if detached == "repackage_hidden":
        d.helpers["repackage_hidden"] = REPACKAGE
        detached = f"repackage_hidden({state})"
    else:
        detached = f"tuple(h.detach() for h in {state})" if tuple_state else f"{state}.detach()"
    head, tail = [], []
    if carry == "detach":
        if d.pick("rnn_detach_at", ["start", "end"]) == "end":
            tail = [f"{state} = {detached}"]
        elif initial == "None":
            head = [f"if {state} is not None:", f"    {state} = {detached}"]
        else:
            head = [f"{state} = {detached}"]
    backward = "loss.backward(retain_graph=True)" if carry == "attached_retain_graph" else "loss.backward()"
    body = ["inputs = torch.randn(5, 4, 8)", f"targets = {target}", *head, *forward,
            f"loss = $criterion($head({features.format(state=state)}), targets)",
            *zero, backward, *step, *tail]
    return setup, before + d.loop(body, "batch")


def prefeature(d):
    """Features computed once (before the loop, or once per epoch) and reused by every
    step: with their graph, under torch.no_grad(), or detached."""
    how = d.pick("prefeature", {"attached": 2, "no_grad": 1, "detach": 1})
    retain = d.pick("prefeature_backward", ["retain_graph", "plain"]) == "retain_graph"
    setup, zero, step, target = d.model({"backbone": d.net(8, 16, 16), "head": d.net(16, 16, 4)})
    compute = {"attached": ["features = $backbone(images)"],
               "no_grad": ["with torch.no_grad():", "    features = $backbone(images)"],
               "detach": ["features = $backbone(images).detach()"]}[how]
    train = ["logits = $head(features)", "loss = $criterion(logits, labels)", *zero,
             "loss.backward(retain_graph=True)" if retain else "loss.backward()", *step]
    data = ["images = torch.randn(4, 8)", f"labels = {target}"]
    if d.pick("prefeature_scope", ["before_loop", "per_epoch"]) == "before_loop":
        return setup, data + compute + d.loop(train)
    return setup, data + d.loop(compute + d.loop(train), "epoch")


def memory_bank(d):
    """Past embeddings kept in a list or on a module and used by the next steps' loss:
    stored with their graph, detached, or (on a module) updated under torch.no_grad()."""
    store = d.pick("bank", ["list", "module_attribute"])
    if store == "module_attribute":
        keep = d.pick("bank_entry", {"attached": 2, "detach": 1, "no_grad": 1})
        new = "keys.detach()" if keep == "detach" else "keys"
        update = [f"self.queue = torch.cat([{new}, self.queue[:-keys.shape[0]]])"]
        if keep == "no_grad":
            update = ["with torch.no_grad():", *indent(update)]
        d.helpers["MemoryBank"] = BANK.format(update="\n".join(indent(update, 2)))
        setup, zero, step, _ = d.model({"model": f"MemoryBank({d.net(8, 16, 16)})"}, criterion=False)
        forward = ["logits = $model(inputs)"]
    else:
        keep = d.pick("bank_entry", ["attached", "detach"])
        enqueue = ["$bank.append(embeddings.detach())" if keep == "detach" else "$bank.append(embeddings)"]
        setup, zero, step, _ = d.model({"encoder": d.net(8, 16, 16), "projector": d.net(16, 16, 16)},
                                       criterion=False)
        setup.append("$bank = [torch.randn(4, 16)]")
        early = d.pick("bank_update", ["before_loss", "after_step"]) == "before_loss"
        forward = ["embeddings = $projector($encoder(inputs))", *(enqueue if early else []),
                   "memory = torch.cat($bank[-2:])", "logits = embeddings @ memory.t()"]
        step = step + ([] if early else enqueue)
    setup.append("$criterion = nn.CrossEntropyLoss()")
    return setup, d.loop(["inputs = torch.randn(4, 8)", *forward,
                          "loss = $criterion(logits, torch.zeros(4, dtype=torch.long))", *zero,
                          "loss.backward()", *step])


def double_backward(d):
    """backward twice on the same loss: without retain_graph, with it, and with it but an
    optimizer step in between (which changes weights the second backward needs)."""
    how = d.pick("double_backward", {"plain": 1, "retain_graph": 2, "retain_graph_step_between": 1})
    setup, zero, step, target = d.model({"model": d.net(8, 16, 4)})
    first = "loss.backward()" if how == "plain" else "loss.backward(retain_graph=True)"
    return setup, d.loop(["inputs = torch.randn(4, 8)", f"targets = {target}",
                          "loss = $criterion($model(inputs), targets)", *zero, first,
                          *(step if how == "retain_graph_step_between" else []), "loss.backward()", *step])


def shared_subgraph(d):
    """Two losses over one encoder output: summed, or backpropagated one after the other
    (without retain_graph, with it, with it and a step in between)."""
    how = d.pick("two_losses", ["summed", "sequential", "sequential_retain_graph",
                                "sequential_retain_graph_step_between"])
    setup, zero, step, _ = d.model({"encoder": d.net(8, 16, 16), "decoder": d.net(16, 16, 8),
                                    "classifier": d.net(16, 16, 4)}, criterion=False)
    if how == "summed":
        backward = ["loss = loss_recon + 0.5 * loss_cls", "loss.backward()"]
    else:
        backward = ["loss_recon.backward()" if how == "sequential" else "loss_recon.backward(retain_graph=True)",
                    *(step if how.endswith("step_between") else []), "loss_cls.backward()"]
    return setup, d.loop(["inputs = torch.randn(4, 8)", "labels = torch.randint(0, 4, (4,))",
                          "features = $encoder(inputs)", "reconstruction = $decoder(features)",
                          "logits = $classifier(features)", "loss_recon = F.mse_loss(reconstruction, inputs)",
                          "loss_cls = F.cross_entropy(logits, labels)", *zero, *backward, *step])


def accumulation(d):
    """Gradient accumulation: backward per micro-batch, or one backward of the summed
    losses per accumulation window (with the sum reset after it, or not)."""
    how = d.pick("accumulate", {"backward_each": 2, "summed_reset": 1, "summed_no_reset": 3})
    setup, zero, step, target = d.model({"model": d.net(8, 16, 4)})
    body = ["inputs = torch.randn(4, 8)", f"targets = {target}",
            "loss = $criterion($model(inputs), targets) / accumulation_steps"]
    if how == "backward_each":
        body += ["loss.backward()", "if (i + 1) % accumulation_steps == 0:", *indent(step + zero)]
        before = []
    else:
        body += ["running_loss = running_loss + loss", "if (i + 1) % accumulation_steps == 0:",
                 *indent(["running_loss.backward()", *step, *zero]
                         + (["running_loss = 0"] if how == "summed_reset" else []))]
        before = ["running_loss = 0"]
    return setup, ["accumulation_steps = 2", *before, *zero, "for i in range(4):", *indent(body)]


def running_total(d):
    """A running total of the loss: of .item(), of .detach(), of the tensor (which keeps
    every graph alive), or of the tensor with backward called on the total."""
    how = d.pick("total_loss", {"item": 2, "detach": 1, "tensor": 1, "tensor_backward": 4})
    setup, zero, step, target = d.model({"model": d.net(8, 16, 4)})
    body = ["inputs = torch.randn(4, 8)", f"targets = {target}", "loss = $criterion($model(inputs), targets)", *zero]
    if how == "tensor_backward":
        body += ["total_loss += loss", "total_loss.backward()", *step]
    else:
        body += ["loss.backward()", *step, {"item": "total_loss += loss.item()", "tensor": "total_loss += loss",
                                            "detach": "total_loss += loss.detach()"}[how]]
    return setup, ["total_loss = 0", *d.loop(body), "average_loss = total_loss / 3"]


def manual_update(d):
    """Hand-written SGD on leaf tensors or a model's parameters, inside torch.no_grad()
    or not, one statement per tensor or a loop over them, every step or once."""
    raw = d.pick("manual_params", ["raw_tensors", "model"]) == "raw_tensors"
    loop = not raw or d.pick("manual_update", ["param_loop", "explicit"]) == "param_loop"
    op = d.pick("manual_op", {"-=": 2, "sub_": 1, "add_alpha": 1})
    guarded = d.pick("manual_guard", ["no_grad", "none"]) == "no_grad"
    if raw:
        setup = ["$w1 = torch.randn(8, 16, requires_grad=True)", "$b1 = torch.zeros(16, requires_grad=True)",
                 "$w2 = torch.randn(16, 4, requires_grad=True)", "$criterion = nn.MSELoss()"]
        forward = ["hidden = torch.relu(inputs @ $w1 + $b1)", "outputs = hidden @ $w2"]
        params, each = "[$w1, $b1, $w2]", ["$w1", "$b1", "$w2"]
    else:
        setup = [f"$model = {d.net(8, 16, 4)}", "$criterion = nn.MSELoss()"]
        forward = ["outputs = $model(inputs)"]
        params = "$model.parameters()"
    update = {"-=": "{p} -= lr * {p}.grad", "sub_": "{p}.sub_(lr * {p}.grad)",
              "add_alpha": "{p}.add_({p}.grad, alpha=-lr)"}[op]
    clear = d.pick("manual_clear", ["zero_", "none"])
    clear = "{p}.grad.zero_()" if clear == "zero_" else "{p}.grad = None"
    if loop:
        updates = [f"for p in {params}:", "    " + update.format(p="p"), "    " + clear.format(p="p")]
    else:
        updates = [update.format(p=p) for p in each] + [clear.format(p=p) for p in each]
    if guarded:
        updates = ["with torch.no_grad():", *indent(updates)]
    body = ["inputs = torch.randn(4, 8)", "targets = torch.randn(4, 4)", *forward,
            "loss = $criterion(outputs, targets)", "loss.backward()", *updates]
    once = d.pick("manual_steps", ["loop", "once"]) == "once"
    return setup, ["lr = 0.1", *(body if once else d.loop(body))]


def detached_loss(d):
    """backward on a loss with no graph (the forward under torch.no_grad(), through a
    no_grad helper, detached, or every parameter frozen), each next to the correct twin
    that uses the no-grad value only for a metric (or freezes only the backbone)."""
    how = d.pick("no_grad_fn", ["no_grad_block", "no_grad_helper", "detached", "frozen"])
    wrong = d.pick("no_grad_fn_loss", ["without_graph", "with_graph"]) == "without_graph"
    if how == "frozen":
        setup, zero, step, target = d.model({"backbone": d.net(8, 16, 16), "head": d.net(16, 16, 4)})
        frozen = ["$backbone", "$head"] if wrong else ["$backbone"]
        setup += [f"for p in {' + '.join(f'list({m}.parameters())' for m in frozen)}:", "    p.requires_grad = False"]
        forward, metric = ["outputs = $head($backbone(inputs))"], []
    else:
        setup, zero, step, target = d.model({"model": d.net(8, 16, 4)})
        if how == "no_grad_block":
            no_graph = ["with torch.no_grad():", "    {name} = $model(inputs)"]
        elif how == "detached":
            no_graph = ["{name} = $model(inputs).detach()"]
        else:
            decorated = d.pick("predict_helper", ["decorator", "with_block"]) == "decorator"
            d.helpers["predict"] = PREDICT.format(
                decorator="@torch.no_grad()\n" if decorated else "",
                body="    return model(x)" if decorated else "    with torch.no_grad():\n        return model(x)")
            no_graph = ["{name} = predict($model, inputs)"]
        if wrong:
            forward, metric = [line.format(name="outputs") for line in no_graph], []
        else:
            forward = ["outputs = $model(inputs)"]
            metric = [line.format(name="reference") for line in no_graph] \
                + ["drift = (outputs.detach() - reference).abs().mean()"]
    return setup, d.loop(["inputs = torch.randn(4, 8)", f"targets = {target}", *forward, *metric,
                          "loss = $criterion(outputs, targets)", *zero, "loss.backward()", *step])


REFINE = {  # a refinement step applied a few times to `h` inside one forward pass
    "add_after_linear": ["y = $refine(h)", "y += 1", "h = y"],
    "mul__after_linear": ["y = $refine(h)", "y.mul_(0.5)", "h = y"],
    "residual": ["h = h + $refine(h)"],
    "add_after_tanh": ["y = torch.tanh($refine(h))", "y += 1", "h = y"],
    "mul__after_sigmoid": ["y = torch.sigmoid($refine(h))", "y.mul_(2)", "h = y"],
    "residual_inplace": ["h += $refine(h)"],  # $refine saved h, its input
}


def refinement(d):
    """A loop-carried in-place update inside the forward pass: legal on a linear layer's
    output, illegal on a tanh/sigmoid output or on the input the layer saved."""
    how = d.pick("refine", list(REFINE))
    setup, zero, step, target = d.model({"encoder": d.net(8, 16, 16), "refine": "nn.Linear(16, 16)",
                                         "head": "nn.Linear(16, 4)"})
    return setup, d.loop(["inputs = torch.randn(4, 8)", f"targets = {target}", "h = $encoder(inputs)",
                          "for _ in range(3):", *indent(REFINE[how]),
                          "loss = $criterion($head(h), targets)", *zero, "loss.backward()", *step])


REFUSED = {  # kind: (buggy lines, correct lines); `outputs` is the model's, `loss` must be set
    "numpy": (["outputs = $model(inputs)", "confidence = torch.softmax(outputs, 1).max(1).values.numpy()"],
              ["outputs = $model(inputs)", "confidence = torch.softmax(outputs, 1).max(1).values.detach().numpy()"]),
    "nonscalar": (["outputs = $model(inputs)", "loss = F.mse_loss(outputs, torch.randn(4, 4), reduction=\"none\")"],
                  ["outputs = $model(inputs)",
                   "loss = F.mse_loss(outputs, torch.randn(4, 4), reduction=\"none\").mean()"]),
    "flag": (["feats = $model(inputs)", "feats.requires_grad = False", "outputs = $head(feats)"],
             ["feats = $model(inputs).detach()", "outputs = $head(feats)"]),
    "inference": (["with torch.inference_mode():", "    feats = $model(inputs)", "outputs = $head(feats)"],
                  ["with torch.no_grad():", "    feats = $model(inputs)", "outputs = $head(feats)"]),
    "unused": (["outputs = $head($model(inputs))",
                "grads = torch.autograd.grad(outputs.pow(2).mean(), list($head.parameters()) + [$scale])",
                "outputs = outputs * $scale"],
               ["outputs = $head($model(inputs)) * $scale",
                "grads = torch.autograd.grad(outputs.pow(2).mean(), list($head.parameters()) + [$scale], "
                "retain_graph=True)"]),
}


def refused(d):
    """An op that refuses the tensor it is given (`.numpy()` of one that requires grad, a
    backward of a per-sample loss, `requires_grad` set on a computed tensor, an inference
    tensor saved for backward, `autograd.grad` of an unused tensor, an optimizer given a
    scaled leaf), each next to its correct twin."""
    kind = d.pick("refused", list(REFUSED) + ["nonleaf"])
    wrong = d.pick("refused_variant", ["buggy", "correct"]) == "buggy"
    if kind == "nonleaf":
        init = "torch.randn(8, 4, requires_grad=True) * 0.1" if wrong else "(torch.randn(8, 4) * 0.1).requires_grad_()"
        setup = [f"$weight = {init}", f"$optimizer = {d.optimizer('[$weight]')}"]
        return setup, d.loop(["inputs = torch.randn(4, 8)", "loss = (inputs @ $weight).pow(2).mean()",
                              "$optimizer.zero_grad()", "loss.backward()", "$optimizer.step()"])
    setup, zero, step, target = d.model({"model": d.net(8, 16, 4), "head": "nn.Linear(4, 4)"}, criterion=False)
    setup.append("$scale = torch.ones(1, requires_grad=True)")
    lines = REFUSED[kind][0 if wrong else 1]
    loss = [] if any(line.startswith("loss =") for line in lines) else ["loss = outputs.pow(2).mean()"]
    return setup, d.loop(["inputs = torch.randn(4, 8)", *lines, *loss, *zero, "loss.backward()", *step])


PATTERNS = {f.__name__: f for f in (plain, gan, recurrent, prefeature, memory_bank, double_backward,
                                     shared_subgraph, accumulation, running_total, manual_update,
                                     detached_loss, refinement, refused)}
WEIGHTS = {name: 2 if name in ("manual_update", "detached_loss") else 1 for name in PATTERNS}  # the rarer kinds
IMPORTS = ["import torch", "import torch.nn as nn", "import torch.nn.functional as F"]


def place(d, setup, body):
    """The whole script, with the training code at module level, in `def train()` or in
    a Trainer class (set-up in __init__, training in fit), in the styles of `production`."""
    nets = [m.group(1) for line in setup if (m := re.match(r"\$(\w+) = (nn\.(?!LSTM|GRU|RNN)|Net\(|MLP\()", line))]
    if nets and d.pick("hook", ["none", "monitor"]) == "monitor":  # activations kept, detached, for logging
        setup = setup + ["$activations = {}", f"${nets[0]}.register_forward_hook("
                         "lambda module, inputs, output: $activations.__setitem__('out', output.detach()))"]
    where = d.pick("where", ["module", "function", "method"])
    deco = ["@logged"] if where != "module" and d.pick("wrapper", ["none", "logged"]) == "logged" else []
    if deco:
        d.helpers["logged"] = LOGGED
    if where == "method":
        code = ["class Trainer:", "    def __init__(self):", *indent(setup, 2), "",
                *indent(deco), "    def fit(self):", *indent(body, 2), "", "", 'if __name__ == "__main__":',
                "    Trainer().fit()"]
    elif where == "function":
        code = [*deco, "def train():", *indent(setup + [""] + body), "", "", 'if __name__ == "__main__":',
                "    train()"]
    else:
        code = setup + [""] + body
    code = re.sub(r"\$(\w+)", r"self.\1" if where == "method" else r"\1", "\n".join(code))
    code = production(d, code)
    parts = ["\n".join(IMPORTS) + "\n\ntorch.manual_seed(0)", *d.helpers.values(), code]
    return f"# motifs: {' '.join(d.motifs)}\n" + "\n\n\n".join(parts) + "\n"


# Production style: the entry point wrapped by a decorator of the project, the loop counts
# read from a config object (a dataclass, a namespace, argparse defaults or a dict), a forward
# hook keeping activations for logging, and several optimizers updated by a comprehension or
# a loop (drawn in `Draw.optimizers`).
LOGGED = '''\
import functools


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        result = fn(*args, **kwargs)
        return result
    return wrapper'''


def production(d, code):
    """`code` with its loop counts (`range(3)`) read from a config object of a drawn style."""
    counts = sorted(set(re.findall(r"range\((\d+)\)", code)))
    style = d.pick("config", ["literal", "dataclass", "namespace", "argparse", "dict"])
    if style == "literal" or not counts:
        return code
    fields = [(f"steps_{n}", n) for n in counts]
    if style == "dict":
        code = re.sub(r"range\((\d+)\)", r'range(CONFIG["steps_\1"])', code)
        d.helpers["config"] = "CONFIG = {" + ", ".join(f'"{f}": {n}' for f, n in fields) + "}"
        return code
    code = re.sub(r"range\((\d+)\)", r"range(CONFIG.steps_\1)", code)
    if style == "dataclass":
        d.helpers["config"] = "\n".join(["from dataclasses import dataclass", "", "", "@dataclass", "class Config:",
                                         *(f"    {f}: int = {n}" for f, n in fields), "", "", "CONFIG = Config()"])
    elif style == "namespace":
        d.helpers["config"] = "from types import SimpleNamespace\n\nCONFIG = SimpleNamespace(" \
            + ", ".join(f"{f}={n}" for f, n in fields) + ")"
    else:
        d.helpers["config"] = "\n".join(
            ["import argparse", "", "", "def parse_args(argv=None):", "    parser = argparse.ArgumentParser()",
             *(f'    parser.add_argument("--{f.replace("_", "-")}", type=int, default={n})' for f, n in fields),
             "    return parser.parse_args(argv)", "", "", "CONFIG = parse_args([])"])
    return code


def generate(seed: int, n: int) -> list[Program]:
    """n programs; program i depends only on (seed, i)."""
    programs = []
    for i in range(n):
        d = Draw(random.Random(f"{seed}:{i}"))
        pattern = d.pick("pattern", WEIGHTS)
        setup, body = PATTERNS[pattern](d)
        source = place(d, setup, body)
        programs.append(Program(f"{pattern}_{seed}_{i:04d}", source, tuple(d.motifs)))
    return programs


# Labelling and comparison.

def label(programs, directory: Path) -> dict[str, dict]:
    """Write the programs to directory/cases/NAME.py and run them under torch:
    {name: {"kind", "line", "message"}} (see corpus_support.run_oracle)."""
    (directory / "cases").mkdir(parents=True, exist_ok=True)
    for p in programs:
        (directory / "cases" / f"{p.name}.py").write_text(p.source)
    results = run_oracle(directory, [f"{p.name}.py" for p in programs])
    return {name[:-3]: result for name, result in results.items()}


@dataclass(frozen=True, repr=False)
class Verdict:
    program: Program
    kind: str  # the label
    line: int | None
    message: str
    findings: tuple  # (line, kind, code) of the predicting findings
    outcome: str  # found, wrong_kind, wrong_line, missed (an error); clean, flagged (a clean run)

    def __repr__(self):  # pytest prints the fixture's value: keep it short
        return f"<{self.program.name}: {self.outcome}>"

    def describe(self):
        where = self.kind if self.kind == "clean" else f"{self.kind}@{self.line}"
        found = ", ".join(f"{code}({kind})@{line}" for line, kind, code in self.findings) or "nothing"
        return f"{self.program.name}: {self.outcome}: ran {where}, GradGuard {found} [{' '.join(self.program.motifs)}]"


def judge(program: Program, result: dict) -> Verdict:
    """Compare GradGuard's predicting findings with what running the program did.  An
    error is found when a finding predicting its kind is on the raising line; a clean run
    is flagged by any predicting finding.  An analysis that raises is a disagreement either
    way: it shows as a finding of kind "analysis failed" on line 0."""
    try:
        findings = tuple((f.span.line, PREDICTS[f.code], f.code) for f in analyze(program.source) if PREDICTS[f.code])
    except Exception as e:  # noqa: BLE001  (a crash is a disagreement to report, not a test error)
        findings = ((0, "analysis failed", type(e).__name__),)
    kind, line = result["kind"], result["line"]
    if kind == "clean":
        outcome = "flagged" if findings else "clean"
    elif (line, kind) in {(at, predicted) for at, predicted, _ in findings}:
        outcome = "found"
    elif any(at == line for at, _, _ in findings):
        outcome = "wrong_kind"
    elif any(predicted == kind for _, predicted, _ in findings):
        outcome = "wrong_line"
    else:
        outcome = "missed"
    return Verdict(program, kind, line, result["message"], findings, outcome)


def rates(verdicts):
    """(recall over the erroring programs, flagged fraction of the clean ones)."""
    errors = [v for v in verdicts if v.kind != "clean"]
    clean = [v for v in verdicts if v.kind == "clean"]
    recall = sum(v.outcome == "found" for v in errors) / max(1, len(errors))
    return recall, sum(v.outcome == "flagged" for v in clean) / max(1, len(clean))
