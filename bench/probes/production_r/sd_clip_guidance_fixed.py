# expect: clean
# source: https://github.com/fastai/diffusion-nbs/issues/25
"""Latent-diffusion sampling loop with extra CLIP-loss guidance.

Follows the "Stable Diffusion Deep Dive" notebook: a VAE, a text encoder, a
conditional UNet and an Euler/LMS-style discrete scheduler run classifier-free
guided sampling; every few steps an additional guidance loss is computed on the
predicted clean latents and its gradient w.r.t. the latents nudges the sample.
The additional loss here is a CLIP similarity between the decoded image and
the prompt.  All networks are tiny, randomly initialised stand-ins; "PIL"
images are uint8 numpy arrays.
"""
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch_device = "cpu"
CLIP_MEAN = torch.tensor([0.48145466, 0.4578275, 0.40821073]).view(1, 3, 1, 1)
CLIP_STD = torch.tensor([0.26862954, 0.26130258, 0.27577711]).view(1, 3, 1, 1)


class CharTokenizer:
    model_max_length = 16

    def __call__(self, texts):
        ids = torch.zeros(len(texts), self.model_max_length, dtype=torch.long)
        for i, t in enumerate(texts):
            codes = [min(ord(c), 127) for c in t[:self.model_max_length]]
            ids[i, :len(codes)] = torch.tensor(codes, dtype=torch.long)
        return SimpleNamespace(input_ids=ids)


class TextEncoder(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.embed = nn.Embedding(128, d)
        self.block = nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, batch_first=True)

    def forward(self, input_ids):
        return [self.block(self.embed(input_ids))]


class AutoencoderKL(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(3, 16, 4, 2, 1), nn.SiLU(), nn.Conv2d(16, 8, 4, 2, 1))
        self.decoder = nn.Sequential(nn.ConvTranspose2d(4, 16, 4, 2, 1), nn.SiLU(), nn.ConvTranspose2d(16, 3, 4, 2, 1))

    def encode(self, x):
        mean, logvar = self.encoder(x).chunk(2, dim=1)
        return SimpleNamespace(latent_dist=SimpleNamespace(sample=lambda: mean + torch.randn_like(mean) * (0.5 * logvar).exp()))

    def decode(self, z):
        return SimpleNamespace(sample=torch.tanh(self.decoder(z)))


