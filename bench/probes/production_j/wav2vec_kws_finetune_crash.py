# expect: inplace_version
# source: https://github.com/dobby-seo/Wav2Keyword/pull/9
"""Keyword spotting by fine-tuning a (tiny) wav2vec 2.0 encoder.

The encoder follows fairseq's Wav2Vec2Model / TransformerEncoder layout
(conv feature extractor, post-extract projection, convolutional relative
positional embedding, post-LN transformer layers); the downstream head is the
KWS conv decoder from downstream_kws.py.
"""
import math
from argparse import Namespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Fp32GroupNorm(nn.GroupNorm):
    def forward(self, input):
        output = F.group_norm(input.float(), self.num_groups, self.weight.float(),
                              self.bias.float(), self.eps)
        return output.type_as(input)


class ConvFeatureExtractionModel(nn.Module):
    def __init__(self, conv_layers, dropout=0.0):
        super().__init__()

        def block(n_in, n_out, k, stride, is_group_norm=False):
            layers = [nn.Conv1d(n_in, n_out, k, stride=stride, bias=False), nn.Dropout(p=dropout)]
            if is_group_norm:
                layers.append(Fp32GroupNorm(n_out, n_out, affine=True))
            layers.append(nn.GELU())
            return nn.Sequential(*layers)

        in_d = 1
        self.conv_layers = nn.ModuleList()
        for i, (dim, k, stride) in enumerate(conv_layers):
            self.conv_layers.append(block(in_d, dim, k, stride, is_group_norm=i == 0))
            in_d = dim

    def forward(self, x):
        x = x.unsqueeze(1)  # BxT -> BxCxT
        for conv in self.conv_layers:
            x = conv(x)
        return x


class SamePad(nn.Module):
    def __init__(self, kernel_size):
        super().__init__()
        self.remove = 1 if kernel_size % 2 == 0 else 0

    def forward(self, x):
        if self.remove > 0:
            x = x[:, :, :-self.remove]
        return x


class TransformerSentenceEncoderLayer(nn.Module):
    def __init__(self, embedding_dim, ffn_embedding_dim, num_attention_heads, dropout):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(embedding_dim, num_attention_heads, dropout=dropout)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.self_attn_layer_norm = nn.LayerNorm(embedding_dim)
        self.fc1 = nn.Linear(embedding_dim, ffn_embedding_dim)
        self.fc2 = nn.Linear(ffn_embedding_dim, embedding_dim)
        self.final_layer_norm = nn.LayerNorm(embedding_dim)

    def forward(self, x, self_attn_padding_mask=None):
        residual = x
        x, attn = self.self_attn(x, x, x, key_padding_mask=self_attn_padding_mask, need_weights=False)
        x = self.dropout1(x)
        x = self.self_attn_layer_norm(residual + x)
        residual = x
        x = F.gelu(self.fc1(x))
        x = self.dropout2(self.fc2(x))
        x = self.final_layer_norm(residual + x)
        return x, attn


