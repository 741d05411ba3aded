# expect: clean
# source: https://github.com/tding1/CDFI/issues/15
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(7)


def get_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loss", type=str, default="1*Charb+0.01*g_Spatial+0.005*g_Occlusion")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--gpu_id", type=str, default="0 1")
    parser.add_argument("--kernel_size", type=int, default=3)
    return parser.parse_args([])


class CharbonnierLoss(nn.Module):
    def __init__(self, epsilon=1e-3):
        super().__init__()
        self.epsilon2 = epsilon * epsilon

    def forward(self, output, gt):
        return torch.mean(torch.sqrt((output - gt) ** 2 + self.epsilon2))


def total_variation(t):
    return (t[..., 1:, :] - t[..., :-1, :]).abs().mean() + (t[..., :, 1:] - t[..., :, :-1]).abs().mean()


class KernelSynthesis(nn.Module):
    def __init__(self, kernel_size=3, feat=16):
        super().__init__()
        self.k = kernel_size
        self.encoder = nn.Sequential(nn.Conv2d(6, feat, 3, padding=1), nn.ReLU(), nn.Conv2d(feat, feat, 3, padding=1), nn.ReLU())
        self.weight0 = nn.Conv2d(feat, kernel_size * kernel_size, 3, padding=1)
        self.weight1 = nn.Conv2d(feat, kernel_size * kernel_size, 3, padding=1)
        self.occlusion = nn.Sequential(nn.Conv2d(feat, 1, 3, padding=1), nn.Sigmoid())

    def _apply_kernel(self, frame, weights):
        b, c, h, w = frame.shape
        patches = F.unfold(frame, self.k, padding=self.k // 2).view(b, c, self.k * self.k, h, w)
        return (patches * weights.unsqueeze(1)).sum(dim=2)

    def forward(self, frame0, frame2):
        feats = self.encoder(torch.cat([frame0, frame2], dim=1))
        w0 = F.softmax(self.weight0(feats), dim=1)
        w1 = F.softmax(self.weight1(feats), dim=1)
        occ = self.occlusion(feats)
        frame1 = occ * self._apply_kernel(frame0, w0) + (1 - occ) * self._apply_kernel(frame2, w1)
        return {
            "frame1": frame1,
            "g_Spatial": total_variation(w0) + total_variation(w1),
            "g_Occlusion": total_variation(occ),
        }


def gather_outputs(outputs):
    merged = {}
    for key in outputs[0]:
        parts = [o[key] for o in outputs]
        if parts[0].dim() == 0:
            merged[key] = torch.stack(parts, dim=0)
        else:
            merged[key] = torch.cat(parts, dim=0)
    return merged


class ShardedRunner(nn.Module):
    def __init__(self, module, device_ids):
        super().__init__()
        self.module = module
        self.device_ids = device_ids

    def forward(self, frame0, frame2):
        if len(self.device_ids) == 1:
            return self.module(frame0, frame2)
        chunks0 = frame0.chunk(len(self.device_ids), dim=0)
        chunks2 = frame2.chunk(len(self.device_ids), dim=0)
        outputs = [self.module(c0, c2) for c0, c2 in zip(chunks0, chunks2)]
        return gather_outputs(outputs)


class Loss(nn.modules.loss._Loss):
    def __init__(self, args):
        super().__init__()
        self.loss = []
        self.loss_module = nn.ModuleList()
        self.regularize = []
        for item in args.loss.split("+"):
            weight, loss_type = item.split("*")
            if loss_type == "Charb":
                loss_function = CharbonnierLoss()
            elif loss_type == "L1":
                loss_function = nn.L1Loss()
            elif loss_type in ["g_Spatial", "g_Occlusion"]:
                self.regularize.append({"type": loss_type, "weight": float(weight)})
                continue
            else:
                raise ValueError(loss_type)
            self.loss.append({"type": loss_type, "weight": float(weight), "function": loss_function})
            self.loss_module.append(loss_function)

    def forward(self, output, gt):
        losses = []
        for l in self.loss:
            losses.append(l["weight"] * l["function"](output["frame1"], gt))
        for r in self.regularize:
            effective_loss = r["weight"] * output[r["type"]]
            effective_loss = sum(effective_loss)
            losses.append(effective_loss)
        return sum(losses)


def make_triplets(n=16, size=24):
    base = torch.rand(n, 3, size + 4, size + 4)
    frame0 = base[..., 0:size, 0:size]
    frame1 = base[..., 1:size + 1, 1:size + 1]
    frame2 = base[..., 2:size + 2, 2:size + 2]
    return frame0.contiguous(), frame1.contiguous(), frame2.contiguous()


def psnr(pred, gt):
    mse = F.mse_loss(pred.clamp(0, 1), gt).item()
    return 10 * math.log10(1.0 / max(mse, 1e-10))


class Trainer:
    def __init__(self, args, data):
        self.args = args
        device_ids = [int(d) for d in args.gpu_id.split()]
        self.model = ShardedRunner(KernelSynthesis(args.kernel_size), device_ids)
        self.loss = Loss(args)
        self.optimizer = torch.optim.Adamax(self.model.parameters(), lr=args.lr)
        self.data = data
        self.best = None

    def train(self, epoch):
        self.model.train()
        f0, f1, f2 = self.data
        bs = self.args.batch_size
        running = 0.0
        for i in range(0, f0.shape[0], bs):
            self.optimizer.zero_grad()
            output = self.model(f0[i:i + bs], f2[i:i + bs])
            loss = self.loss(output, f1[i:i + bs])
            loss.backward()
            self.optimizer.step()
            running += loss.item()
        return running

    @torch.no_grad()
    def test(self):
        self.model.eval()
        f0, f1, f2 = self.data
        out = self.model(f0, f2)["frame1"]
        return psnr(out, f1)

    def fit(self):
        for epoch in range(self.args.epochs):
            train_loss = self.train(epoch)
            score = self.test()
            if self.best is None or score > self.best[0]:
                self.best = (score, {k: v.clone() for k, v in self.model.state_dict().items()})
            print(f"epoch {epoch}: loss {train_loss:.4f} psnr {score:.2f}")


if __name__ == "__main__":
    trainer = Trainer(get_args(), make_triplets())
    trainer.fit()
