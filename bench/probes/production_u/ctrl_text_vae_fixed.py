# expect: clean
# source: https://github.com/GBLin5566/toward-controlled-generation-of-text-pytorch/issues/7
"""Controlled text generation with a VAE and an attribute discriminator.

Re-implementation of the "Toward Controlled Generation of Text" training
schedule: (1) pre-train a GRU sentence VAE, (2) train a CNN attribute
discriminator on labelled sentences, (3) train the VAE together with the
attribute losses L_attr_c (discriminator on soft generated sentences) and
L_attr_z (re-encoding generated sentences). The encoder keeps z_mean/z_sigma
as attributes, like the original code. Vocabulary and corpus are synthetic.
"""
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

BOS, EOS, PAD = 1, 2, 0


def get_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=30)
    p.add_argument("--maxlen", type=int, default=8)
    p.add_argument("--emb", type=int, default=16)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--z-dim", type=int, default=8)
    p.add_argument("--c-dim", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--n-sent", type=int, default=64)
    p.add_argument("--vae-epochs", type=int, default=1)
    p.add_argument("--disc-epochs", type=int, default=1)
    p.add_argument("--attr-epochs", type=int, default=1)
    p.add_argument("--lambda-c", type=float, default=0.1)
    p.add_argument("--lambda-z", type=float, default=0.1)
    p.add_argument("--temperature", type=float, default=0.5)
    return p.parse_args(argv)


class Encoder(nn.Module):
    def __init__(self, vocab, emb, hidden, z_dim):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.rnn = nn.GRU(emb, hidden, batch_first=True)
        self.to_mu = nn.Linear(hidden, z_dim)
        self.to_logsig = nn.Linear(hidden, z_dim)
        self.z_mean = None
        self.z_sigma = None

    def forward(self, x, dont_pass_emb=False):
        emb = x if dont_pass_emb else self.embedding(x)
        _, h = self.rnn(emb)
        h = h[-1]
        self.z_mean = self.to_mu(h)
        self.z_sigma = torch.exp(0.5 * self.to_logsig(h))
        eps = torch.randn_like(self.z_sigma)
        return self.z_mean + self.z_sigma * eps


class Decoder(nn.Module):
    def __init__(self, vocab, emb, hidden, z_dim, c_dim, temperature):
        super().__init__()
        self.vocab = vocab
        self.temperature = temperature
        self.embedding = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.init_h = nn.Linear(z_dim + c_dim, hidden)
        self.cell = nn.GRUCell(emb, hidden)
        self.out = nn.Linear(hidden, vocab)

    def one_hot_to_word_emb(self, one_hot):
        return one_hot @ self.embedding.weight

    def forward(self, z, c, maxlen):
        h = torch.tanh(self.init_h(torch.cat([z, c], dim=1)))
        word = F.one_hot(torch.full((z.size(0),), BOS, dtype=torch.long), self.vocab).float()
        logits_seq, soft_seq = [], []
        for _ in range(maxlen - 1):
            h = self.cell(self.one_hot_to_word_emb(word), h)
            pre_soft = self.out(h)
            word = F.softmax(pre_soft / self.temperature, dim=-1)
            logits_seq.append(pre_soft)
            soft_seq.append(word)
        return torch.stack(logits_seq, 1), torch.stack(soft_seq, 1)


class Discriminator(nn.Module):
    def __init__(self, vocab, emb, c_dim):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.convs = nn.ModuleList([nn.Conv1d(emb, 16, k) for k in (2, 3)])
        self.fc = nn.Linear(32, c_dim)

    def forward(self, x, dont_pass_emb=False):
        emb = x @ self.embedding.weight if dont_pass_emb else self.embedding(x)
        emb = emb.transpose(1, 2)
        feats = [F.relu(conv(emb)).max(dim=2).values for conv in self.convs]
        return self.fc(torch.cat(feats, dim=1))


def latent_loss(z_mean, z_sigma):
    mean_sq = z_mean * z_mean
    stddev_sq = z_sigma * z_sigma
    return 0.5 * torch.mean(mean_sq + stddev_sq - torch.log(stddev_sq + 1e-8) - 1)


def make_corpus(args, rng):
    x = rng.integers(3, args.vocab, size=(args.n_sent, args.maxlen))
    x[:, 0] = BOS
    y = (x[:, 1:].mean(axis=1) > args.vocab / 2).astype(np.int64)
    return torch.tensor(x), torch.tensor(y)


def get_batch(x, y, index, batch_size):
    return x[index:index + batch_size], y[index:index + batch_size]


class ControlledGenerationTrainer:
    def __init__(self, args, encoder, decoder, discriminator):
        self.args = args
        self.encoder, self.decoder, self.discriminator = encoder, decoder, discriminator
        self.criterion = nn.CrossEntropyLoss()
        self.vae_opt = torch.optim.Adam(list(encoder.parameters()) + list(decoder.parameters()), lr=1e-3)
        self.d_opt = torch.optim.Adam(discriminator.parameters(), lr=1e-3)

    def c_one_hot(self, y):
        return F.one_hot(y, self.args.c_dim).float()

    def reconstruction(self, inputs, labels):
        z = self.encoder(inputs)
        logits, soft = self.decoder(z, self.c_one_hot(labels), self.args.maxlen)
        vae_loss = self.criterion(logits.reshape(-1, self.args.vocab), inputs[:, 1:].reshape(-1))
        return vae_loss, soft

    def train_vae(self, x, y):
        for epoch in range(self.args.vae_epochs):
            for index in range(0, x.size(0), self.args.batch_size):
                inputs, labels = get_batch(x, y, index, self.args.batch_size)
                self.vae_opt.zero_grad()
                vae_loss, _ = self.reconstruction(inputs, labels)
                ll = latent_loss(self.encoder.z_mean, self.encoder.z_sigma)
                (vae_loss + ll).backward()
                self.vae_opt.step()
            print("[VAE] epoch %d loss %.4f" % (epoch, vae_loss.item()))

    def train_discriminator(self, x, y):
        self.discriminator.train()
        for epoch in range(self.args.disc_epochs):
            for index in range(0, x.size(0), self.args.batch_size):
                inputs, labels = get_batch(x, y, index, self.args.batch_size)
                self.d_opt.zero_grad()
                loss = self.criterion(self.discriminator(inputs), labels)
                loss.backward()
                self.d_opt.step()
            print("[D] epoch %d loss %.4f" % (epoch, loss.item()))

    def train_vae_with_attr_loss(self, x, y):
        for epoch in range(self.args.attr_epochs):
            for index in range(0, x.size(0), self.args.batch_size):
                inputs, labels = get_batch(x, y, index, self.args.batch_size)
                self.vae_opt.zero_grad()
                self.encoder.train()
                vae_loss, generated_sentence = self.reconstruction(inputs, labels)
                # NOTE Latent loss
                ll = latent_loss(self.encoder.z_mean, self.encoder.z_sigma)
                # NOTE L_attr_c loss
                self.discriminator.eval()
                logit = self.discriminator(generated_sentence, dont_pass_emb=True)
                l_attr_c = self.criterion(logit, labels)
                # NOTE L_attr_z loss
                self.encoder.eval()
                gen_emb = self.decoder.one_hot_to_word_emb(generated_sentence)
                self.encoder(gen_emb, dont_pass_emb=True)
                l_attr_z = latent_loss(self.encoder.z_mean, self.encoder.z_sigma)

                total_vae_loss = vae_loss + ll
                extra_decoder_loss = self.args.lambda_c * l_attr_c + self.args.lambda_z * l_attr_z
                (total_vae_loss + extra_decoder_loss).backward()
                self.vae_opt.step()
            print("[Attr] epoch %d vae %.4f l_attr_c %.4f l_attr_z %.4f" % (
                epoch, vae_loss.item(), l_attr_c.item(), l_attr_z.item()))


def main_alg(args, trainer, x, y):
    trainer.train_vae(x, y)
    trainer.train_discriminator(x, y)
    trainer.train_vae_with_attr_loss(x, y)


def main(argv=None):
    args = get_args(argv)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    x, y = make_corpus(args, rng)
    encoder = Encoder(args.vocab, args.emb, args.hidden, args.z_dim)
    decoder = Decoder(args.vocab, args.emb, args.hidden, args.z_dim, args.c_dim, args.temperature)
    discriminator = Discriminator(args.vocab, args.emb, args.c_dim)
    trainer = ControlledGenerationTrainer(args, encoder, decoder, discriminator)
    main_alg(args, trainer, x, y)


if __name__ == "__main__":
    main([])
