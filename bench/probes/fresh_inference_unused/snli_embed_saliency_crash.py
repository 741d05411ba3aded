# expect: grad_unused
# source: https://github.com/pytorch/pytorch/issues/17124
import argparse
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args():
    parser = argparse.ArgumentParser(description='PyTorch/torchtext SNLI example')
    parser.add_argument('--epochs', type=int, default=2)
    parser.add_argument('--batch_size', type=int, default=16)
    parser.add_argument('--d_embed', type=int, default=10)
    parser.add_argument('--d_proj', type=int, default=16)
    parser.add_argument('--d_hidden', type=int, default=32)
    parser.add_argument('--n_layers', type=int, default=1)
    parser.add_argument('--lr', type=float, default=.001)
    parser.add_argument('--dp_ratio', type=int, default=0.2)
    parser.add_argument('--no-bidirectional', action='store_false', dest='birnn')
    parser.add_argument('--preserve-case', action='store_false', dest='lower')
    parser.add_argument('--no-projection', action='store_false', dest='projection')
    parser.add_argument('--train_embed', action='store_false', dest='fix_emb')
    parser.add_argument('--seed', type=int, default=1111)
    return parser.parse_args([])


class Bottle(nn.Module):
    def forward(self, input):
        if len(input.size()) <= 2:
            return super(Bottle, self).forward(input)
        size = input.size()[:2]
        out = super(Bottle, self).forward(input.view(size[0] * size[1], -1))
        return out.view(size[0], size[1], -1)


class Linear(Bottle, nn.Linear):
    pass


class Encoder(nn.Module):
    def __init__(self, config):
        super(Encoder, self).__init__()
        self.config = config
        input_size = config.d_proj if config.projection else config.d_embed
        dropout = 0 if config.n_layers == 1 else config.dp_ratio
        self.rnn = nn.LSTM(input_size=input_size, hidden_size=config.d_hidden,
                           num_layers=config.n_layers, dropout=dropout,
                           bidirectional=config.birnn)

    def forward(self, inputs):
        batch_size = inputs.size()[1]
        state_shape = self.config.n_cells, batch_size, self.config.d_hidden
        h0 = c0 = inputs.new_zeros(state_shape)
        outputs, (ht, ct) = self.rnn(inputs, (h0, c0))
        return ht[-1] if not self.config.birnn else ht[-2:].transpose(0, 1).contiguous().view(batch_size, -1)


class SNLIClassifier(nn.Module):
    def __init__(self, config):
        super(SNLIClassifier, self).__init__()
        self.config = config
        self.embed = nn.Embedding(config.n_embed, config.d_embed)
        self.projection = Linear(config.d_embed, config.d_proj)
        self.encoder = Encoder(config)
        self.dropout = nn.Dropout(p=config.dp_ratio)
        self.relu = nn.ReLU()
        seq_in_size = 2 * config.d_hidden
        if self.config.birnn:
            seq_in_size *= 2
        lin_config = [seq_in_size] * 2
        self.out = nn.Sequential(
            Linear(*lin_config), self.relu, self.dropout,
            Linear(*lin_config), self.relu, self.dropout,
            Linear(seq_in_size, config.d_out))

    def forward(self, prem_embed, hypo_embed):
        if self.config.fix_emb:
            prem_embed = prem_embed.detach()
            hypo_embed = hypo_embed.detach()
        if self.config.projection:
            prem_embed = self.relu(self.projection(prem_embed))
            hypo_embed = self.relu(self.projection(hypo_embed))
        premise = self.encoder(prem_embed)
        hypothesis = self.encoder(hypo_embed)
        scores = self.out(torch.cat([premise, hypothesis], 1))
        return scores


def make_batches(config, n_batches, g):
    batches = []
    for _ in range(n_batches):
        prem_len, hypo_len = int(torch.randint(5, 12, (1,), generator=g)), int(torch.randint(3, 8, (1,), generator=g))
        premise = torch.randint(0, config.n_embed, (prem_len, config.batch_size), generator=g)
        hypothesis = torch.randint(0, config.n_embed, (hypo_len, config.batch_size), generator=g)
        label = (premise[0] + hypothesis[0]) % config.d_out
        batches.append(SimpleNamespace(premise=premise, hypothesis=hypothesis, label=label))
    return batches


def input_saliency(model, premise_ids, hypothesis_ids):
    model.eval()
    t = model.embed(premise_ids).detach()
    u = model.embed(hypothesis_ids).detach()
    t.requires_grad = True
    u.requires_grad = True
    o = model(t, u)
    pred = o.argmax(dim=1).item()
    sg = torch.autograd.grad(o[0, pred], (t, u), retain_graph=True)  # raises
    prem_sal = sg[0].norm(dim=-1).squeeze(1)
    hypo_sal = sg[1].norm(dim=-1).squeeze(1)
    return pred, prem_sal, hypo_sal


def main():
    config = get_args()
    torch.manual_seed(config.seed)
    config.n_embed = 50
    config.d_out = 3
    config.n_cells = config.n_layers
    if config.birnn:
        config.n_cells *= 2

    g = torch.Generator().manual_seed(config.seed)
    train_iter = make_batches(config, 6, g)
    dev_iter = make_batches(config, 2, g)

    model = SNLIClassifier(config)
    criterion = nn.CrossEntropyLoss()
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)

    for epoch in range(config.epochs):
        model.train()
        n_correct, n_total = 0, 0
        for batch_idx, batch in enumerate(train_iter):
            opt.zero_grad()
            answer = model(model.embed(batch.premise), model.embed(batch.hypothesis))
            n_correct += (torch.max(answer, 1)[1].view(batch.label.size()) == batch.label).sum().item()
            n_total += batch.label.size(0)
            loss = criterion(answer, batch.label)
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            dev_correct = sum((model(model.embed(b.premise), model.embed(b.hypothesis)).argmax(1) == b.label).sum().item()
                              for b in dev_iter)
        print(f"epoch {epoch}: loss {loss.item():.4f} train acc {100. * n_correct / n_total:.1f} "
              f"dev acc {100. * dev_correct / (len(dev_iter) * config.batch_size):.1f}")

    example = dev_iter[0]
    pred, prem_sal, hypo_sal = input_saliency(model, example.premise[:, :1], example.hypothesis[:, :1])
    print("predicted label:", pred)
    print("premise saliency:", [round(v, 3) for v in prem_sal.tolist()])
    print("hypothesis saliency:", [round(v, 3) for v in hypo_sal.tolist()])


if __name__ == '__main__':
    main()
