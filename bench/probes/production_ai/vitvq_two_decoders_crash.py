# expect: inplace_version
# source: https://github.com/thuanz123/enhancing-transformers/issues/11
"""ViT-VQGAN image tokenizer with an auxiliary decoder, enhancing-transformers style.

Keeps the layout of the ViT-VQ stage-1 model: nested config dicts, a patch-embedding
ViTEncoder and ViTDecoder built from PreNorm attention / feed-forward blocks with learned
positional embeddings, pre/post-quant projections, an l2-normalised VectorQuantizer with a
straight-through estimator, and a LightningModule-like wrapper.  This fine-tuning recipe
decodes every quantised token map twice: once to RGB and once (auxiliary decoder) to an
edge map.  AdamW with warm-up + cosine schedule, validation PSNR, synthetic 16x16 images.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = {
    "model": {
        "image_size": 16, "patch_size": 4, "dim": 32, "depth": 2, "heads": 4, "mlp_dim": 64,
        "quantizer": {"embed_dim": 8, "n_embed": 32, "beta": 0.25},
        "aux_decoder": {"enabled": True, "channels": 1, "weight": 0.5},
    },
    "optim": {"lr": 2e-4, "betas": (0.9, 0.99), "weight_decay": 1e-4, "warmup_steps": 2, "max_steps": 6},
    "data": {"batch_size": 4, "n_batches": 3, "seed": 0},
}


class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn

    def forward(self, x):
        return self.fn(self.norm(x))


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden_dim), nn.Tanh(), nn.Linear(hidden_dim, dim))

    def forward(self, x):
        return self.net(x)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.to_qkv = nn.Linear(dim, dim * 3, bias=False)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        qkv = self.to_qkv(x).chunk(3, dim=-1)
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in qkv)
        attn = (q @ k.transpose(-1, -2) * self.scale).softmax(dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(b, n, d)
        return self.to_out(out)


class Transformer(nn.Module):
    def __init__(self, dim, depth, heads, mlp_dim):
        super().__init__()
        self.layers = nn.ModuleList([
            nn.ModuleList([PreNorm(dim, Attention(dim, heads)), PreNorm(dim, FeedForward(dim, mlp_dim))])
            for _ in range(depth)
        ])
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        for attn, ff in self.layers:
            x = attn(x) + x
            x = ff(x) + x
        return self.norm(x)


def get_2d_sincos_pos_embed(dim, grid):
    pos = torch.arange(grid * grid, dtype=torch.float32).unsqueeze(1)
    omega = torch.exp(torch.arange(0, dim, 2).float() * (-math.log(10000.0) / dim))
    pe = torch.zeros(grid * grid, dim)
    pe[:, 0::2] = torch.sin(pos * omega)
    pe[:, 1::2] = torch.cos(pos * omega)
    return pe.unsqueeze(0)


class ViTEncoder(nn.Module):
    def __init__(self, image_size, patch_size, dim, depth, heads, mlp_dim, channels=3):
        super().__init__()
        self.patch_size = patch_size
        self.grid = image_size // patch_size
        self.to_patch_embedding = nn.Conv2d(channels, dim, kernel_size=patch_size, stride=patch_size)
        self.en_pos_embedding = nn.Parameter(get_2d_sincos_pos_embed(dim, self.grid), requires_grad=False)
        self.transformer = Transformer(dim, depth, heads, mlp_dim)

    def forward(self, img):
        x = self.to_patch_embedding(img).flatten(2).transpose(1, 2)
        x = x + self.en_pos_embedding
        return self.transformer(x)


class ViTDecoder(nn.Module):
    def __init__(self, image_size, patch_size, dim, depth, heads, mlp_dim, channels=3):
        super().__init__()
        self.grid = image_size // patch_size
        self.transformer = Transformer(dim, depth, heads, mlp_dim)
        self.de_pos_embedding = nn.Parameter(get_2d_sincos_pos_embed(dim, self.grid), requires_grad=False)
        self.to_pixel = nn.ConvTranspose2d(dim, channels, kernel_size=patch_size, stride=patch_size)

    def forward(self, token):
        token += self.de_pos_embedding
        x = self.transformer(token)
        b, n, d = x.shape
        x = x.transpose(1, 2).reshape(b, d, self.grid, self.grid)
        return self.to_pixel(x)


class VectorQuantizer(nn.Module):
    def __init__(self, embed_dim, n_embed, beta):
        super().__init__()
        self.beta = beta
        self.embedding = nn.Embedding(n_embed, embed_dim)
        nn.init.uniform_(self.embedding.weight, -1.0 / n_embed, 1.0 / n_embed)

    def forward(self, z):
        z = F.normalize(z, dim=-1)
        codebook = F.normalize(self.embedding.weight, dim=-1)
        d = z.pow(2).sum(-1, keepdim=True) - 2 * z @ codebook.t() + codebook.pow(2).sum(-1)
        idx = d.argmin(-1)
        z_q = F.normalize(self.embedding(idx), dim=-1)
        loss = self.beta * (z_q.detach() - z).pow(2).mean() + (z_q - z.detach()).pow(2).mean()
        z_q = z + (z_q - z).detach()
        return z_q, loss, idx


class ViTVQ(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        m = cfg["model"]
        q = m["quantizer"]
        common = dict(image_size=m["image_size"], patch_size=m["patch_size"], dim=m["dim"],
                      depth=m["depth"], heads=m["heads"], mlp_dim=m["mlp_dim"])
        self.encoder = ViTEncoder(**common)
        self.decoder = ViTDecoder(**common)
        self.aux_cfg = m["aux_decoder"]
        self.aux_decoder = ViTDecoder(**common, channels=self.aux_cfg["channels"]) if self.aux_cfg["enabled"] else None
        self.quantizer = VectorQuantizer(q["embed_dim"], q["n_embed"], q["beta"])
        self.pre_quant = nn.Linear(m["dim"], q["embed_dim"])
        self.post_quant = nn.Linear(q["embed_dim"], m["dim"])

    def encode(self, x):
        h = self.pre_quant(self.encoder(x))
        quant, emb_loss, _ = self.quantizer(h)
        return quant, emb_loss

    def forward(self, x):
        quant, diff = self.encode(x)
        quant = self.post_quant(quant)
        dec = self.decoder(quant)
        aux = self.aux_decoder(quant) if self.aux_decoder is not None else None
        return dec, aux, diff


def sobel_edges(img):
    gray = img.mean(1, keepdim=True)
    kx = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]]).view(1, 1, 3, 3)
    gx = F.conv2d(gray, kx, padding=1)
    gy = F.conv2d(gray, kx.transpose(-1, -2), padding=1)
    return (gx.pow(2) + gy.pow(2)).sqrt()


class Stage1Module:
    def __init__(self, cfg):
        self.cfg = cfg
        self.model = ViTVQ(cfg)
        o = cfg["optim"]
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=o["lr"], betas=o["betas"], weight_decay=o["weight_decay"])
        warm, total = o["warmup_steps"], o["max_steps"]
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, total - warm))),
        )
        self.global_step = 0

    def compute_loss(self, img):
        rec, aux, qloss = self.model(img)
        loss = F.l1_loss(rec, img) + qloss
        if aux is not None:
            loss = loss + self.cfg["model"]["aux_decoder"]["weight"] * F.l1_loss(aux, sobel_edges(img))
        return loss

    def train_step(self, img):
        self.model.train()
        self.optimizer.zero_grad()
        loss = self.compute_loss(img)
        loss.backward()  # raises
        self.optimizer.step()
        self.scheduler.step()
        self.global_step += 1
        return loss.item()

    @torch.no_grad()
    def evaluate(self, batches):
        self.model.eval()
        psnr = []
        for img in batches:
            rec, _, _ = self.model(img)
            mse = F.mse_loss(rec.clamp(-1, 1), img)
            psnr.append(10 * torch.log10(4.0 / mse).item())
        return sum(psnr) / len(psnr)


def make_batches(cfg):
    d = cfg["data"]
    g = torch.Generator().manual_seed(d["seed"])
    s = cfg["model"]["image_size"]
    return [torch.rand(d["batch_size"], 3, s, s, generator=g) * 2 - 1 for _ in range(d["n_batches"])]


def main():
    torch.manual_seed(CONFIG["data"]["seed"])
    module = Stage1Module(CONFIG)
    train, val = make_batches(CONFIG), make_batches({**CONFIG, "data": {**CONFIG["data"], "seed": 1}})
    for epoch in range(2):
        losses = [module.train_step(img) for img in train]
        print(f"epoch {epoch} loss {sum(losses) / len(losses):.4f} val_psnr {module.evaluate(val):.2f}")


if __name__ == "__main__":
    main()
