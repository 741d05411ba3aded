# expect: freed_graph
# source: https://discuss.pytorch.org/t/runtimeerror-trying-to-backward-through-the-graph-a-second-time-but-the-buffers-have-already-been-freed-specify-retain-graph-true-when-calling-backward-the-first-time/6795
"""Next-frame video prediction with a stateful ConvLSTM.

Long synthetic "moving squares" videos are cut into short clips.  The
recurrent state is carried from one clip to the next so the model can use
context from earlier in the same video; it is reset at video boundaries.
Loss = MSE + gradient difference loss (Mathieu et al., 2016).
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args():
    p = argparse.ArgumentParser(description="ConvLSTM next-frame prediction")
    p.add_argument("--frame-size", type=int, default=16)
    p.add_argument("--channels", type=int, default=1)
    p.add_argument("--hidden", type=int, nargs="+", default=[8, 8])
    p.add_argument("--kernel", type=int, default=3)
    p.add_argument("--video-len", type=int, default=12)
    p.add_argument("--clip-len", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--videos", type=int, default=2, help="videos per epoch (batches)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--gdl-weight", type=float, default=0.1)
    p.add_argument("--log-every", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args([])


class MovingSquares:
    """Generates videos of squares bouncing inside a frame."""

    def __init__(self, size, length, channels=1, square=4):
        self.size, self.length, self.channels, self.square = size, length, channels, square

    def sample(self, batch):
        video = torch.zeros(batch, self.length, self.channels, self.size, self.size)
        pos = torch.randint(0, self.size - self.square, (batch, 2)).float()
        vel = torch.randint(-2, 3, (batch, 2)).float()
        for t in range(self.length):
            for b in range(batch):
                y, x = int(pos[b, 0]), int(pos[b, 1])
                video[b, t, :, y:y + self.square, x:x + self.square] = 1.0
            pos = pos + vel
            over = (pos < 0) | (pos > self.size - self.square)
            vel[over] = -vel[over]
            pos = pos.clamp(0, self.size - self.square)
        return video + 0.05 * torch.randn_like(video)


class ConvLSTMCell(nn.Module):
    def __init__(self, in_ch, hid_ch, kernel):
        super().__init__()
        self.hid_ch = hid_ch
        self.conv = nn.Conv2d(in_ch + hid_ch, 4 * hid_ch, kernel, padding=kernel // 2)

    def init_state(self, batch, h, w):
        z = torch.zeros(batch, self.hid_ch, h, w)
        return z, z.clone()

    def forward(self, x, state):
        h, c = state
        i, f, o, g = torch.chunk(self.conv(torch.cat([x, h], 1)), 4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, c


class ConvLSTMPredictor(nn.Module):
    def __init__(self, channels, hidden, kernel):
        super().__init__()
        chans = [channels] + list(hidden)
        self.cells = nn.ModuleList(
            [ConvLSTMCell(chans[i], chans[i + 1], kernel) for i in range(len(hidden))])
        self.head = nn.Conv2d(sum(hidden), channels, 1)
        self.state = None

    def reset_state(self, batch, h, w):
        self.state = [cell.init_state(batch, h, w) for cell in self.cells]

    def forward(self, clip):
        # clip: [B, T, C, H, W] -> predictions for frames 1..T
        state = self.state
        preds = []
        for t in range(clip.size(1)):
            x = clip[:, t]
            outs = []
            new_state = []
            for cell, st in zip(self.cells, state):
                h, c = cell(x, st)
                new_state.append((h, c))
                outs.append(h)
                x = h
            state = new_state
            preds.append(torch.sigmoid(self.head(torch.cat(outs, 1))))
        self.state = state
        return torch.stack(preds, 1)


def gradient_difference_loss(pred, target):
    def grads(img):
        return (img[..., 1:, :] - img[..., :-1, :]).abs(), (img[..., :, 1:] - img[..., :, :-1]).abs()
    pgy, pgx = grads(pred)
    tgy, tgx = grads(target)
    return (pgy - tgy).abs().mean() + (pgx - tgx).abs().mean()


class GradNormMonitor:
    """Collects per-parameter gradient norms through tensor hooks."""

    def __init__(self, model):
        self.norms = {}
        for name, p in model.named_parameters():
            p.register_hook(self._make_hook(name))

    def _make_hook(self, name):
        def hook(grad):
            self.norms[name] = grad.norm().item()
        return hook

    def total(self):
        return math.sqrt(sum(v ** 2 for v in self.norms.values()))


class VideoTrainer:
    def __init__(self, args):
        self.args = args
        self.data = MovingSquares(args.frame_size, args.video_len, args.channels)
        self.model = ConvLSTMPredictor(args.channels, args.hidden, args.kernel)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=args.lr)
        self.sched = torch.optim.lr_scheduler.StepLR(self.opt, step_size=4, gamma=0.5)
        self.monitor = GradNormMonitor(self.model)
        self.step = 0

    def clips(self, video):
        L = self.args.clip_len
        for s in range(0, video.size(1) - L, L):
            yield video[:, s:s + L], video[:, s + 1:s + L + 1]

    def compute_loss(self, pred, target):
        mse = F.mse_loss(pred, target)
        gdl = gradient_difference_loss(pred, target)
        return mse + self.args.gdl_weight * gdl, mse.item(), gdl.item()

    def train_video(self, video):
        a = self.args
        self.model.reset_state(video.size(0), a.frame_size, a.frame_size)
        for inp, tgt in self.clips(video):
            pred = self.model(inp)
            loss, mse, gdl = self.compute_loss(pred, tgt)
            self.opt.zero_grad()
            loss.backward()  # raises
            self.opt.step()
            self.step += 1
            if self.step % a.log_every == 0:
                print(f"step {self.step:3d} mse {mse:.4f} gdl {gdl:.4f} "
                      f"|g| {self.monitor.total():.3f} lr {self.sched.get_last_lr()[0]:.1e}")

    def fit(self):
        torch.manual_seed(self.args.seed)
        self.model.train()
        for epoch in range(self.args.epochs):
            for _ in range(self.args.videos):
                video = self.data.sample(self.args.batch_size)
                self.train_video(video)
            self.sched.step()

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        video = self.data.sample(self.args.batch_size)
        self.model.reset_state(video.size(0), self.args.frame_size, self.args.frame_size)
        pred = self.model(video[:, :-1])
        return F.mse_loss(pred, video[:, 1:]).item()


if __name__ == "__main__":
    args = get_args()
    torch.manual_seed(args.seed)
    trainer = VideoTrainer(args)
    trainer.fit()
    print("eval mse %.4f" % trainer.evaluate())
