# expect: clean
# source: https://github.com/pytorch/pytorch/issues/39141
"""Meta Pseudo Labels (Pham et al., 2021) on a synthetic image task.

Teacher and student are small CNNs.  The teacher is trained with a supervised
+ UDA consistency loss and with the MPL signal: the change in the student's
labelled loss after one student step on the teacher's hard pseudo labels.
Layout mirrors the PyTorch re-implementation's train_loop.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args():
    parser = argparse.ArgumentParser(description="MPL training")
    parser.add_argument("--num-classes", type=int, default=4)
    parser.add_argument("--image-size", type=int, default=8)
    parser.add_argument("--num-labeled", type=int, default=32)
    parser.add_argument("--num-unlabeled", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--mu", type=int, default=2, help="unlabeled batch ratio")
    parser.add_argument("--total-steps", type=int, default=5)
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--teacher-lr", type=float, default=0.05)
    parser.add_argument("--student-lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--nesterov", action="store_true", default=True)
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--threshold", type=float, default=0.6)
    parser.add_argument("--lambda-u", type=float, default=1.0)
    parser.add_argument("--uda-steps", type=float, default=4)
    parser.add_argument("--seed", type=int, default=5)
    return parser.parse_args([])


class AverageMeter:
    def __init__(self):
        self.reset()

    def reset(self):
        self.val = self.avg = self.sum = self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


class SyntheticImages:
    def __init__(self, args):
        g = torch.Generator().manual_seed(args.seed)
        protos = torch.randn(args.num_classes, 3, args.image_size, args.image_size, generator=g)
        def draw(n):
            y = torch.randint(0, args.num_classes, (n,), generator=g)
            return protos[y] + 0.8 * torch.randn(n, 3, args.image_size, args.image_size, generator=g), y
        self.x_l, self.y_l = draw(args.num_labeled)
        self.x_u, _ = draw(args.num_unlabeled)

    @staticmethod
    def weak(x):
        flip = torch.rand(x.size(0)) < 0.5
        x = torch.where(flip[:, None, None, None], x.flip(-1), x)
        return x + 0.05 * torch.randn_like(x)

    @staticmethod
    def strong(x):
        x = SyntheticImages.weak(x) + 0.3 * torch.randn_like(x)
        cut = torch.ones_like(x)
        s = x.size(-1) // 2
        i, j = torch.randint(0, x.size(-1) - s + 1, (2,)).tolist()
        cut[..., i:i + s, j:j + s] = 0
        return x * cut

    def labeled_batch(self, bs):
        idx = torch.randint(0, self.x_l.size(0), (bs,))
        return self.weak(self.x_l[idx]), self.y_l[idx]

    def unlabeled_batch(self, bs):
        idx = torch.randint(0, self.x_u.size(0), (bs,))
        x = self.x_u[idx]
        return self.weak(x), self.strong(x)


class SmallCNN(nn.Module):
    def __init__(self, num_classes, width=16):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.LeakyReLU(0.1),
            nn.Conv2d(width, width * 2, 3, stride=2, padding=1), nn.BatchNorm2d(width * 2), nn.LeakyReLU(0.1),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(width * 2, num_classes)

    def forward(self, x):
        return self.fc(self.features(x))


def get_cosine_schedule_with_warmup(optimizer, warmup, total):
    def lr_lambda(step):
        if step < warmup:
            return float(step + 1) / float(max(1, warmup))
        progress = float(step - warmup) / float(max(1, total - warmup))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def make_optimizer(model, lr, args):
    no_decay = ["bn", "bias"]
    groups = [
        {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
         "weight_decay": args.weight_decay},
        {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
         "weight_decay": 0.0}]
    return torch.optim.SGD(groups, lr=lr, momentum=args.momentum, nesterov=args.nesterov)


def train_loop(args, data, teacher, student, t_opt, s_opt, t_sched, s_sched):
    meters = {k: AverageMeter() for k in ("s_loss", "t_loss", "t_uda", "t_mpl", "mask")}
    teacher.train()
    student.train()
    for step in range(args.total_steps):
        images_l, targets = data.labeled_batch(args.batch_size)
        images_uw, images_us = data.unlabeled_batch(args.batch_size * args.mu)
        bs = images_l.size(0)

        t_images = torch.cat((images_l, images_uw, images_us))
        t_logits = teacher(t_images)
        t_logits_l = t_logits[:bs]
        t_logits_uw, t_logits_us = t_logits[bs:].chunk(2)
        del t_logits

        t_loss_l = F.cross_entropy(t_logits_l, targets)
        soft_pseudo_label = torch.softmax(t_logits_uw.detach() / args.temperature, dim=-1)
        max_probs, hard_pseudo_label = torch.max(soft_pseudo_label, dim=-1)
        mask = max_probs.ge(args.threshold).float()
        t_loss_u = torch.mean(-(soft_pseudo_label * torch.log_softmax(t_logits_us, dim=-1)).sum(dim=-1) * mask)
        weight_u = args.lambda_u * min(1.0, (step + 1) / args.uda_steps)
        t_loss_uda = t_loss_l + weight_u * t_loss_u

        s_images = torch.cat((images_l, images_us))
        s_logits = student(s_images)
        s_logits_l = s_logits[:bs]
        s_logits_us = s_logits[bs:]
        del s_logits

        s_loss_l_old = F.cross_entropy(s_logits_l.detach(), targets)
        s_loss = F.cross_entropy(s_logits_us, hard_pseudo_label)
        s_opt.zero_grad()
        s_loss.backward()
        s_opt.step()
        s_sched.step()

        with torch.no_grad():
            s_logits_l = student(images_l)
        s_loss_l_new = F.cross_entropy(s_logits_l.detach(), targets)
        dot_product = s_loss_l_new - s_loss_l_old
        _, hard_pseudo_label = torch.max(t_logits_us.detach(), dim=-1)
        t_loss_mpl = dot_product * F.cross_entropy(t_logits_us, hard_pseudo_label)
        t_loss = t_loss_uda + t_loss_mpl

        t_opt.zero_grad()
        t_loss.backward()
        t_opt.step()
        t_sched.step()

        meters["s_loss"].update(s_loss.item())
        meters["t_loss"].update(t_loss.item())
        meters["t_uda"].update(t_loss_uda.item())
        meters["t_mpl"].update(t_loss_mpl.item())
        meters["mask"].update(mask.mean().item())
        print(f"step {step + 1}/{args.total_steps} "
              + " ".join(f"{k} {m.avg:.4f}" for k, m in meters.items())
              + f" lr {s_sched.get_last_lr()[0]:.4f}")
    return meters


def main():
    args = get_args()
    torch.manual_seed(args.seed)
    data = SyntheticImages(args)
    teacher = SmallCNN(args.num_classes)
    student = SmallCNN(args.num_classes)
    t_opt = make_optimizer(teacher, args.teacher_lr, args)
    s_opt = make_optimizer(student, args.student_lr, args)
    t_sched = get_cosine_schedule_with_warmup(t_opt, args.warmup_steps, args.total_steps)
    s_sched = get_cosine_schedule_with_warmup(s_opt, args.warmup_steps, args.total_steps)
    train_loop(args, data, teacher, student, t_opt, s_opt, t_sched, s_sched)


if __name__ == "__main__":
    main()