class UNet2DConditionModel(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.time_embed = nn.Sequential(nn.Linear(1, d), nn.SiLU(), nn.Linear(d, d))
        self.cond_proj = nn.Linear(d, d)
        self.conv_in = nn.Conv2d(4, d, 3, padding=1)
        self.mid = nn.Conv2d(d, d, 3, padding=1)
        self.conv_out = nn.Conv2d(d, 4, 3, padding=1)

    def forward(self, sample, timestep, encoder_hidden_states):
        emb = self.time_embed(torch.as_tensor(timestep, dtype=torch.float32).view(1, 1) / 1000.0)
        cond = self.cond_proj(encoder_hidden_states.mean(1)) + emb
        h = F.silu(self.conv_in(sample) + cond[:, :, None, None])
        h = F.silu(self.mid(h)) + h
        return {"sample": self.conv_out(h)}


class LMSDiscreteScheduler:
    def __init__(self, beta_start=0.00085, beta_end=0.012, num_train_timesteps=1000):
        betas = torch.linspace(beta_start ** 0.5, beta_end ** 0.5, num_train_timesteps) ** 2
        self.alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
        self.num_train_timesteps = num_train_timesteps

    def set_timesteps(self, num_inference_steps):
        self.timesteps = torch.linspace(self.num_train_timesteps - 1, 0, num_inference_steps).round().long()
        sigmas = ((1 - self.alphas_cumprod) / self.alphas_cumprod) ** 0.5
        self.sigmas = torch.cat([sigmas[self.timesteps], torch.zeros(1)])
        self.init_noise_sigma = float(self.sigmas.max())

    def scale_model_input(self, sample, timestep):
        step_index = (self.timesteps == timestep).nonzero()[0].item()
        return sample / ((self.sigmas[step_index] ** 2 + 1) ** 0.5)

    def step(self, model_output, timestep, sample):
        i = (self.timesteps == timestep).nonzero()[0].item()
        prev_sample = sample + (self.sigmas[i + 1] - self.sigmas[i]) * model_output
        return SimpleNamespace(prev_sample=prev_sample)


class CLIPModel(nn.Module):
    """Joint image/text embedding model (ViT-ish image tower, text tower)."""

    def __init__(self, d=32, image_size=24):
        super().__init__()
        self.image_size = image_size
        self.visual = nn.Sequential(nn.Conv2d(3, d, 6, 6), nn.GELU(), nn.Flatten(), nn.Linear(d * 16, d))
        self.text = TextEncoder(d)
        self.text_proj = nn.Linear(d, d)

    def encode_image(self, pixel_values):
        return self.visual(pixel_values)

    def encode_text(self, input_ids):
        return self.text_proj(self.text(input_ids)[0].mean(1))


def clip_preprocess(pil_image, size=24):
    """Resize (nearest) + to tensor + normalize, like CLIP's image transform."""
    h, w, _ = pil_image.shape
    rows = (np.arange(size) * h / size).astype(int)
    cols = (np.arange(size) * w / size).astype(int)
    arr = pil_image[rows][:, cols].astype(np.float32) / 255.0
    tensor = torch.from_numpy(arr).permute(2, 0, 1)
    return (tensor - CLIP_MEAN[0]) / CLIP_STD[0]


# Load the models used for the deep dive
torch.manual_seed(0)
tokenizer = CharTokenizer()
text_encoder = TextEncoder().to(torch_device)
vae = AutoencoderKL().to(torch_device)
unet = UNet2DConditionModel().to(torch_device)
scheduler = LMSDiscreteScheduler()
clip_model = CLIPModel().to(torch_device)


def pil_to_latent(input_im):
    # Single image -> single latent in a batch (so size 1, 4, 8, 8)
    with torch.no_grad():
        x = torch.from_numpy(input_im).permute(2, 0, 1).unsqueeze(0).float() / 255.0 * 2 - 1
        latent = vae.encode(x.to(torch_device))
    return 0.18215 * latent.latent_dist.sample()


def latents_to_pil(latents):
    # batch of latents -> list of images
    latents = (1 / 0.18215) * latents
    with torch.no_grad():
        image = vae.decode(latents).sample
    image = (image / 2 + 0.5).clamp(0, 1)
    image = image.detach().cpu().permute(0, 2, 3, 1).numpy()
    images = (image * 255).round().astype("uint8")
    return [image for image in images]


def spherical_dist_loss(x, y):
    x = F.normalize(x, dim=-1)
    y = F.normalize(y, dim=-1)
    return (x - y).norm(dim=-1).div(2).arcsin().pow(2).mul(2)


def clip_loss(latents_x0, text_features):
    image = vae.decode((1 / 0.18215) * latents_x0).sample
    image = (image / 2 + 0.5).clamp(0, 1)
    image = F.interpolate(image, size=clip_model.image_size, mode="bilinear", align_corners=False)
    image_input = (image - CLIP_MEAN) / CLIP_STD
    image_features = clip_model.encode_image(image_input)
    return spherical_dist_loss(image_features, text_features).mean()


def main():
    prompt = ["a blue watercolor fox"]
    height, width = 32, 32
    num_inference_steps = 10
    guidance_scale = 7.5
    clip_loss_scale = 200
    generator = torch.manual_seed(32)
    batch_size = 1

    # Prep text
    text_input = tokenizer(prompt)
    with torch.no_grad():
        text_embeddings = text_encoder(text_input.input_ids.to(torch_device))[0]
        text_features = clip_model.encode_text(text_input.input_ids)
    uncond_input = tokenizer([""] * batch_size)
    with torch.no_grad():
        uncond_embeddings = text_encoder(uncond_input.input_ids.to(torch_device))[0]
    text_embeddings = torch.cat([uncond_embeddings, text_embeddings])

    # Prep Scheduler
    scheduler.set_timesteps(num_inference_steps)

    # Prep latents
    latents = torch.randn((batch_size, 4, height // 4, width // 4), generator=generator).to(torch_device)
    latents = latents * scheduler.init_noise_sigma

    # Loop
    for i, t in enumerate(scheduler.timesteps):
        latent_model_input = torch.cat([latents] * 2)
        sigma = scheduler.sigmas[i]
        latent_model_input = scheduler.scale_model_input(latent_model_input, t)

        # predict the noise residual
        with torch.no_grad():
            noise_pred = unet(latent_model_input, t, encoder_hidden_states=text_embeddings)["sample"]

        # perform CFG
        noise_pred_uncond, noise_pred_text = noise_pred.chunk(2)
        noise_pred = noise_pred_uncond + guidance_scale * (noise_pred_text - noise_pred_uncond)

        #### ADDITIONAL GUIDANCE ###
        if i % 5 == 0:
            # Requires grad on the latents
            latents = latents.detach().requires_grad_()

            # Get the predicted x0:
            latents_x0 = latents - sigma * noise_pred

            # Calculate loss
            loss = clip_loss(latents_x0, text_features) * clip_loss_scale

            # Occasionally print it out
            print(i, "loss:", loss.item())

            # Get gradient
            cond_grad = torch.autograd.grad(loss, latents)[0]

            # Modify the latents based on this gradient
            latents = latents.detach() - cond_grad * sigma ** 2

        # Now step with scheduler
        latents = scheduler.step(noise_pred, t, latents).prev_sample

    image = latents_to_pil(latents)[0]
    print("final image", image.shape, image.dtype, float(image.mean()))


if __name__ == "__main__":
    main()
