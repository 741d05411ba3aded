# expect: clean
# source: https://github.com/meta-pytorch/captum/issues/338
"""Image captioning (CNN encoder + LSTM decoder) with Integrated-Gradients attribution.

The project trains a show-and-tell style captioner (EncoderCNN producing an image
embedding, DecoderRNN with teacher forcing and a greedy sample() method), keeps a
vocabulary object, a training loop with Adam + StepLR and gradient clipping, and
then runs an interpretability pass: an IntegratedGradients helper (captum-style
attribute(inputs, baselines, target, n_steps)) attributes a chosen generated
word back to the image features.  Synthetic images and captions, CPU only.
"""
import argparse

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence


class Vocabulary:
    def __init__(self, words):
        self.itos = ["<pad>", "<start>", "<end>", "<unk>"] + list(words)
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    def __len__(self):
        return len(self.itos)

    def decode(self, ids):
        out = []
        for i in ids:
            w = self.itos[int(i)]
            if w == "<end>":
                break
            out.append(w)
        return " ".join(out)


class EncoderCNN(nn.Module):
    def __init__(self, embed_size):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1))
        self.linear = nn.Linear(32, embed_size)
        self.bn = nn.BatchNorm1d(embed_size, momentum=0.01)

    def forward(self, images):
        with torch.no_grad():
            feats = self.features(images)
        return self.bn(self.linear(feats.flatten(1)))


class DecoderRNN(nn.Module):
    def __init__(self, embed_size, hidden_size, vocab_size, num_layers=1, max_seq_length=8):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_size)
        self.lstm = nn.LSTM(embed_size, hidden_size, num_layers, batch_first=True)
        self.linear = nn.Linear(hidden_size, vocab_size)
        self.max_seg_length = max_seq_length

    def forward(self, features, captions, lengths):
        embeddings = self.embed(captions)
        embeddings = torch.cat((features.unsqueeze(1), embeddings), 1)
        packed = pack_padded_sequence(embeddings, lengths, batch_first=True)
        hiddens, _ = self.lstm(packed)
        return self.linear(hiddens[0])

    def sample(self, features, states=None):
        """Generate captions for given image features using greedy search."""
        sampled_ids = []
        inputs = features.unsqueeze(1)
        for _ in range(self.max_seg_length):
            hiddens, states = self.lstm(inputs, states)
            outputs = self.linear(hiddens.squeeze(1))
            _, predicted = outputs.max(1)
            sampled_ids.append(predicted)
            inputs = self.embed(predicted).unsqueeze(1)
        return torch.stack(sampled_ids, 1)


class CaptionFromFeatures(nn.Module):
    """Wrapper used for attribution: image embedding -> generated caption."""

    def __init__(self, decoder):
        super().__init__()
        self.decoder = decoder

    def forward(self, image_features):
        # probability of the greedily generated word at every position
        states, inputs, scores = None, image_features.unsqueeze(1), []
        for _ in range(self.decoder.max_seg_length):
            hiddens, states = self.decoder.lstm(inputs, states)
            probs = torch.softmax(self.decoder.linear(hiddens.squeeze(1)), dim=-1)
            top_prob, predicted = probs.max(1)
            scores.append(top_prob)
            inputs = self.decoder.embed(predicted).unsqueeze(1)
        return torch.stack(scores, 1)


class IntegratedGradients:
    def __init__(self, forward_func):
        self.forward_func = forward_func

    @staticmethod
    def _select_target(output, target):
        return output[:, target]

    def attribute(self, inputs, baselines, target, n_steps=16):
        alphas = torch.linspace(0, 1, n_steps)
        scaled = torch.cat([baselines + a * (inputs - baselines) for a in alphas]).requires_grad_()
        output = self.forward_func(scaled)
        selected = self._select_target(output, target)
        grads = torch.autograd.grad(torch.unbind(selected), scaled)[0]
        grads = grads.view(n_steps, *inputs.shape).mean(0)
        return (inputs - baselines) * grads


def synthetic_batch(args, vocab, gen):
    images = torch.rand(args.batch_size, 3, 32, 32, generator=gen)
    lengths = sorted(torch.randint(3, args.max_len, (args.batch_size,), generator=gen).tolist(), reverse=True)
    captions = torch.zeros(args.batch_size, max(lengths), dtype=torch.long)
    for i, n in enumerate(lengths):
        captions[i, :n] = torch.randint(4, len(vocab), (n,), generator=gen)
        captions[i, 0], captions[i, n - 1] = vocab.stoi["<start>"], vocab.stoi["<end>"]
    return images, captions, lengths


class CaptionTrainer:
    def __init__(self, args, vocab):
        self.args, self.vocab = args, vocab
        self.encoder = EncoderCNN(args.embed_size)
        self.decoder = DecoderRNN(args.embed_size, args.hidden_size, len(vocab), max_seq_length=args.max_len)
        params = list(self.decoder.parameters()) + list(self.encoder.linear.parameters()) + \
            list(self.encoder.bn.parameters())
        self.optimizer = torch.optim.Adam(params, lr=args.learning_rate)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=2, gamma=0.5)
        self.criterion = nn.CrossEntropyLoss()
        self.gen = torch.Generator().manual_seed(0)

    def train_step(self):
        images, captions, lengths = synthetic_batch(self.args, self.vocab, self.gen)
        # the image embedding is prepended, so drop the last token of each caption as input
        targets = pack_padded_sequence(captions, lengths, batch_first=True)[0]
        features = self.encoder(images)
        outputs = self.decoder(features, captions[:, :-1], lengths)
        loss = self.criterion(outputs, targets)
        self.decoder.zero_grad()
        self.encoder.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.decoder.parameters(), 5.0)
        self.optimizer.step()
        return loss.item()

    def fit(self):
        self.encoder.train(); self.decoder.train()
        for epoch in range(self.args.num_epochs):
            losses = [self.train_step() for _ in range(self.args.steps_per_epoch)]
            self.scheduler.step()
            print("epoch %d loss %.4f" % (epoch, sum(losses) / len(losses)))

    def explain(self, word_position):
        self.encoder.eval(); self.decoder.eval()
        images, _, _ = synthetic_batch(self.args, self.vocab, self.gen)
        image_features = self.encoder(images[:1]).detach()
        with torch.no_grad():
            caption = self.vocab.decode(self.decoder.sample(image_features)[0])
        ig = IntegratedGradients(CaptionFromFeatures(self.decoder))
        attributions = ig.attribute(inputs=image_features, baselines=image_features * 0.0,
                                    target=word_position, n_steps=self.args.ig_steps)
        print("caption: %s" % caption)
        print("attribution norm for word %d: %.4f" % (word_position, attributions.norm().item()))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--embed_size", type=int, default=16)
    p.add_argument("--hidden_size", type=int, default=32)
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--max_len", type=int, default=8)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--num_epochs", type=int, default=2)
    p.add_argument("--steps_per_epoch", type=int, default=3)
    p.add_argument("--ig_steps", type=int, default=8)
    args = p.parse_args([])
    torch.manual_seed(0)
    vocab = Vocabulary(["a", "dog", "cat", "on", "the", "grass", "sits", "runs", "red", "ball"])
    trainer = CaptionTrainer(args, vocab)
    trainer.fit()
    trainer.explain(word_position=3)


if __name__ == "__main__":
    main()
