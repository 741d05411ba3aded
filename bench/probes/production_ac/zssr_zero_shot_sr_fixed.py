# expect: clean
# source: https://github.com/HarukiYqM/pytorch-ZSSR/issues/2
"""PyTorch port of ZSSR ("Zero-Shot" Super-Resolution using Deep Internal Learning).

A small image-specific CNN is trained on the test image itself: random
augmentations of the input act as HR fathers, their downscaled (and noised)
versions as LR sons.  The net sees the bicubic-like upscaled son and predicts
a residual.  Mirrors the structure of the original TF code: a Config object,
a ZSSR class with forward_backward_pass / forward_pass / quick_test /
learning_rate_policy / final_test, and a tiny `simpleNet` model.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from math import sqrt


class Config:
    # network meta params
    scale_factors = [[2.0, 2.0]]
    learning_rate = 0.001
    min_learning_rate = 9e-6
    learning_rate_change_ratio = 1.5
    learning_rate_policy_check_every = 10
    learning_rate_slope_range = 20
    min_iters = 12
    max_iters = 24
    run_test = True
    run_test_every = 4
    display_every = 8
    crop_size = 16
    noise_std = 0.0
    init_net_for_each_sf = False
    output_flip = True
    cuda = torch.cuda.is_available()
    display_test_results = True


class simpleNet(nn.Module):
    def __init__(self, Y=True):
        super(simpleNet, self).__init__()
        d = 1 if Y else 3
        self.input = nn.Conv2d(in_channels=d, out_channels=32, kernel_size=3, stride=1, padding=1, bias=False)
        self.conv1 = nn.Conv2d(32, 32, 3, 1, 1, bias=False)
        self.conv2 = nn.Conv2d(32, 32, 3, 1, 1, bias=False)
        self.conv3 = nn.Conv2d(32, 32, 3, 1, 1, bias=False)
        self.output = nn.Conv2d(in_channels=32, out_channels=d, kernel_size=3, stride=1, padding=1, bias=False)
        self.relu = nn.ReLU(inplace=True)

        # weights initialization
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, sqrt(2. / n))

    def forward(self, x):
        residual = x
        inputs = self.input(self.relu(x))
        out = inputs
        out = self.conv1(self.relu(out))
        out = self.conv2(self.relu(out))
        out = self.conv3(self.relu(out))
        out = self.output(self.relu(out))
        out = torch.add(out, residual)
        return out


def imresize(im, scale_factor=None, output_shape=None):
    """Bilinear stand-in for the kernel-based imresize of the original repo."""
    t = torch.from_numpy(np.ascontiguousarray(im, dtype=np.float32))[None, None]
    if output_shape is None:
        output_shape = [int(np.ceil(s * f)) for s, f in zip(im.shape[:2], np.atleast_1d(scale_factor) * np.ones(2))]
    out = F.interpolate(t, size=tuple(int(s) for s in output_shape[:2]), mode="bilinear", align_corners=False)
    return out[0, 0].numpy()


def random_augment(ims, crop_size, rng):
    im = ims[rng.randint(len(ims))]
    k = rng.randint(4)
    im = np.rot90(im, k)
    if rng.rand() < 0.5:
        im = np.fliplr(im)
    h, w = im.shape
    top, left = rng.randint(h - crop_size + 1), rng.randint(w - crop_size + 1)
    return np.ascontiguousarray(im[top:top + crop_size, left:left + crop_size])


class ZSSR:
    def __init__(self, input_img, conf=Config(), ground_truth=None):
        self.conf = conf
        self.cuda = conf.cuda
        self.input = input_img
        self.Y = self.input.ndim == 2
        self.gt = ground_truth
        self.model = simpleNet(self.Y)
        self.rng = np.random.RandomState(0)
        self.sf = None
        self.hr_fathers_sources = [self.input]
        self.init_parameters()

    def init_parameters(self):
        self.loss = [None] * self.conf.max_iters
        self.mse, self.mse_rec, self.interp_rec_mse, self.mse_steps = [], [], [], []
        self.iter = 0
        self.learning_rate = self.conf.learning_rate
        self.learning_rate_change_iter_nums = [0]

    def father_to_son(self, hr_father):
        lr_son = imresize(hr_father, 1.0 / self.sf)
        return np.clip(lr_son + self.rng.randn(*lr_son.shape) * self.conf.noise_std, 0, 1)

    def forward_backward_pass(self, lr_son, hr_father, criterion, optimizer):
        # first gate: interpolate the lr-son to the size of the father
        interpolated_lr_son = imresize(lr_son, self.sf, hr_father.shape)
        lr_son_input = torch.Tensor(interpolated_lr_son).unsqueeze_(0).unsqueeze_(0)
        hr_father = torch.Tensor(hr_father).unsqueeze_(0).unsqueeze_(0)
        if self.cuda:
            hr_father = hr_father.cuda()
            lr_son_input = lr_son_input.cuda()

        train_output = self.model(lr_son_input)
        loss = criterion(hr_father, train_output)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        self.loss[self.iter] = loss.item()
        return np.clip(np.squeeze(train_output.cpu().detach().numpy()), 0, 1)

    def forward_pass(self, lr_son, hr_father_shape=None):
        interpolated = imresize(lr_son, self.sf, hr_father_shape)
        x = torch.Tensor(interpolated).unsqueeze_(0).unsqueeze_(0)
        if self.cuda:
            x = x.cuda()
        with torch.no_grad():
            return np.clip(np.squeeze(self.model(x).cpu().numpy()), 0, 1)

    def quick_test(self):
        self.reconstruct_output = self.forward_pass(self.father_to_son(self.input), self.input.shape)
        self.mse_rec.append(np.mean(np.square(self.input - self.reconstruct_output)))
        interp_rec = imresize(self.father_to_son(self.input), self.sf, self.input.shape)
        self.interp_rec_mse.append(np.mean(np.square(self.input - interp_rec)))
        self.mse_steps.append(self.iter)
        if self.conf.display_test_results:
            print("iteration:", self.iter, "reconstruct mse: %.5f" % self.mse_rec[-1])

    def learning_rate_policy(self):
        if (not (1 + self.iter) % self.conf.learning_rate_policy_check_every
                and self.iter - self.learning_rate_change_iter_nums[-1] > self.conf.min_iters):
            n = self.conf.learning_rate_slope_range // self.conf.run_test_every
            slope, _ = np.polyfit(self.mse_steps[-n:], self.mse_rec[-n:], 1)
            std = np.std(self.mse_rec[-n:])
            if -self.conf.learning_rate_change_ratio * slope < std:
                self.learning_rate /= 10
                self.learning_rate_change_iter_nums.append(self.iter)

    def train(self):
        criterion = nn.MSELoss()
        optimizer = torch.optim.Adam(self.model.parameters(), lr=self.learning_rate)
        for self.iter in range(self.conf.max_iters):
            self.hr_father = random_augment(self.hr_fathers_sources, self.conf.crop_size, self.rng)
            self.lr_son = self.father_to_son(self.hr_father)
            self.train_output = self.forward_backward_pass(self.lr_son, self.hr_father, criterion, optimizer)
            if not self.iter % self.conf.display_every:
                print("sf:", self.sf, ", iteration:", self.iter, ", loss:", self.loss[self.iter])
            if self.conf.run_test and not self.iter % self.conf.run_test_every:
                self.quick_test()
            self.learning_rate_policy()
            for g in optimizer.param_groups:
                g["lr"] = self.learning_rate
            if self.learning_rate < self.conf.min_learning_rate:
                break

    def final_test(self):
        outputs = []
        for k in range(0, 1 + 7 * self.conf.output_flip, 2):
            test_input = np.rot90(self.input, k) if k < 4 else np.fliplr(np.rot90(self.input, k))
            tmp = self.forward_pass(test_input)
            tmp = np.rot90(tmp, -k) if k < 4 else np.rot90(np.fliplr(tmp), -k)
            outputs.append(tmp)
        return np.clip(np.median(outputs, 0), 0, 1)

    def run(self):
        for sf in self.conf.scale_factors:
            self.sf = np.array(sf)
            self.init_parameters()
            if self.conf.init_net_for_each_sf:
                self.model = simpleNet(self.Y)
            if self.cuda:
                self.model = self.model.cuda()
            self.train()
            post = self.final_test()
            self.hr_fathers_sources.append(post)
            print("** Done training for sf=", sf, " ** output", post.shape)
        return post


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    yy, xx = np.mgrid[0:24, 0:24] / 24.0
    img = 0.5 + 0.25 * np.sin(6 * xx) * np.cos(4 * yy) + 0.05 * rng.rand(24, 24)
    net = ZSSR(np.clip(img, 0, 1).astype(np.float32))
    sr = net.run()
    print("super-resolved image", sr.shape, "mean %.4f" % sr.mean())


if __name__ == "__main__":
    main()
