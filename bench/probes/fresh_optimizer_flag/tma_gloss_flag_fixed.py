# expect: clean
# source: https://github.com/yl4579/StyleTTS2/issues/258
import random
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

config = {
    'epochs_1st': 3,
    'batch_size': 4,
    'n_token': 20,
    'n_mels': 8,
    'hidden_dim': 16,
    'style_dim': 8,
    'freeze_acoustic': True,
    'optimizer_params': {'lr': 1e-3},
    'loss_params': {'lambda_mel': 5., 'lambda_gen': 1., 'lambda_slm': 1., 'lambda_mono': 1.,
                    'lambda_s2s': 1., 'TMA_epoch': 2},
}


class ASRCNN(nn.Module):
    def __init__(self, n_mels, hidden, n_token):
        super().__init__()
        self.mel_proj = nn.Conv1d(n_mels, hidden, 3, padding=1)
        self.tok_emb = nn.Embedding(n_token, hidden)
        self.ctc = nn.Linear(hidden, n_token)
        self.s2s = nn.Linear(hidden, n_token)

    def forward(self, mels, mask, texts):
        h = torch.relu(self.mel_proj(mels)).transpose(1, 2)            # B x M x H
        q = self.tok_emb(texts)                                          # B x T x H
        s2s_attn = torch.softmax(q @ h.transpose(1, 2) / 4.0, dim=1)     # B x T x M
        s2s_pred = self.s2s(s2s_attn @ h)                                # B x T x V
        return self.ctc(h), s2s_pred, s2s_attn


class TextEncoder(nn.Module):
    def __init__(self, n_token, hidden):
        super().__init__()
        self.embedding = nn.Embedding(n_token, hidden)
        self.cnn = nn.Conv1d(hidden, hidden, 3, padding=1)

    def forward(self, texts, input_lengths, text_mask):
        x = self.embedding(texts).transpose(1, 2)
        return torch.relu(self.cnn(x)).masked_fill(text_mask.unsqueeze(1), 0.)


class Decoder(nn.Module):
    def __init__(self, hidden, n_mels, style_dim):
        super().__init__()
        self.f0_proj = nn.Conv1d(1, hidden, 1)
        self.style = nn.Linear(style_dim, hidden)
        self.out = nn.Conv1d(hidden, n_mels, 3, padding=1)

    def forward(self, asr, F0_curve, s):
        x = asr + self.f0_proj(F0_curve.unsqueeze(1)) + self.style(s).unsqueeze(-1)
        return self.out(torch.tanh(x))


class Discriminator(nn.Module):
    def __init__(self, n_mels):
        super().__init__()
        self.net = nn.Sequential(nn.Conv1d(n_mels, 8, 3, padding=1), nn.LeakyReLU(0.1), nn.Conv1d(8, 1, 3, padding=1))

    def forward(self, x):
        return self.net(x)


def build_model(cfg):
    n_mels, hidden, n_token = cfg['n_mels'], cfg['hidden_dim'], cfg['n_token']
    return SimpleNamespace(**{
        'text_aligner': ASRCNN(n_mels, hidden, n_token),
        'pitch_extractor': nn.Sequential(nn.Conv1d(n_mels, 1, 3, padding=1)),
        'text_encoder': TextEncoder(n_token, hidden),
        'style_encoder': nn.Sequential(nn.Conv1d(n_mels, cfg['style_dim'], 3, padding=1), nn.AdaptiveAvgPool1d(1), nn.Flatten()),
        'decoder': Decoder(hidden, n_mels, cfg['style_dim']),
        'msd': Discriminator(n_mels),
    })


class MultiOptimizer:
    def __init__(self, optimizers):
        self.optimizers = optimizers

    def step(self, key):
        self.optimizers[key].step()

    def zero_grad(self):
        for opt in self.optimizers.values():
            opt.zero_grad()


def length_to_mask(lengths, max_len):
    return torch.arange(max_len).unsqueeze(0) >= lengths.unsqueeze(1)


def maximum_path(attn):
    return F.one_hot(attn.argmax(1), attn.size(1)).transpose(1, 2).float()