class TransformerEncoder(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.dropout = args.dropout
        self.embedding_dim = args.encoder_embed_dim
        self.pos_conv = nn.Conv1d(self.embedding_dim, self.embedding_dim, kernel_size=args.conv_pos,
                                  padding=args.conv_pos // 2, groups=args.conv_pos_groups)
        std = math.sqrt((4 * (1.0 - self.dropout)) / (args.conv_pos * self.embedding_dim))
        nn.init.normal_(self.pos_conv.weight, mean=0, std=std)
        nn.init.constant_(self.pos_conv.bias, 0)
        self.pos_conv = nn.utils.parametrizations.weight_norm(self.pos_conv, name="weight", dim=2)
        self.pos_conv = nn.Sequential(self.pos_conv, SamePad(args.conv_pos), nn.GELU())
        self.layers = nn.ModuleList([
            TransformerSentenceEncoderLayer(self.embedding_dim, args.encoder_ffn_embed_dim,
                                            args.encoder_attention_heads, self.dropout)
            for _ in range(args.encoder_layers)])
        self.layer_norm_first = args.layer_norm_first
        self.layer_norm = nn.LayerNorm(self.embedding_dim)
        self.layerdrop = args.encoder_layerdrop

    def forward(self, x, padding_mask=None):
        x = self.extract_features(x, padding_mask)
        if self.layer_norm_first:
            x = self.layer_norm(x)
        return x

    def extract_features(self, x, padding_mask=None):
        if padding_mask is not None:
            x[padding_mask] = 0

        x_conv = self.pos_conv(x.transpose(1, 2))
        x_conv = x_conv.transpose(1, 2)
        x += x_conv

        if not self.layer_norm_first:
            x = self.layer_norm(x)

        x = F.dropout(x, p=self.dropout, training=self.training)
        # B x T x C -> T x B x C
        x = x.transpose(0, 1)
        for layer in self.layers:
            dropout_probability = np.random.random()
            if not self.training or (dropout_probability > self.layerdrop):
                x, _ = layer(x, self_attn_padding_mask=padding_mask)
        return x.transpose(0, 1)


class Wav2Vec2Model(nn.Module):
    def __init__(self, args):
        super().__init__()
        feature_enc_layers = eval(args.conv_feature_layers)
        self.embed = feature_enc_layers[-1][0]
        self.feature_extractor = ConvFeatureExtractionModel(feature_enc_layers, dropout=0.0)
        self.post_extract_proj = nn.Linear(self.embed, args.encoder_embed_dim)
        self.dropout_input = nn.Dropout(args.dropout_input)
        self.layer_norm = nn.LayerNorm(self.embed)
        self.encoder = TransformerEncoder(args)
        self.feature_grad_mult = args.feature_grad_mult

    def forward(self, source, padding_mask=None, features_only=True):
        if self.feature_grad_mult > 0:
            features = self.feature_extractor(source)
        else:
            with torch.no_grad():
                features = self.feature_extractor(source)
        features = features.transpose(1, 2)
        features = self.layer_norm(features)
        features = self.post_extract_proj(features)
        x = self.dropout_input(features)
        x = self.encoder(x, padding_mask=padding_mask)
        return {"x": x, "padding_mask": padding_mask}


class KWS(nn.Module):
    def __init__(self, args, n_class):
        super().__init__()
        self.w2v_encoder = Wav2Vec2Model(args)
        out_channels = 24
        self.decoder = nn.Sequential(
            nn.Conv1d(args.encoder_embed_dim, out_channels, 5, dilation=2),
            nn.BatchNorm1d(out_channels), nn.ReLU(),
            nn.Conv1d(out_channels, out_channels, 1),
            nn.BatchNorm1d(out_channels), nn.ReLU(),
            nn.Conv1d(out_channels, n_class, 1))
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x):
        output = self.w2v_encoder(**x, features_only=True)["x"]
        output = output.transpose(1, 2)
        output = self.decoder(output).mean(-1)
        if self.training:
            return self.softmax(output)
        return output


CLASSES = 'unknown, silence, yes, no, up, down'.split(', ')


def synth_speech_commands(n, sr, rng):
    """Each keyword is a short chirp at its own pitch, plus background noise."""
    labels = rng.randint(0, len(CLASSES), size=n)
    t = np.arange(sr) / sr
    wavs = []
    for c in labels:
        f0 = 200 + 120 * c
        onset = rng.randint(0, sr // 4)
        env = np.zeros(sr)
        env[onset:onset + sr // 2] = np.hanning(sr // 2)
        wav = 0.0 if c == 1 else env * np.sin(2 * np.pi * (f0 + 300 * t) * t)
        wavs.append(wav + 0.05 * rng.randn(sr))
    return torch.tensor(np.stack(wavs), dtype=torch.float32), torch.from_numpy(labels).long()


def evaluate(model, wavs, labels, batch_size):
    model.eval()
    correct = 0
    with torch.no_grad():
        for b in range(0, len(labels), batch_size):
            logits = model({"source": wavs[b:b + batch_size]})
            correct += (logits.argmax(-1) == labels[b:b + batch_size]).sum().item()
    model.train()
    return correct / len(labels)


def main():
    args = Namespace(conv_feature_layers="[(16, 10, 5), (16, 3, 2), (16, 3, 2), (16, 2, 2)]",
                     encoder_embed_dim=32, encoder_ffn_embed_dim=64, encoder_attention_heads=2,
                     encoder_layers=2, conv_pos=8, conv_pos_groups=4, dropout=0.1,
                     dropout_input=0.1, encoder_layerdrop=0.0, layer_norm_first=False,
                     feature_grad_mult=0.1, sample_rate=1600, batch_size=8, epochs=2, seed=0)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    rng = np.random.RandomState(args.seed)
    train_x, train_y = synth_speech_commands(32, args.sample_rate, rng)
    valid_x, valid_y = synth_speech_commands(16, args.sample_rate, rng)

    model = KWS(args, n_class=len(CLASSES))
    optimizer = torch.optim.Adam([
        {'params': model.w2v_encoder.parameters(), 'lr': 1e-5},
        {'params': model.decoder.parameters(), 'lr': 5e-4},
    ], weight_decay=1e-5)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.85)
    criterion = nn.CrossEntropyLoss()

    for epoch in range(args.epochs):
        model.train()
        running = 0.0
        for b in range(0, len(train_y), args.batch_size):
            optimizer.zero_grad()
            output = model({"source": train_x[b:b + args.batch_size]})
            loss = criterion(output, train_y[b:b + args.batch_size])
            loss.backward()  # raises
            optimizer.step()
            running += loss.item()
        scheduler.step()
        acc = evaluate(model, valid_x, valid_y, args.batch_size)
        print(f"epoch {epoch}: train loss {running:.3f}, valid acc {acc:.3f}")


main()
