# expect: freed_graph
# source: https://github.com/fangwei123456/spikingjelly/issues/301
"""Hybrid STDP + surrogate-gradient training of a spiking convolutional network.

Follows the SpikingJelly STDP tutorial layout: multi-step IF/LIF neurons with an ATan surrogate
spike function and a membrane-potential memory, a `functional` helper namespace, an STDPLearner
that hooks a synapse and its neuron to record pre/post spike traces, a sequential SNN in
multi-step mode, two optimizers (Adam for the gradient-descent parameters, SGD for the STDP
synapses), a Trainer with train_step / evaluate and a main().  Random Poisson-coded "images"
stand in for Fashion-MNIST.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class ATan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, alpha):
        ctx.save_for_backward(x)
        ctx.alpha = alpha
        return (x >= 0).to(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        sg = ctx.alpha / 2 / (1 + (math.pi / 2 * ctx.alpha * x).pow(2))
        return grad_output * sg, None


class MemoryModule(nn.Module):
    """Base class of stateful modules: keeps named memories that reset() restores."""

    def __init__(self):
        super().__init__()
        self._memories = {}
        self._memories_rv = {}

    def register_memory(self, name, value):
        self._memories[name] = value
        self._memories_rv[name] = value

    def __getattr__(self, name):
        if "_memories" in self.__dict__ and name in self.__dict__["_memories"]:
            return self.__dict__["_memories"][name]
        return super().__getattr__(name)

    def __setattr__(self, name, value):
        if "_memories" in self.__dict__ and name in self.__dict__["_memories"]:
            self.__dict__["_memories"][name] = value
        else:
            super().__setattr__(name, value)

    def reset(self):
        for k, v in self._memories_rv.items():
            self._memories[k] = v


class BaseNode(MemoryModule):
    def __init__(self, v_threshold=1.0, v_reset=0.0, alpha=2.0, detach_reset=True):
        super().__init__()
        self.v_threshold, self.v_reset, self.alpha, self.detach_reset = v_threshold, v_reset, alpha, detach_reset
        self.register_memory("v", 0.0)

    def neuronal_charge(self, x):
        raise NotImplementedError

    def single_step_forward(self, x):
        if not isinstance(self.v, torch.Tensor):
            self.v = torch.full_like(x, self.v)
        self.neuronal_charge(x)
        spike = ATan.apply(self.v - self.v_threshold, self.alpha)
        spike_d = spike.detach() if self.detach_reset else spike
        self.v = (1.0 - spike_d) * self.v + spike_d * self.v_reset
        return spike

    def forward(self, x_seq):
        return torch.stack([self.single_step_forward(x) for x in x_seq])


class IFNode(BaseNode):
    def neuronal_charge(self, x):
        self.v = self.v + x


class LIFNode(BaseNode):
    def __init__(self, tau=2.0, **kwargs):
        super().__init__(**kwargs)
        self.tau = tau

    def neuronal_charge(self, x):
        self.v = self.v + (x - (self.v - self.v_reset)) / self.tau


class SeqToANN(nn.Module):
    """Applies a stateless layer to every time step of a [T, N, ...] sequence."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, x_seq):
        y = self.module(x_seq.flatten(0, 1))
        return y.view(x_seq.shape[0], x_seq.shape[1], *y.shape[1:])


class functional:
    @staticmethod
    def reset_net(net):
        for m in net.modules():
            if isinstance(m, MemoryModule):
                m.reset()


class STDPLearner(MemoryModule):
    def __init__(self, synapse, sn, tau_pre=2.0, tau_post=100.0, f_pre=None, f_post=None):
        super().__init__()
        self.synapse, self.tau_pre, self.tau_post = synapse, tau_pre, tau_post
        self.f_pre = f_pre or (lambda w: 1.0)
        self.f_post = f_post or (lambda w: 1.0)
        self.in_spikes, self.out_spikes = [], []
        synapse.register_forward_hook(lambda m, inp, out: self.in_spikes.append(inp[0].detach()))
        sn.register_forward_hook(lambda m, inp, out: self.out_spikes.append(out.detach()))
        self.register_memory("trace_pre", None)
        self.register_memory("trace_post", None)

    def reset(self):
        super().reset()
        self.in_spikes.clear()
        self.out_spikes.clear()

    @torch.no_grad()
    def step(self, on_grad=True, scale=1.0):
        conv = self.synapse.module
        delta_w = torch.zeros_like(conv.weight)
        for in_seq, out_seq in zip(self.in_spikes, self.out_spikes):
            for x, y in zip(in_seq, out_seq):
                pre = F.unfold(x, conv.kernel_size, padding=conv.padding, stride=conv.stride)
                post = y.flatten(2)
                self.trace_pre = pre if self.trace_pre is None else self.trace_pre - self.trace_pre / self.tau_pre + pre
                self.trace_post = post if self.trace_post is None else self.trace_post - self.trace_post / self.tau_post + post
                ltp = torch.einsum("nck,nok->oc", self.trace_pre, post).view_as(conv.weight)
                ltd = torch.einsum("nck,nok->oc", pre, self.trace_post).view_as(conv.weight)
                delta_w += (self.f_pre(conv.weight) * ltp - self.f_post(conv.weight) * ltd) * scale
        self.in_spikes.clear()
        self.out_spikes.clear()
        if on_grad:
            conv.weight.grad = -delta_w if conv.weight.grad is None else conv.weight.grad - delta_w
        return delta_w


