# expect: inplace_version
# source: https://github.com/jasonppy/word-discovery/pull/4
"""VG-HuBERT style audio-visual grounding: a HuBERT-like audio encoder with a
CLS token and a small image encoder, trained with a contrastive matching loss.

Audio encoder follows the fairseq wav2vec2/HuBERT layout used by word-discovery
(models/audio_encoder.py), scaled down for CPU.
"""
import argparse
import math
from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import nn


def build_args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--conv_feature_layers", type=str, default="[(32, 10, 5)] + [(32, 3, 2)] * 2")
    parser.add_argument("--extractor_mode", type=str, default="default")
    parser.add_argument("--conv_bias", action="store_true")
    parser.add_argument("--encoder_embed_dim", type=int, default=48)
    parser.add_argument("--encoder_ffn_embed_dim", type=int, default=96)
    parser.add_argument("--encoder_attention_heads", type=int, default=4)
    parser.add_argument("--layer_use", type=int, default=1)
    parser.add_argument("--conv_pos", type=int, default=16)
    parser.add_argument("--conv_pos_groups", type=int, default=4)
    parser.add_argument("--dropout_input", type=float, default=0.1)
    parser.add_argument("--dropout_features", type=float, default=0.1)
    parser.add_argument("--feature_grad_mult", type=float, default=0.1)
    parser.add_argument("--quantize_input", action="store_true")
    parser.add_argument("--use_audio_cls_token", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--n_epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--audio_feat_lr", type=float, default=5e-5)
    return parser.parse_args(argv)


class GradMultiply(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x.new(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None


class SamePad(nn.Module):
    def __init__(self, kernel_size):
        super().__init__()
        self.remove = 1 if kernel_size % 2 == 0 else 0

    def forward(self, x):
        if self.remove > 0:
            x = x[:, :, : -self.remove]
        return x


class ConvFeatureExtractionModel(nn.Module):
    def __init__(self, conv_layers: List[Tuple[int, int, int]], dropout=0.0, mode="default",
                 conv_bias=False):
        super().__init__()

        def block(n_in, n_out, k, stride, is_group_norm=False):
            conv = nn.Conv1d(n_in, n_out, k, stride=stride, bias=conv_bias)
            nn.init.kaiming_normal_(conv.weight)
            if is_group_norm:
                return nn.Sequential(conv, nn.Dropout(p=dropout),
                                     nn.GroupNorm(n_out, n_out, affine=True), nn.GELU())
            return nn.Sequential(conv, nn.Dropout(p=dropout), nn.GELU())

        in_d = 1
        self.conv_layers = nn.ModuleList()
        for i, (dim, k, stride) in enumerate(conv_layers):
            self.conv_layers.append(block(in_d, dim, k, stride,
                                          is_group_norm=(mode == "default" and i == 0)))
            in_d = dim

    def forward(self, x):
        x = x.unsqueeze(1)
        for conv in self.conv_layers:
            x = conv(x)
        return x


class TransformerSentenceEncoderLayer(nn.Module):
    def __init__(self, embedding_dim, ffn_embedding_dim, num_attention_heads, dropout=0.1):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(embedding_dim, num_attention_heads,
                                               dropout=dropout, batch_first=True)
        self.self_attn_layer_norm = nn.LayerNorm(embedding_dim)
        self.fc1 = nn.Linear(embedding_dim, ffn_embedding_dim)
        self.fc2 = nn.Linear(ffn_embedding_dim, embedding_dim)
        self.final_layer_norm = nn.LayerNorm(embedding_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, padding_mask=None):
        residual = x
        x, attn = self.self_attn(x, x, x, key_padding_mask=padding_mask, need_weights=True)
        x = self.self_attn_layer_norm(residual + self.dropout(x))
        residual = x
        x = self.fc2(self.dropout(F.gelu(self.fc1(x))))
        x = self.final_layer_norm(residual + self.dropout(x))
        return x, attn


class TransformerEncoder(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.layers = nn.ModuleList([
            TransformerSentenceEncoderLayer(args.encoder_embed_dim, args.encoder_ffn_embed_dim,
                                            args.encoder_attention_heads)
            for _ in range(args.encoder_layers)])
        self.layer_norm = nn.LayerNorm(args.encoder_embed_dim)

    def forward(self, x, padding_mask=None, tgt_layer=None):
        x = self.layer_norm(x)
        layer_feats = x
        for i, layer in enumerate(self.layers):
            x, _ = layer(x, padding_mask=padding_mask)
            if tgt_layer is not None and i == tgt_layer:
                layer_feats = x
        return x, layer_feats


class AudioEncoder(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        feature_enc_layers = eval(args.conv_feature_layers)
        self.embed = feature_enc_layers[-1][0]
        self.feature_extractor = ConvFeatureExtractionModel(
            conv_layers=feature_enc_layers, dropout=0.0, mode=args.extractor_mode,
            conv_bias=args.conv_bias)
        self.post_extract_proj = (
            nn.Linear(self.embed, args.encoder_embed_dim)
            if self.embed != args.encoder_embed_dim and not args.quantize_input else None)
        self.dropout_input = nn.Dropout(args.dropout_input)
        self.dropout_features = nn.Dropout(args.dropout_features)
        self.feature_grad_mult = args.feature_grad_mult

        self.pos_conv = nn.Conv1d(args.encoder_embed_dim, args.encoder_embed_dim,
                                  kernel_size=args.conv_pos, padding=args.conv_pos // 2,
                                  groups=args.conv_pos_groups)
        std = math.sqrt(4 / (args.conv_pos * args.encoder_embed_dim))
        nn.init.normal_(self.pos_conv.weight, mean=0, std=std)
        nn.init.constant_(self.pos_conv.bias, 0)
        self.pos_conv = nn.utils.parametrizations.weight_norm(self.pos_conv, name="weight", dim=2)
        self.pos_conv = nn.Sequential(self.pos_conv, SamePad(args.conv_pos), nn.GELU())
        args.encoder_layers = args.layer_use + 1
        self.encoder = TransformerEncoder(args)
        self.layer_norm = nn.LayerNorm(self.embed)
        if self.args.use_audio_cls_token:
            self.cls_token = nn.Parameter(torch.randn((1, 1, args.encoder_embed_dim)))

    def forward(self, source, padding_mask=None, tgt_layer=None):
        if self.feature_grad_mult > 0:
            features = self.feature_extractor(source)
            if self.feature_grad_mult != 1.0:
                features = GradMultiply.apply(features, self.feature_grad_mult)
        else:
            with torch.no_grad():
                features = self.feature_extractor(source)

        features_pen = features.float().pow(2).mean()
        features = features.transpose(1, 2)
        features = self.layer_norm(features)
        unmasked_features = features.clone()
        if self.post_extract_proj is not None:
            features = self.post_extract_proj(features)

        features = self.dropout_input(features)
        unmasked_features = self.dropout_features(unmasked_features)

        x = features
        x_conv = self.pos_conv(x.transpose(1, 2))
        x_conv = x_conv.transpose(1, 2)
        x += x_conv
        if self.args.use_audio_cls_token:
            x = torch.cat([self.cls_token.repeat(x.shape[0], 1, 1), x], dim=1)

        features, layer_feats = self.encoder(x, padding_mask=padding_mask, tgt_layer=tgt_layer)
        if self.args.use_audio_cls_token:
            cls_token = layer_feats[:, 0]
            features = features[:, 1:]
        else:
            cls_token = None
        return {"features": features, "cls_token": cls_token, "features_pen": features_pen}

    def get_extra_losses(self, net_output):
        pen = []
        if "features_pen" in net_output and self.feature_grad_mult > 0:
            pen.append(net_output["features_pen"])
        return pen


class VisualEncoder(nn.Module):
    def __init__(self, embed_dim):
        super().__init__()
        self.patch = nn.Conv2d(3, embed_dim, kernel_size=8, stride=8)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.block = TransformerSentenceEncoderLayer(embed_dim, 2 * embed_dim, 4)

    def forward(self, images):
        x = self.patch(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x, _ = self.block(x)
        return x[:, 0]


class DualEncoder(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.audio_encoder = AudioEncoder(args)
        self.visual_encoder = VisualEncoder(args.encoder_embed_dim)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(10.0)))

    def forward(self, audio, images):
        audio_out = self.audio_encoder(audio, tgt_layer=self.audio_encoder.args.layer_use)
        a = F.normalize(audio_out["cls_token"], dim=-1)
        v = F.normalize(self.visual_encoder(images), dim=-1)
        logits = self.logit_scale.exp() * a @ v.t()
        target = torch.arange(logits.shape[0])
        loss = 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.t(), target))
        extra = self.audio_encoder.get_extra_losses(audio_out)
        if extra:
            loss = loss + 10.0 * sum(extra)
        return loss, logits


class Trainer:
    def __init__(self, args, model):
        self.args = args
        self.model = model
        feat_params = list(model.audio_encoder.feature_extractor.parameters())
        feat_ids = {id(p) for p in feat_params}
        other = [p for p in model.parameters() if id(p) not in feat_ids]
        self.optimizer = torch.optim.AdamW([
            {"params": feat_params, "lr": args.audio_feat_lr},
            {"params": other, "lr": args.lr}], weight_decay=0.01)
        self.progress = {"step": 0, "best_acc": 0.0}

    def synthetic_batches(self, n_batches):
        g = torch.Generator().manual_seed(1)
        for _ in range(n_batches):
            audio = torch.randn(self.args.batch_size, 1600, generator=g)
            images = torch.rand(self.args.batch_size, 3, 32, 32, generator=g)
            yield audio, images

    @torch.no_grad()
    def validate(self):
        self.model.eval()
        correct = total = 0
        for audio, images in self.synthetic_batches(2):
            _, logits = self.model(audio, images)
            correct += (logits.argmax(1) == torch.arange(logits.shape[0])).sum().item()
            total += logits.shape[0]
        self.model.train()
        return correct / total

    def train(self):
        self.model.train()
        for epoch in range(self.args.n_epochs):
            for audio, images in self.synthetic_batches(3):
                loss, _ = self.model(audio, images)
                self.optimizer.zero_grad()
                loss.backward()  # raises
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), 10.0)
                self.optimizer.step()
                self.progress["step"] += 1
            acc = self.validate()
            print("epoch {} step {} loss {:.4f} R@1 {:.3f}".format(
                epoch, self.progress["step"], loss.item(), acc))


def main():
    torch.manual_seed(0)
    args = build_args([])
    model = DualEncoder(args)
    Trainer(args, model).train()


if __name__ == "__main__":
    main()
