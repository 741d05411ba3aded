# expect: requires_grad_nonleaf
# source: https://github.com/yl4579/StyleTTS2/issues/259
"""First-stage acoustic training loop of a StyleTTS-style TTS model: text
encoder, text aligner with monotonic alignment, style encoder, waveform
decoder, multi-resolution STFT loss and, after TMA_epoch, transferable
monotonic aligner (TMA) training with adversarial and SLM losses."""
import time
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

config = {"epochs": 1, "batch_size": 2, "TMA_epoch": 0, "n_token": 20, "n_mels": 16, "hidden_dim": 32,
          "hop": 8, "optimizer_params": {"lr": 1e-4},
          "loss_params": {"lambda_mel": 5.0, "lambda_mono": 1.0, "lambda_s2s": 1.0,
                          "lambda_gen": 1.0, "lambda_slm": 1.0}}


def length_to_mask(lengths):
    mask = torch.arange(lengths.max()).unsqueeze(0).expand(lengths.shape[0], -1).type_as(lengths)
    return torch.gt(mask + 1, lengths.unsqueeze(1))


def maximum_path(attn, mask):
    """Hard monotonic path approximation: one-hot over text positions per frame."""
    idx = (attn.masked_fill(mask, -1e9)).argmax(dim=1)
    return F.one_hot(idx, attn.shape[1]).transpose(1, 2).float()


class TextEncoder(nn.Module):
    def __init__(self, n_token, channels):
        super().__init__()
        self.embedding = nn.Embedding(n_token, channels)
        self.cnn = nn.Sequential(nn.Conv1d(channels, channels, 5, padding=2), nn.LeakyReLU(0.2))

    def forward(self, x, input_lengths, m):
        x = self.embedding(x).transpose(1, 2).masked_fill(m.unsqueeze(1), 0.0)
        return self.cnn(x).masked_fill(m.unsqueeze(1), 0.0)


class TextAligner(nn.Module):
    def __init__(self, n_mels, n_token, hidden):
        super().__init__()
        self.mel_enc = nn.Conv1d(n_mels, hidden, 3, padding=1)
        self.tok_emb = nn.Embedding(n_token, hidden)
        self.ctc = nn.Linear(hidden, n_token)
        self.s2s = nn.Linear(hidden, n_token)

    def forward(self, mels, mel_mask, texts):
        h = self.mel_enc(mels).transpose(1, 2)  # B, T_mel, H
        q = self.tok_emb(texts)  # B, T_text, H
        scores = q @ h.transpose(1, 2) / h.shape[-1] ** 0.5
        s2s_attn = F.softmax(scores.masked_fill(mel_mask.unsqueeze(1), -1e9), dim=-1)  # B, T_text, T_mel
        s2s_pred = self.s2s(s2s_attn @ h)
        return self.ctc(h), s2s_pred, s2s_attn


class StyleEncoder(nn.Module):
    def __init__(self, n_mels, style_dim):
        super().__init__()
        self.net = nn.Sequential(nn.Conv1d(n_mels, style_dim, 3, padding=1), nn.LeakyReLU(0.2), nn.AdaptiveAvgPool1d(1))

    def forward(self, mels):
        return self.net(mels).squeeze(-1)


class Decoder(nn.Module):
    def __init__(self, channels, style_dim, hop):
        super().__init__()
        self.film = nn.Linear(style_dim, 2 * channels)
        self.up = nn.ConvTranspose1d(channels + 1, 1, kernel_size=hop, stride=hop)

    def forward(self, asr, F0, s):
        gamma, beta = self.film(s).unsqueeze(-1).chunk(2, dim=1)
        x = torch.cat([asr * (1 + gamma) + beta, F0.unsqueeze(1)], dim=1)
        return torch.tanh(self.up(x))