def build_net(args):
    return nn.Sequential(
        SeqToANN(nn.Conv2d(1, args.channels, 3, 1, 1, bias=False)), IFNode(),
        SeqToANN(nn.MaxPool2d(2, 2)),
        SeqToANN(nn.Conv2d(args.channels, args.channels, 3, 1, 1, bias=False)), IFNode(),
        SeqToANN(nn.MaxPool2d(2, 2)),
        SeqToANN(nn.Flatten()),
        SeqToANN(nn.Linear(args.channels * 4 * 4, 64, bias=False)), LIFNode(tau=args.tau),
        SeqToANN(nn.Linear(64, 10, bias=False)), LIFNode(tau=args.tau),
    )


def f_weight(x):
    return torch.clamp(x, -1, 1.0)


class Trainer:
    def __init__(self, net, args):
        self.net, self.args = net, args
        self.stdp_learners = []
        for i, m in enumerate(net):
            if isinstance(m, SeqToANN) and isinstance(m.module, nn.Conv2d):
                self.stdp_learners.append(STDPLearner(m, net[i + 1], args.tau_pre, args.tau_post, f_weight, f_weight))
        params_stdp = [l.synapse.module.weight for l in self.stdp_learners]
        params_stdp_set = set(params_stdp)
        params_gd = [p for p in net.parameters() if p not in params_stdp_set]
        self.optimizer_gd = torch.optim.Adam(params_gd, lr=args.lr)
        self.optimizer_stdp = torch.optim.SGD(params_stdp, lr=args.lr, momentum=0.0)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer_gd, T_max=args.epochs)

    def encode(self, img):
        return (torch.rand(self.args.T, *img.shape) < img).float()

    def train_step(self, img, label):
        self.optimizer_gd.zero_grad()
        self.optimizer_stdp.zero_grad()
        y = self.net(self.encode(img)).mean(0)
        loss = F.cross_entropy(y, label)
        loss.backward()  # raises
        self.optimizer_stdp.zero_grad()
        for learner in self.stdp_learners:
            learner.step(on_grad=True)
        self.optimizer_gd.step()
        self.optimizer_stdp.step()
        return loss.item(), (y.argmax(1) == label).float().mean().item()

    @torch.no_grad()
    def evaluate(self, batches):
        correct, total = 0, 0
        for img, label in batches:
            y = self.net(self.encode(img)).mean(0)
            correct += (y.argmax(1) == label).sum().item()
            total += label.numel()
            functional.reset_net(self.net)
            for learner in self.stdp_learners:
                learner.reset()
        return correct / total

    def fit(self, train_batches, test_batches):
        for epoch in range(self.args.epochs):
            self.net.train()
            stats = [self.train_step(img, label) for img, label in train_batches]
            self.scheduler.step()
            self.net.eval()
            acc = self.evaluate(test_batches)
            loss = sum(s[0] for s in stats) / len(stats)
            print(f"epoch {epoch}: train loss {loss:.4f} test acc {acc:.3f}")


def make_batches(n_batches, batch_size, generator):
    return [(torch.rand(batch_size, 1, 16, 16, generator=generator),
             torch.randint(0, 10, (batch_size,), generator=generator)) for _ in range(n_batches)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-T", type=int, default=4)
    parser.add_argument("--channels", type=int, default=8)
    parser.add_argument("--tau", type=float, default=2.0)
    parser.add_argument("--tau-pre", dest="tau_pre", type=float, default=2.0)
    parser.add_argument("--tau-post", dest="tau_post", type=float, default=100.0)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", dest="batch_size", type=int, default=16)
    args = parser.parse_args([])
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    net = build_net(args)
    trainer = Trainer(net, args)
    trainer.fit(make_batches(4, args.batch_size, g), make_batches(2, args.batch_size, g))


if __name__ == "__main__":
    main()
