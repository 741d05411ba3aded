# expect: nonscalar_backward
# source: https://github.com/lisiyao21/Bailando/issues/15
"""Music-to-dance stage 1: a body-part separated motion VQ-VAE (Bailando-style).

Mirrors the project's layout: a nested config dict (as loaded from
configs/sep_vqvae.yaml), a SepVQVAE made of an upper-body and a lower-body
VQ-VAE (1-D conv encoder, vector quantiser with commitment loss and
straight-through estimator, conv decoder) whose forward() returns
(output, loss, metrics) with the reconstruction, velocity and acceleration
losses computed inside the model, a data-parallel wrapper that splits the
batch over replicas and gathers their outputs like nn.DataParallel, and an
agent class with train()/eval() loops, Adam + MultiStepLR and logging.
Synthetic joint-position sequences, CPU only.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = {
    "structure": {"up_half": {"joint_channel": 3, "n_joints": 4, "l_bins": 32, "emb_width": 16, "down_t": 1},
                  "down_half": {"joint_channel": 3, "n_joints": 3, "l_bins": 32, "emb_width": 16, "down_t": 1},
                  "use_bottleneck": True, "commit": 0.02, "vel": 1.0, "acc": 1.0},
    "optimizer": {"type": "Adam", "kwargs": {"lr": 3e-4, "betas": [0.5, 0.999]},
                  "schedular_kwargs": {"milestones": [3], "gamma": 0.1}},
    "batch_size": 8, "seq_len": 16, "epoch": 4, "steps_per_epoch": 2, "log_per_updates": 2,
    "device_ids": [0, 1],
}
UP_JOINTS, DOWN_JOINTS = [0, 1, 2, 3], [4, 5, 6]


class Encoder(nn.Module):
    def __init__(self, in_ch, width, down_t):
        super().__init__()
        blocks = [nn.Conv1d(in_ch, width, 3, 1, 1), nn.ReLU()]
        for _ in range(down_t):
            blocks += [nn.Conv1d(width, width, 4, 2, 1), nn.ReLU()]
        self.model = nn.Sequential(*blocks)

    def forward(self, x):
        return self.model(x)


class Decoder(nn.Module):
    def __init__(self, out_ch, width, down_t):
        super().__init__()
        blocks = []
        for _ in range(down_t):
            blocks += [nn.ConvTranspose1d(width, width, 4, 2, 1), nn.ReLU()]
        blocks += [nn.Conv1d(width, out_ch, 3, 1, 1)]
        self.model = nn.Sequential(*blocks)

    def forward(self, z):
        return self.model(z)


class VectorQuantizer(nn.Module):
    def __init__(self, l_bins, emb_width):
        super().__init__()
        self.codebook = nn.Embedding(l_bins, emb_width)
        self.codebook.weight.data.uniform_(-1.0 / l_bins, 1.0 / l_bins)

    def forward(self, z):
        z_flat = z.permute(0, 2, 1).reshape(-1, z.shape[1])
        d = torch.cdist(z_flat, self.codebook.weight)
        idx = d.argmin(-1)
        z_q = self.codebook(idx).view(z.shape[0], z.shape[2], -1).permute(0, 2, 1)
        commit = F.mse_loss(z, z_q.detach()) + F.mse_loss(z_q, z.detach())
        z_q = z + (z_q - z).detach()
        usage = idx.unique().numel() / self.codebook.num_embeddings
        return z_q, commit, usage


class VQVAE(nn.Module):
    def __init__(self, hps, commit, vel, acc):
        super().__init__()
        in_ch = hps["joint_channel"] * hps["n_joints"]
        self.encoder = Encoder(in_ch, hps["emb_width"], hps["down_t"])
        self.bottleneck = VectorQuantizer(hps["l_bins"], hps["emb_width"])
        self.decoder = Decoder(in_ch, hps["emb_width"], hps["down_t"])
        self.commit, self.vel, self.acc = commit, vel, acc

    def forward(self, x):
        """x: (B, T, J*C).  Returns reconstruction, total loss and metrics."""
        x_in = x.permute(0, 2, 1)
        z_q, commit_loss, usage = self.bottleneck(self.encoder(x_in))
        x_out = self.decoder(z_q).permute(0, 2, 1)
        recons = F.smooth_l1_loss(x_out, x)
        vel_loss = F.smooth_l1_loss(x_out[:, 1:] - x_out[:, :-1], x[:, 1:] - x[:, :-1])
        acc_loss = F.smooth_l1_loss(x_out[:, 2:] + x_out[:, :-2] - 2 * x_out[:, 1:-1],
                                    x[:, 2:] + x[:, :-2] - 2 * x[:, 1:-1])
        loss = recons + self.commit * commit_loss + self.vel * vel_loss + self.acc * acc_loss
        return x_out, loss, {"recons_loss": recons.detach(), "commit_loss": commit_loss.detach(),
                             "usage": torch.tensor(usage)}


class SepVQVAE(nn.Module):
    def __init__(self, hps):
        super().__init__()
        s = hps["structure"]
        self.vqvae_up = VQVAE(s["up_half"], s["commit"], s["vel"], s["acc"])
        self.vqvae_down = VQVAE(s["down_half"], s["commit"], s["vel"], s["acc"])

    def forward(self, x):
        b, t, _ = x.shape
        x = x.view(b, t, -1, 3)
        x_up, loss_up, m_up = self.vqvae_up(x[:, :, UP_JOINTS].reshape(b, t, -1))
        x_down, loss_down, m_down = self.vqvae_down(x[:, :, DOWN_JOINTS].reshape(b, t, -1))
        out = torch.cat([x_up.view(b, t, -1, 3), x_down.view(b, t, -1, 3)], dim=2).view(b, t, -1)
        metrics = {k: (m_up[k] + m_down[k]) * 0.5 for k in m_up}
        return out, loss_up + loss_down, metrics


class DataParallel(nn.Module):
    """Scatter the batch over replicas, run them, gather like torch.nn.parallel.gather.

    Used when several devices are listed in the config.
    """

    def __init__(self, module, device_ids):
        super().__init__()
        self.module, self.device_ids = module, device_ids

    @staticmethod
    def gather(outputs):
        first = outputs[0]
        if isinstance(first, torch.Tensor):
            if first.dim() == 0:
                return torch.cat([o.unsqueeze(0) for o in outputs])
            return torch.cat(outputs, dim=0)
        if isinstance(first, dict):
            return {k: DataParallel.gather([o[k] for o in outputs]) for k in first}
        return type(first)(DataParallel.gather(list(group)) for group in zip(*outputs))

    def forward(self, x):
        if len(self.device_ids) <= 1:
            return self.module(x)
        chunks = x.chunk(len(self.device_ids), dim=0)
        return self.gather([self.module(c) for c in chunks])


def make_dance_batch(cfg, gen):
    t = torch.linspace(0, 6.28, cfg["seq_len"])
    phase = torch.rand(cfg["batch_size"], 1, 21, generator=gen) * 6.28
    return torch.sin(t[None, :, None] + phase) + 0.05 * torch.randn(cfg["batch_size"], cfg["seq_len"], 21,
                                                                     generator=gen)


class MoQ:
    """Training agent (stage 1: motion VQ-VAE)."""

    def __init__(self, config):
        self.config = config
        self.model = DataParallel(SepVQVAE(config), config["device_ids"])
        opt = config["optimizer"]
        self.optimizer = getattr(torch.optim, opt["type"])(self.model.parameters(), **opt["kwargs"])
        self.schedular = torch.optim.lr_scheduler.MultiStepLR(self.optimizer, **opt["schedular_kwargs"])
        self.gen = torch.Generator().manual_seed(0)

    def train(self):
        config, model, optimizer = self.config, self.model, self.optimizer
        updates = 0
        for epoch_i in range(1, config["epoch"] + 1):
            model.train()
            for _ in range(config["steps_per_epoch"]):
                pose_seq = make_dance_batch(config, self.gen)
                optimizer.zero_grad()
                output, loss, metrics = model(pose_seq)
                loss.backward()  # raises
                optimizer.step()
                if updates % config["log_per_updates"] == 0:
                    stats = {k: v.mean().item() for k, v in metrics.items()}
                    print("epoch %d update %d loss %.4f %s" % (epoch_i, updates, loss.mean().item(), stats))
                updates += 1
            self.schedular.step()
            self.eval()

    @torch.no_grad()
    def eval(self):
        self.model.eval()
        output, _, _ = self.model(make_dance_batch(self.config, self.gen))
        print("  eval output std %.4f" % output.std().item())


def main():
    torch.manual_seed(0)
    MoQ(CONFIG).train()


if __name__ == "__main__":
    main()
