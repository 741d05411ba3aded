# expect: clean
# source: https://github.com/tejank10/null-text-inversion/issues/1
"""Null-text inversion of a (tiny, randomly initialised) latent text-to-image
diffusion model, ported to a diffusers-style pipeline: tokenizer + text
encoder, a conditional UNet with cross-attention, a frozen VAE encoder, and a
scheduler object that owns the sampling step.  DDIM inversion of the image
latent is followed by per-timestep optimisation of the unconditional
embedding so that classifier-free guidance reconstructs the inversion path.
"""
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as nnf
from torch.optim import Adam

torch.manual_seed(0)

NUM_DDIM_STEPS = 5
GUIDANCE_SCALE = 7.5
MAX_NUM_WORDS = 6


# ------------------------------------------------------------------ schedulers
class _BaseScheduler:
    def __init__(self, num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012):
        self.config = SimpleNamespace(num_train_timesteps=num_train_timesteps)
        betas = torch.linspace(beta_start ** 0.5, beta_end ** 0.5, num_train_timesteps) ** 2
        self.alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
        self.final_alpha_cumprod = torch.tensor(1.0)
        self.num_inference_steps = None
        self.timesteps = None

    def set_timesteps(self, num_inference_steps):
        self.num_inference_steps = num_inference_steps
        step = self.config.num_train_timesteps // num_inference_steps
        self.timesteps = (torch.arange(0, num_inference_steps) * step).flip(0) + 1

    def _alpha(self, t):
        if t < 0:
            return self.final_alpha_cumprod
        return self.alphas_cumprod[min(int(t), len(self.alphas_cumprod) - 1)]

    def _get_prev_sample(self, sample, timestep, prev_timestep, model_output):
        alpha_prod_t, alpha_prod_t_prev = self._alpha(timestep), self._alpha(prev_timestep)
        pred_original = (sample - (1 - alpha_prod_t) ** 0.5 * model_output) / alpha_prod_t ** 0.5
        return alpha_prod_t_prev ** 0.5 * pred_original + (1 - alpha_prod_t_prev) ** 0.5 * model_output


class DDIMScheduler(_BaseScheduler):
    def step(self, model_output, timestep, sample):
        prev_timestep = timestep - self.config.num_train_timesteps // self.num_inference_steps
        return {"prev_sample": self._get_prev_sample(sample, timestep, prev_timestep, model_output)}


class PNDMScheduler(_BaseScheduler):
    """Pseudo numerical methods (PLMS branch, skip_prk_steps=True)."""

    def set_timesteps(self, num_inference_steps):
        super().set_timesteps(num_inference_steps)
        self.ets, self.counter, self.cur_sample = [], 0, None

    def step(self, model_output, timestep, sample):
        step = self.config.num_train_timesteps // self.num_inference_steps
        prev_timestep = timestep - step
        if self.counter != 1:
            self.ets = self.ets[-3:]
            self.ets.append(model_output)
        else:
            prev_timestep = timestep
            timestep = timestep + step
        if len(self.ets) == 1 and self.counter == 0:
            self.cur_sample = sample
        elif len(self.ets) == 1 and self.counter == 1:
            model_output = (model_output + self.ets[-1]) / 2
            sample, self.cur_sample = self.cur_sample, None
        elif len(self.ets) == 2:
            model_output = (3 * self.ets[-1] - self.ets[-2]) / 2
        elif len(self.ets) == 3:
            model_output = (23 * self.ets[-1] - 16 * self.ets[-2] + 5 * self.ets[-3]) / 12
        else:
            model_output = (55 * self.ets[-1] - 59 * self.ets[-2] + 37 * self.ets[-3] - 9 * self.ets[-4]) / 24
        prev_sample = self._get_prev_sample(sample, int(timestep), int(prev_timestep), model_output)
        self.counter += 1
        return {"prev_sample": prev_sample}


# ------------------------------------------------------------------ models
class Tokenizer:
    def __init__(self, vocab_size=64):
        self.vocab_size = vocab_size

    def __call__(self, prompts):
        ids = []
        for p in prompts:
            toks = [1 + (sum(map(ord, w)) % (self.vocab_size - 2)) for w in p.split()][:MAX_NUM_WORDS]
            ids.append(toks + [0] * (MAX_NUM_WORDS - len(toks)))
        return torch.tensor(ids)


class TextEncoder(nn.Module):
    def __init__(self, vocab_size=64, dim=16):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.mix = nn.Linear(dim, dim)

    def forward(self, ids):
        return torch.tanh(self.mix(self.embed(ids)))


