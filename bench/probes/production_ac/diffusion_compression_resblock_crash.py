# expect: inplace_version
# source: https://github.com/buggyyang/CDC_compression/issues/1
"""Conditional diffusion model for lossy image compression (epsilon-parameterised).

An analysis transform compresses the image into a quantised latent; a
denoising U-Net conditioned on the upsampled latent and on the diffusion time
embedding is trained with the standard DDPM noise-prediction loss (plus a
rate proxy).  Building blocks follow the project's network_components.py:
Block (conv / channel LayerNorm / ReLU), ResnetBlock with a time-MLP,
SinusoidalPosEmb, Residual+PreNorm linear attention.  An EMA copy of the
denoiser is kept for evaluation sampling.
"""
import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

config = {
    "image_size": 16, "channels": 3, "dim": 16, "context_dim": 8, "timesteps": 50,
    "batch_size": 4, "lr": 2e-4, "train_steps": 4, "ema_decay": 0.99, "lambda_rate": 1e-3,
    "sample_steps": 5, "seed": 0,
}


def exists(x):
    return x is not None


class SinusoidalPosEmb(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        half_dim = self.dim // 2
        emb = math.log(10000) / (half_dim - 1)
        emb = torch.exp(torch.arange(half_dim, device=x.device) * -emb)
        emb = x[:, None] * emb[None, :]
        return torch.cat((emb.sin(), emb.cos()), dim=-1)


class LayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.g = nn.Parameter(torch.ones(1, dim, 1, 1))
        self.b = nn.Parameter(torch.zeros(1, dim, 1, 1))

    def forward(self, x):
        var = torch.var(x, dim=1, unbiased=False, keepdim=True)
        mean = torch.mean(x, dim=1, keepdim=True)
        return (x - mean) / (var + self.eps).sqrt() * self.g + self.b


class Block(nn.Module):
    def __init__(self, dim, dim_out, large=False):
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv2d(dim, dim_out, 7 if large else 3, padding=3 if large else 1), LayerNorm(dim_out), nn.ReLU())

    def forward(self, x):
        return self.block(x)


class ResnetBlock(nn.Module):
    def __init__(self, dim, dim_out, time_emb_dim=None, large=False):
        super().__init__()
        self.mlp = (nn.Sequential(nn.LeakyReLU(0.2), nn.Linear(time_emb_dim, dim_out))
                    if exists(time_emb_dim) else None)
        self.block1 = Block(dim, dim_out, large)
        self.block2 = Block(dim_out, dim_out)
        self.res_conv = nn.Conv2d(dim, dim_out, 1) if dim != dim_out else nn.Identity()

    def forward(self, x, time_emb=None):
        h = self.block1(x)
        if exists(time_emb):
            h += self.mlp(time_emb)[:, :, None, None]
        h = self.block2(h)
        return h + self.res_conv(x)


class LinearAttention(nn.Module):
    def __init__(self, dim, heads=1):
        super().__init__()
        self.heads = heads
        self.scale = dim ** -0.5
        self.to_qkv = nn.Conv2d(dim, dim * 3, 1, bias=False)
        self.to_out = nn.Conv2d(dim, dim, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        q, k, v = (t.reshape(b, c, h * w) for t in self.to_qkv(x).chunk(3, dim=1))
        k = k.softmax(dim=-1)
        context = torch.einsum("bdn,ben->bde", k, v)
        out = torch.einsum("bde,bdn->ben", context, q * self.scale)
        return self.to_out(out.reshape(b, c, h, w))


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, *args, **kwargs):
        return self.fn(x, *args, **kwargs) + x


class Compressor(nn.Module):
    """Analysis transform with straight-through rounding as the quantiser."""

    def __init__(self, channels, context_dim):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(channels, 16, 4, 2, 1), nn.ReLU(), nn.Conv2d(16, context_dim, 4, 2, 1))

    def forward(self, x):
        y = self.enc(x)
        y_hat = y + (torch.round(y) - y).detach()
        rate = torch.log1p(y_hat.abs()).mean()
        return y_hat, rate


