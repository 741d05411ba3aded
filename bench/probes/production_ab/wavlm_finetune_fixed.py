# expect: clean
# source: https://github.com/microsoft/unilm/issues/806
"""Fine-tuning a WavLM-style self-supervised speech encoder for a downstream task.

Keeps the structure of the WavLM/wav2vec2 code: a WavLMConfig class built from
a dict, a convolutional waveform feature extractor, feature projection with
layer norm and dropout, a TransformerEncoder with a grouped convolutional
positional embedding (pos_conv + SamePad + GELU) and an extract_features()
method, a downstream utterance classifier (keyword spotting), and a fine-tuning
loop that keeps the CNN feature extractor frozen for the first steps, with a
tri-stage LR scheduler and a validation pass.  Random 16 kHz waveforms on CPU.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class WavLMConfig:
    def __init__(self, cfg=None):
        self.extractor_mode = "default"
        self.encoder_layers = 2
        self.encoder_embed_dim = 32
        self.encoder_ffn_embed_dim = 64
        self.encoder_attention_heads = 4
        self.conv_feature_layers = "[(16, 10, 5)] + [(16, 3, 2)] * 2"
        self.conv_pos = 8
        self.conv_pos_groups = 4
        self.dropout = 0.1
        self.dropout_input = 0.0
        self.layer_norm_first = False
        self.feature_grad_mult = 1.0
        if cfg is not None:
            self.update(cfg)

    def update(self, cfg):
        self.__dict__.update(cfg)


class ConvFeatureExtractionModel(nn.Module):
    def __init__(self, conv_layers, dropout=0.0):
        super().__init__()
        in_d = 1
        self.conv_layers = nn.ModuleList()
        for i, (dim, k, stride) in enumerate(conv_layers):
            block = [nn.Conv1d(in_d, dim, k, stride=stride, bias=False), nn.Dropout(dropout)]
            if i == 0:
                block.append(nn.GroupNorm(dim, dim, affine=True))
            block.append(nn.GELU())
            self.conv_layers.append(nn.Sequential(*block))
            in_d = dim

    def forward(self, x):
        x = x.unsqueeze(1)
        for conv in self.conv_layers:
            x = conv(x)
        return x


class SamePad(nn.Module):
    def __init__(self, kernel_size):
        super().__init__()
        self.remove = 1 if kernel_size % 2 == 0 else 0

    def forward(self, x):
        return x[:, :, :-self.remove] if self.remove > 0 else x


class TransformerEncoder(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.dropout = args.dropout
        self.embedding_dim = args.encoder_embed_dim
        self.pos_conv = nn.Conv1d(self.embedding_dim, self.embedding_dim, kernel_size=args.conv_pos,
                                  padding=args.conv_pos // 2, groups=args.conv_pos_groups)
        std = math.sqrt(4 / (args.conv_pos * self.embedding_dim))
        nn.init.normal_(self.pos_conv.weight, mean=0, std=std)
        nn.init.constant_(self.pos_conv.bias, 0)
        self.pos_conv = nn.utils.parametrizations.weight_norm(self.pos_conv, name="weight", dim=2)
        self.pos_conv = nn.Sequential(self.pos_conv, SamePad(args.conv_pos), nn.GELU())
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(self.embedding_dim, args.encoder_attention_heads,
                                       args.encoder_ffn_embed_dim, dropout=args.dropout,
                                       activation="gelu", batch_first=True)
            for _ in range(args.encoder_layers)])
        self.layer_norm_first = args.layer_norm_first
        self.layer_norm = nn.LayerNorm(self.embedding_dim)

    def forward(self, x, padding_mask=None):
        x, layer_results = self.extract_features(x, padding_mask)
        if self.layer_norm_first:
            x = self.layer_norm(x)
        return x, layer_results

    def extract_features(self, x, padding_mask=None):
        if padding_mask is not None:
            x[padding_mask] = 0
        x_conv = self.pos_conv(x.transpose(1, 2))
        x_conv = x_conv.transpose(1, 2)
        x = x + x_conv
        if not self.layer_norm_first:
            x = self.layer_norm(x)
        x = F.dropout(x, p=self.dropout, training=self.training)
        layer_results = []
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=padding_mask)
            layer_results.append(x)
        return x, layer_results


class WavLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        feature_enc_layers = eval(cfg.conv_feature_layers)
        self.embed = feature_enc_layers[-1][0]
        self.feature_extractor = ConvFeatureExtractionModel(feature_enc_layers, dropout=0.0)
        self.post_extract_proj = nn.Linear(self.embed, cfg.encoder_embed_dim) \
            if self.embed != cfg.encoder_embed_dim else None
        self.feature_grad_mult = cfg.feature_grad_mult
        self.dropout_input = nn.Dropout(cfg.dropout_input)
        self.layer_norm = nn.LayerNorm(self.embed)
        self.encoder = TransformerEncoder(cfg)

    def extract_features(self, source, padding_mask=None):
        if self.feature_grad_mult > 0:
            features = self.feature_extractor(source)
        else:
            with torch.no_grad():
                features = self.feature_extractor(source)
        features = self.layer_norm(features.transpose(1, 2))
        if self.post_extract_proj is not None:
            features = self.post_extract_proj(features)
        features = self.dropout_input(features)
        x, _ = self.encoder(features, padding_mask=padding_mask)
        return x, padding_mask


class KeywordClassifier(nn.Module):
    """Downstream head: weighted mean pooling over frames + linear projection."""

    def __init__(self, upstream, num_keywords):
        super().__init__()
        self.upstream = upstream
        self.pool_attn = nn.Linear(upstream.cfg.encoder_embed_dim, 1)
        self.proj = nn.Linear(upstream.cfg.encoder_embed_dim, num_keywords)

    def forward(self, wav):
        rep, _ = self.upstream.extract_features(wav)
        w = torch.softmax(self.pool_attn(rep), dim=1)
        return self.proj((w * rep).sum(1))


def tri_stage_lambda(warmup, hold, decay):
    def f(step):
        if step < warmup:
            return (step + 1) / warmup
        if step < warmup + hold:
            return 1.0
        return max(0.05, math.exp(-(step - warmup - hold) / max(1, decay)))
    return f


class FineTuner:
    def __init__(self, model, args):
        self.model, self.args = model, args
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=args["lr"], betas=(0.9, 0.98))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, tri_stage_lambda(2, 2, 4))
        self.num_updates = 0
        self.gen = torch.Generator().manual_seed(0)

    def set_feature_extractor_frozen(self):
        frozen = self.num_updates < self.args["freeze_finetune_updates"]
        self.model.upstream.feature_grad_mult = 0.0 if frozen else 1.0

    def batch(self):
        wav = torch.randn(self.args["batch_size"], self.args["num_samples"], generator=self.gen)
        labels = torch.randint(0, self.args["num_keywords"], (self.args["batch_size"],), generator=self.gen)
        return wav, labels

    def train_step(self):
        self.model.train()
        self.set_feature_extractor_frozen()
        wav, labels = self.batch()
        loss = F.cross_entropy(self.model(wav), labels)
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 10.0)
        self.optimizer.step()
        self.scheduler.step()
        self.num_updates += 1
        return loss.item()

    @torch.no_grad()
    def validate(self):
        self.model.eval()
        wav, labels = self.batch()
        return (self.model(wav).argmax(-1) == labels).float().mean().item()


def main():
    torch.manual_seed(0)
    args = {"lr": 5e-4, "batch_size": 2, "num_samples": 1600, "num_keywords": 5,
            "freeze_finetune_updates": 2, "max_updates": 6, "validate_interval": 3}
    upstream = WavLM(WavLMConfig({"encoder_layers": 2, "dropout": 0.1}))
    model = KeywordClassifier(upstream, args["num_keywords"])
    tuner = FineTuner(model, args)
    for step in range(args["max_updates"]):
        loss = tuner.train_step()
        print("update %d loss %.4f lr %.2e" % (step, loss, tuner.scheduler.get_last_lr()[0]))
        if (step + 1) % args["validate_interval"] == 0:
            print("valid acc %.3f" % tuner.validate())


if __name__ == "__main__":
    main()