class TinyUNet(nn.Module):
    def __init__(self, channels=4, hidden=16, ctx_dim=16):
        super().__init__()
        self.conv_in = nn.Conv2d(channels, hidden, 3, padding=1)
        self.time_mlp = nn.Sequential(nn.Linear(1, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.to_q = nn.Linear(hidden, hidden, bias=False)
        self.to_k = nn.Linear(ctx_dim, hidden, bias=False)
        self.to_v = nn.Linear(ctx_dim, hidden, bias=False)
        self.conv_out = nn.Conv2d(hidden, channels, 3, padding=1)

    def forward(self, latents, t, encoder_hidden_states):
        b, _, h, w = latents.shape
        x = self.conv_in(latents) + self.time_mlp(torch.full((b, 1), float(t) / 1000.0))[:, :, None, None]
        tokens = x.flatten(2).transpose(1, 2)
        attn = (self.to_q(tokens) @ self.to_k(encoder_hidden_states).transpose(1, 2)) / tokens.shape[-1] ** 0.5
        tokens = tokens + attn.softmax(-1) @ self.to_v(encoder_hidden_states)
        return {"sample": self.conv_out(nnf.silu(tokens.transpose(1, 2).reshape(b, -1, h, w)))}


class TinyVAEEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Conv2d(3, 4, 4, stride=2, padding=1)

    def forward(self, image):
        return self.net(image)


# ------------------------------------------------------------------ null-text inversion
class NullInversion:
    def __init__(self, model):
        self.model = model
        self.tokenizer = model.tokenizer
        self.model.scheduler.set_timesteps(NUM_DDIM_STEPS)
        self.context = None

    def prev_step(self, model_output, timestep, sample):
        return self.model.scheduler.step(model_output, timestep, sample)["prev_sample"]

    def next_step(self, model_output, timestep, sample):
        sched = self.model.scheduler
        timestep, next_timestep = min(timestep - sched.config.num_train_timesteps // sched.num_inference_steps, 999), timestep
        alpha_prod_t, alpha_prod_t_next = sched._alpha(timestep), sched.alphas_cumprod[next_timestep]
        next_original = (sample - (1 - alpha_prod_t) ** 0.5 * model_output) / alpha_prod_t ** 0.5
        return alpha_prod_t_next ** 0.5 * next_original + (1 - alpha_prod_t_next) ** 0.5 * model_output

    def get_noise_pred_single(self, latents, t, context):
        return self.model.unet(latents, t, encoder_hidden_states=context)["sample"]

    @torch.no_grad()
    def init_prompt(self, prompt):
        uncond_embeddings = self.model.text_encoder(self.tokenizer([""]))
        text_embeddings = self.model.text_encoder(self.tokenizer([prompt]))
        self.context = torch.cat([uncond_embeddings, text_embeddings])

    @torch.no_grad()
    def ddim_loop(self, latent):
        _, cond_embeddings = self.context.chunk(2)
        all_latent = [latent]
        latent = latent.clone().detach()
        for i in range(NUM_DDIM_STEPS):
            t = int(self.model.scheduler.timesteps[len(self.model.scheduler.timesteps) - i - 1])
            noise_pred = self.get_noise_pred_single(latent, t, cond_embeddings)
            latent = self.next_step(noise_pred, t, latent)
            all_latent.append(latent)
        return all_latent

    def null_optimization(self, latents, num_inner_steps, epsilon):
        uncond_embeddings, cond_embeddings = self.context.chunk(2)
        uncond_embeddings_list = []
        latent_cur = latents[-1]
        for i in range(NUM_DDIM_STEPS):
            uncond_embeddings = uncond_embeddings.clone().detach()
            uncond_embeddings.requires_grad = True
            optimizer = Adam([uncond_embeddings], lr=1e-2 * (1.0 - i / 100.0))
            latent_prev = latents[len(latents) - i - 2]
            t = int(self.model.scheduler.timesteps[i])
            with torch.no_grad():
                noise_pred_cond = self.get_noise_pred_single(latent_cur, t, cond_embeddings)
            for j in range(num_inner_steps):
                noise_pred_uncond = self.get_noise_pred_single(latent_cur, t, uncond_embeddings)
                noise_pred = noise_pred_uncond + GUIDANCE_SCALE * (noise_pred_cond - noise_pred_uncond)
                latents_prev_rec = self.prev_step(noise_pred, t, latent_cur)
                loss = nnf.mse_loss(latents_prev_rec, latent_prev)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if loss.item() < epsilon + i * 2e-5:
                    break
            uncond_embeddings_list.append(uncond_embeddings[:1].detach())
            with torch.no_grad():
                context = torch.cat([uncond_embeddings, cond_embeddings])
                noise_pred = self.get_noise_pred_single(torch.cat([latent_cur] * 2), t, context)
                uncond, cond = noise_pred.chunk(2)
                latent_cur = self.prev_step(uncond + GUIDANCE_SCALE * (cond - uncond), t, latent_cur)
        return uncond_embeddings_list

    def invert(self, image, prompt, num_inner_steps=3, early_stop_epsilon=1e-7):
        self.init_prompt(prompt)
        with torch.no_grad():
            latent = self.model.vae(image) * 0.18215
        ddim_latents = self.ddim_loop(latent)
        uncond_embeddings = self.null_optimization(ddim_latents, num_inner_steps, early_stop_epsilon)
        return ddim_latents[-1], uncond_embeddings


def build_pipeline(scheduler_name):
    scheduler = {"ddim": DDIMScheduler, "pndm": PNDMScheduler}[scheduler_name]()
    pipe = SimpleNamespace(tokenizer=Tokenizer(), text_encoder=TextEncoder(), unet=TinyUNet(),
                           vae=TinyVAEEncoder(), scheduler=scheduler)
    for module in (pipe.text_encoder, pipe.unet, pipe.vae):
        module.requires_grad_(False)
    return pipe


if __name__ == "__main__":
    args = SimpleNamespace(scheduler="ddim", prompt="a cat sitting next to a mirror", num_inner_steps=3)
    ldm_stable = build_pipeline(args.scheduler)
    null_inversion = NullInversion(ldm_stable)
    image = torch.rand(1, 3, 16, 16) * 2 - 1
    x_t, uncond_embeddings = null_inversion.invert(image, args.prompt, num_inner_steps=args.num_inner_steps)
    print("x_t", tuple(x_t.shape), "null embeddings per step:", len(uncond_embeddings))