class ConditionalUnet(nn.Module):
    def __init__(self, dim, channels, context_dim):
        super().__init__()
        time_dim = dim * 2
        self.time_mlp = nn.Sequential(SinusoidalPosEmb(dim), nn.Linear(dim, time_dim), nn.GELU(), nn.Linear(time_dim, time_dim))
        self.init_conv = nn.Conv2d(channels + context_dim, dim, 3, padding=1)
        self.down = ResnetBlock(dim, dim * 2, time_emb_dim=time_dim)
        self.downsample = nn.Conv2d(dim * 2, dim * 2, 3, 2, 1)
        self.mid = ResnetBlock(dim * 2, dim * 2, time_emb_dim=time_dim)
        self.mid_attn = Residual(LinearAttention(dim * 2))
        self.upsample = nn.ConvTranspose2d(dim * 2, dim * 2, 4, 2, 1)
        self.up = ResnetBlock(dim * 4, dim, time_emb_dim=time_dim)
        self.final_conv = nn.Conv2d(dim, channels, 1)

    def forward(self, x, t, context):
        context = F.interpolate(context, size=x.shape[-2:], mode="nearest")
        t_emb = self.time_mlp(t.float())
        h0 = self.down(self.init_conv(torch.cat([x, context], dim=1)), t_emb)
        h = self.mid_attn(self.mid(self.downsample(h0), t_emb))
        h = self.up(torch.cat([self.upsample(h), h0], dim=1), t_emb)
        return self.final_conv(h)


class GaussianDiffusion(nn.Module):
    def __init__(self, denoise_fn, compressor, timesteps, lambda_rate):
        super().__init__()
        self.denoise_fn = denoise_fn
        self.context_fn = compressor
        self.num_timesteps = timesteps
        self.lambda_rate = lambda_rate
        betas = torch.linspace(1e-4, 0.02, timesteps)
        alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
        self.register_buffer("betas", betas)
        self.register_buffer("sqrt_alphas_cumprod", alphas_cumprod.sqrt())
        self.register_buffer("sqrt_one_minus_alphas_cumprod", (1.0 - alphas_cumprod).sqrt())

    def q_sample(self, x_start, t, noise):
        return (self.sqrt_alphas_cumprod[t].view(-1, 1, 1, 1) * x_start
                + self.sqrt_one_minus_alphas_cumprod[t].view(-1, 1, 1, 1) * noise)

    def p_losses(self, x_start, t):
        context, rate = self.context_fn(x_start)
        noise = torch.randn_like(x_start)
        x_noisy = self.q_sample(x_start, t, noise)
        eps = self.denoise_fn(x_noisy, t, context)
        return F.mse_loss(eps, noise) + self.lambda_rate * rate

    def forward(self, x):
        t = torch.randint(0, self.num_timesteps, (x.shape[0],), device=x.device)
        return self.p_losses(x * 2.0 - 1.0, t)

    @torch.no_grad()
    def compress_and_sample(self, x, steps):
        context, _ = self.context_fn(x * 2.0 - 1.0)
        img = torch.randn_like(x)
        for t in torch.linspace(self.num_timesteps - 1, 0, steps).long():
            tt = torch.full((x.shape[0],), int(t), dtype=torch.long)
            eps = self.denoise_fn(img, tt, context)
            x0 = (img - self.sqrt_one_minus_alphas_cumprod[t] * eps) / self.sqrt_alphas_cumprod[t]
            img = x0.clamp(-1, 1)
        return (img + 1) / 2


class Trainer:
    def __init__(self, model, cfg):
        self.model = model
        self.cfg = cfg
        self.ema = copy.deepcopy(model).eval()
        self.opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.opt, step_size=2, gamma=0.9)
        self.step = 0

    @torch.no_grad()
    def update_ema(self):
        for p_ema, p in zip(self.ema.parameters(), self.model.parameters()):
            p_ema.mul_(self.cfg["ema_decay"]).add_(p, alpha=1 - self.cfg["ema_decay"])

    def train_step(self, batch):
        self.model.train()
        loss = self.model(batch)
        self.opt.zero_grad()
        loss.backward()  # raises
        self.opt.step()
        self.scheduler.step()
        self.update_ema()
        self.step += 1
        return loss.item()

    def evaluate(self, batch):
        recon = self.ema.compress_and_sample(batch, self.cfg["sample_steps"])
        return F.mse_loss(recon, batch).item()


def main():
    cfg = config
    torch.manual_seed(cfg["seed"])
    denoiser = ConditionalUnet(cfg["dim"], cfg["channels"], cfg["context_dim"])
    model = GaussianDiffusion(denoiser, Compressor(cfg["channels"], cfg["context_dim"]),
                              cfg["timesteps"], cfg["lambda_rate"])
    trainer = Trainer(model, cfg)
    data = torch.rand(cfg["train_steps"] + 1, cfg["batch_size"], cfg["channels"], cfg["image_size"], cfg["image_size"])
    for i in range(cfg["train_steps"]):
        print("step %d  loss %.4f" % (i, trainer.train_step(data[i])))
    print("eval mse %.4f" % trainer.evaluate(data[-1]))


if __name__ == "__main__":
    main()