class Discriminator(nn.Module):
    def __init__(self, kernel):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv1d(1, 8, kernel, padding=kernel // 2), nn.Conv1d(8, 1, 3, padding=1)])

    def forward(self, y):
        fmap = []
        for conv in self.convs:
            y = F.leaky_relu(conv(y), 0.1)
            fmap.append(y)
        return y.flatten(1), fmap


class MultiResolutionSTFTLoss(nn.Module):
    def __init__(self, fft_sizes=(32, 64), hop_sizes=(8, 16)):
        super().__init__()
        self.cfg = list(zip(fft_sizes, hop_sizes))

    def forward(self, x, y):
        loss = 0
        for n_fft, hop in self.cfg:
            win = torch.hann_window(n_fft)
            X = torch.stft(x, n_fft, hop, window=win, return_complex=True).abs()
            Y = torch.stft(y, n_fft, hop, window=win, return_complex=True).abs()
            loss += F.l1_loss(torch.log(X + 1e-7), torch.log(Y + 1e-7))
        return loss / len(self.cfg)


class GeneratorLoss(nn.Module):
    def __init__(self, mpd, msd):
        super().__init__()
        self.mpd, self.msd = mpd, msd

    def forward(self, y, y_hat):
        loss = 0
        for d in (self.mpd, self.msd):
            d_real, fmap_r = d(y)
            d_fake, fmap_g = d(y_hat)
            loss += torch.mean((1 - d_fake) ** 2) + sum(F.l1_loss(g, r.detach()) for r, g in zip(fmap_r, fmap_g))
        return loss


class DiscriminatorLoss(nn.Module):
    def __init__(self, mpd, msd):
        super().__init__()
        self.mpd, self.msd = mpd, msd

    def forward(self, y, y_hat):
        return sum(torch.mean((1 - d(y)[0]) ** 2) + torch.mean(d(y_hat)[0] ** 2) for d in (self.mpd, self.msd))


class WavLMLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.wavlm = nn.Conv1d(1, 4, 16, stride=8)
        self.wavlm.requires_grad_(False)

    def forward(self, wav, y_rec):
        with torch.no_grad():
            target = self.wavlm(wav.unsqueeze(1))
        return F.l1_loss(self.wavlm(y_rec.unsqueeze(1)), target)


class MultiOptimizer:
    def __init__(self, optimizers):
        self.optimizers = optimizers

    def step(self, key=None):
        keys = [key] if key is not None else list(self.optimizers)
        for k in keys:
            self.optimizers[k].step()

    def zero_grad(self, key=None):
        for k in ([key] if key is not None else list(self.optimizers)):
            self.optimizers[k].zero_grad()


def build_model(cfg):
    H = cfg["hidden_dim"]
    return SimpleNamespace(text_encoder=TextEncoder(cfg["n_token"], H),
                           text_aligner=TextAligner(cfg["n_mels"], cfg["n_token"], H),
                           style_encoder=StyleEncoder(cfg["n_mels"], H),
                           decoder=Decoder(H, H, cfg["hop"]),
                           mpd=Discriminator(5), msd=Discriminator(9))


def make_batch(cfg, g):
    B, T_text, T_mel = cfg["batch_size"], 6, 12
    texts = torch.randint(1, cfg["n_token"], (B, T_text), generator=g)
    input_lengths = torch.tensor([T_text, T_text - 1])
    mels = torch.randn(B, cfg["n_mels"], T_mel, generator=g)
    mel_input_length = torch.tensor([T_mel, T_mel - 2])
    wav = torch.randn(B, T_mel * cfg["hop"], generator=g) * 0.1
    return texts, input_lengths, mels, mel_input_length, wav


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = build_model(config)
    loss_params = SimpleNamespace(**config["loss_params"])
    TMA_epoch = config["TMA_epoch"]
    stft_loss = MultiResolutionSTFTLoss()
    gl, dl = GeneratorLoss(model.mpd, model.msd), DiscriminatorLoss(model.mpd, model.msd)
    wl = WavLMLoss()
    optimizer = MultiOptimizer({k: torch.optim.AdamW(getattr(model, k).parameters(), **config["optimizer_params"])
                                for k in ("text_encoder", "text_aligner", "style_encoder", "decoder", "mpd", "msd")})
    for epoch in range(config["epochs"]):
        running_loss, start_time = 0, time.time()
        for i in range(3):
            texts, input_lengths, mels, mel_input_length, wav = make_batch(config, g)
            with torch.no_grad():
                mask = length_to_mask(mel_input_length)
                text_mask = length_to_mask(input_lengths)
            ppgs, s2s_pred, s2s_attn = model.text_aligner(mels, mask, texts)
            with torch.no_grad():
                attn_mask = text_mask.unsqueeze(-1) | mask.unsqueeze(1)
                s2s_attn_mono = maximum_path(s2s_attn, attn_mask)
            t_en = model.text_encoder(texts, input_lengths, text_mask)
            asr = t_en @ (s2s_attn if epoch >= TMA_epoch else s2s_attn_mono)
            with torch.no_grad():
                F0_real = mels.mean(dim=1)
            s = model.style_encoder(mels)
            y_rec = model.decoder(asr, F0_real, s).squeeze(1)

            if epoch >= TMA_epoch:
                optimizer.zero_grad()
                d_loss = dl(wav.detach().unsqueeze(1).float(), y_rec.detach().unsqueeze(1)).mean()
                d_loss.backward()
                optimizer.step('msd')
                optimizer.step('mpd')
            else:
                d_loss = 0

            loss_mel = stft_loss(y_rec, wav.detach())
            if epoch >= TMA_epoch:  # start TMA training
                loss_s2s = 0
                for _s2s_pred, _text_input, _text_length in zip(s2s_pred, texts, input_lengths):
                    loss_s2s += F.cross_entropy(_s2s_pred[:_text_length], _text_input[:_text_length])
                loss_s2s /= texts.size(0)
                loss_mono = F.l1_loss(s2s_attn, s2s_attn_mono) * 10
                loss_gen_all = gl(wav.detach().unsqueeze(1).float(), y_rec.unsqueeze(1)).mean()
                loss_slm = wl(wav.detach(), y_rec).mean()
                g_loss = loss_params.lambda_mel * loss_mel + \
                    loss_params.lambda_mono * loss_mono + \
                    loss_params.lambda_s2s * loss_s2s + \
                    loss_params.lambda_gen * loss_gen_all + \
                    loss_params.lambda_slm * loss_slm
                print(f'Generator loss is {g_loss.item():.4f}')
            else:
                loss_s2s = loss_mono = loss_gen_all = loss_slm = 0
                g_loss = loss_mel

            running_loss += loss_mel.item()
            optimizer.zero_grad()
            g_loss.requires_grad = True  # raises
            g_loss.backward()
            for k in ("text_encoder", "style_encoder", "decoder"):
                optimizer.step(k)
            if epoch >= TMA_epoch:
                optimizer.step('text_aligner')
            print(f'Epoch [{epoch + 1}/{config["epochs"]}], Step [{i + 1}/3], Mel Loss: {running_loss / (i + 1):.5f}, '
                  f'Disc Loss: {float(d_loss):.5f}, Time elapsed: {time.time() - start_time:.2f}')


if __name__ == "__main__":
    main()