def make_batches(cfg, n_batches=3, T=6, M=12):
    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(n_batches):
        texts = torch.randint(1, cfg['n_token'], (cfg['batch_size'], T), generator=g)
        input_lengths = torch.full((cfg['batch_size'],), T)
        mels = torch.randn(cfg['batch_size'], cfg['n_mels'], M, generator=g)
        mel_input_length = torch.full((cfg['batch_size'],), M)
        batches.append((texts, input_lengths, mels, mel_input_length))
    return batches


def main():
    random.seed(0); np.random.seed(0); torch.manual_seed(0)
    loss_params = SimpleNamespace(**config['loss_params'])
    TMA_epoch = loss_params.TMA_epoch
    model = build_model(config)
    if config['freeze_acoustic']:
        for key in ['text_encoder', 'style_encoder', 'decoder']:
            getattr(model, key).requires_grad_(False)
    optimizer = MultiOptimizer({key: torch.optim.AdamW(m.parameters(), **config['optimizer_params'])
                                for key, m in vars(model).items()})
    train_dataloader = make_batches(config)

    for epoch in range(config['epochs_1st']):
        running_loss = 0
        for i, batch in enumerate(train_dataloader):
            texts, input_lengths, mels, mel_input_length = batch
            with torch.no_grad():
                mask = length_to_mask(mel_input_length, mels.size(-1))
                text_mask = length_to_mask(input_lengths, texts.size(-1))

            if epoch >= TMA_epoch:
                ppgs, s2s_pred, s2s_attn = model.text_aligner(mels, mask, texts)
            else:
                with torch.no_grad():
                    ppgs, s2s_pred, s2s_attn = model.text_aligner(mels, mask, texts)

            with torch.no_grad():
                s2s_attn_mono = maximum_path(s2s_attn)
                F0_real = model.pitch_extractor(mels).squeeze(1)

            t_en = model.text_encoder(texts, input_lengths, text_mask)
            asr = (t_en @ s2s_attn) if bool(random.getrandbits(1)) else (t_en @ s2s_attn_mono)
            s = model.style_encoder(mels)
            y_rec = model.decoder(asr, F0_real, s)
            wav = mels

            if epoch >= TMA_epoch:
                optimizer.zero_grad()
                d_loss = (F.relu(1 - model.msd(wav)).mean() + F.relu(1 + model.msd(y_rec.detach())).mean())
                d_loss.backward()
                optimizer.step('msd')
            else:
                d_loss = 0

            loss_mel = F.l1_loss(y_rec, wav.detach())
            if epoch >= TMA_epoch: # start TMA training
                loss_s2s = 0
                for _s2s_pred, _text_input, _text_length in zip(s2s_pred, texts, input_lengths):
                    loss_s2s += F.cross_entropy(_s2s_pred[:_text_length], _text_input[:_text_length])
                loss_s2s /= texts.size(0)
                loss_mono = F.l1_loss(s2s_attn, s2s_attn_mono) * 10
                loss_gen_all = (-model.msd(y_rec)).mean()
                loss_slm = F.l1_loss(y_rec.mean(-1), wav.detach().mean(-1))
                g_loss = loss_params.lambda_mel * loss_mel + \
                    loss_params.lambda_mono * loss_mono + \
                    loss_params.lambda_s2s * loss_s2s + \
                    loss_params.lambda_gen * loss_gen_all + \
                    loss_params.lambda_slm * loss_slm
            else:
                loss_s2s = 0
                loss_mono = 0
                loss_gen_all = 0
                loss_slm = 0
                g_loss = loss_mel

            running_loss += loss_mel.item()
            optimizer.zero_grad()
            if g_loss.requires_grad:
                g_loss.backward()

            optimizer.step('text_encoder')
            optimizer.step('style_encoder')
            optimizer.step('decoder')
            if epoch >= TMA_epoch:
                optimizer.step('text_aligner')
                optimizer.step('pitch_extractor')

        print('Epoch [%d/%d], Mel Loss: %.5f, Disc Loss: %.5f, Mono Loss: %.5f, S2S Loss: %.5f'
              % (epoch + 1, config['epochs_1st'], running_loss / len(train_dataloader), d_loss, loss_mono, loss_s2s))


if __name__ == "__main__":
    main()
