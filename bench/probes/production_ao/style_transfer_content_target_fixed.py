# expect: clean
# source: https://fangdahan.medium.com/pytorch-style-transfer-tutorial-91e58d6b1055
"""Neural style transfer (Gatys et al.) in the layout of the PyTorch tutorial.

A small convolutional feature extractor stands in for VGG19.  Content and
style loss modules are inserted after selected conv layers, and the pixels of
an input image are optimised with L-BFGS so that its content matches the
content image and its Gram statistics match the style image.  Content and
style images are seeded synthetic tensors.
"""
import argparse
import copy
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_config(argv=None):
    parser = argparse.ArgumentParser(description="neural style transfer")
    parser.add_argument("--imsize", type=int, default=32)
    parser.add_argument("--num-steps", type=int, default=2)
    parser.add_argument("--style-weight", type=float, default=1e5)
    parser.add_argument("--content-weight", type=float, default=1.0)
    parser.add_argument("--lbfgs-max-iter", type=int, default=3)
    parser.add_argument("--log-every", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--content-layers", nargs="*", default=["conv_4"])
    parser.add_argument("--style-layers", nargs="*",
                        default=["conv_1", "conv_2", "conv_3", "conv_4", "conv_5"])
    return parser.parse_args(argv)


# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------
def image_loader(kind, imsize, generator):
    """Synthetic stand-in for PIL loading + transforms.ToTensor()."""
    base = torch.rand(1, 3, imsize, imsize, generator=generator)
    if kind == "style":
        xs = torch.linspace(0, 6.28, imsize)
        stripes = 0.5 + 0.5 * torch.sin(3 * xs)[None, None, None, :]
        base = 0.6 * base + 0.4 * stripes
    return base.clamp(0, 1)


# ---------------------------------------------------------------------------
# loss modules
# ---------------------------------------------------------------------------
class ContentLoss(nn.Module):

    def __init__(self, target):
        super(ContentLoss, self).__init__()
        self.target = target.detach()
        self.loss = torch.tensor(0.0)

    def forward(self, input):
        self.loss = F.mse_loss(input, self.target)
        return input


def gram_matrix(input):
    a, b, c, d = input.size()
    features = input.view(a * b, c * d)
    G = torch.mm(features, features.t())
    return G.div(a * b * c * d)


class StyleLoss(nn.Module):

    def __init__(self, target_feature):
        super(StyleLoss, self).__init__()
        self.target = gram_matrix(target_feature).detach()
        self.loss = torch.tensor(0.0)

    def forward(self, input):
        G = gram_matrix(input)
        self.loss = F.mse_loss(G, self.target)
        return input


class Normalization(nn.Module):
    def __init__(self, mean, std):
        super(Normalization, self).__init__()
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def forward(self, img):
        return (img - self.mean) / self.std


# ---------------------------------------------------------------------------
# feature extractor (stands in for models.vgg19(pretrained=True).features)
# ---------------------------------------------------------------------------
def make_features(widths=(8, 16, 16, 32, 32)):
    layers = []
    in_ch = 3
    for i, w in enumerate(widths):
        layers.append(nn.Conv2d(in_ch, w, kernel_size=3, padding=1))
        layers.append(nn.ReLU(inplace=False))
        if i in (1, 3):
            layers.append(nn.MaxPool2d(2))
        in_ch = w
    return nn.Sequential(*layers)


def get_style_model_and_losses(cnn, normalization_mean, normalization_std,
                               style_img, content_img,
                               content_layers, style_layers):
    cnn = copy.deepcopy(cnn)
    normalization = Normalization(normalization_mean, normalization_std)

    content_losses = []
    style_losses = []

    model = nn.Sequential(normalization)

    i = 0
    for layer in cnn.children():
        if isinstance(layer, nn.Conv2d):
            i += 1
            name = "conv_{}".format(i)
        elif isinstance(layer, nn.ReLU):
            name = "relu_{}".format(i)
            layer = nn.ReLU(inplace=False)
        elif isinstance(layer, nn.MaxPool2d):
            name = "pool_{}".format(i)
        elif isinstance(layer, nn.BatchNorm2d):
            name = "bn_{}".format(i)
        else:
            raise RuntimeError("Unrecognized layer: {}".format(layer.__class__.__name__))

        model.add_module(name, layer)

        if name in content_layers:
            target = model(content_img)
            content_loss = ContentLoss(target)
            model.add_module("content_loss_{}".format(i), content_loss)
            content_losses.append(content_loss)

        if name in style_layers:
            target_feature = model(style_img)
            style_loss = StyleLoss(target_feature)
            model.add_module("style_loss_{}".format(i), style_loss)
            style_losses.append(style_loss)

    # trim off the layers after the last content and style losses
    for i in range(len(model) - 1, -1, -1):
        if isinstance(model[i], ContentLoss) or isinstance(model[i], StyleLoss):
            break
    model = model[:(i + 1)]

    return model, style_losses, content_losses


def get_input_optimizer(input_img, max_iter):
    optimizer = torch.optim.LBFGS([input_img.requires_grad_()], max_iter=max_iter)
    return optimizer


class ProgressLogger:
    """Callback printing style/content scores every few steps."""

    def __init__(self, every):
        self.every = every
        self.history = []

    def __call__(self, run, style_score, content_score):
        self.history.append((style_score, content_score))
        if run % self.every == 0:
            print("run {}: Style Loss : {:4f} Content Loss: {:4f}".format(
                run, style_score, content_score))


class StyleTransferRunner:

    def __init__(self, cfg, cnn, mean, std, content_img, style_img, input_img):
        self.cfg = cfg
        self.input_img = input_img
        self.model, self.style_losses, self.content_losses = get_style_model_and_losses(
            cnn, mean, std, style_img, content_img,
            cfg.content_layers, cfg.style_layers)
        self.model.requires_grad_(False)
        self.optimizer = get_input_optimizer(input_img, cfg.lbfgs_max_iter)
        self.callbacks = [ProgressLogger(cfg.log_every)]
        self.run = [0]

    def closure(self):
        with torch.no_grad():
            self.input_img.clamp_(0, 1)

        self.optimizer.zero_grad()
        self.model(self.input_img)
        style_score = 0
        content_score = 0

        for sl in self.style_losses:
            style_score += sl.loss
        for cl in self.content_losses:
            content_score += cl.loss

        style_score *= self.cfg.style_weight
        content_score *= self.cfg.content_weight

        loss = style_score + content_score
        loss.backward()

        self.run[0] += 1
        for cb in self.callbacks:
            cb(self.run[0], style_score.item(), content_score.item())
        return style_score + content_score

    def train_step(self):
        return self.optimizer.step(self.closure)

    def evaluate(self):
        with torch.no_grad():
            self.input_img.clamp_(0, 1)
            self.model(self.input_img)
            s = sum(sl.loss.item() for sl in self.style_losses)
            c = sum(cl.loss.item() for cl in self.content_losses)
        return {"style": s, "content": c}

    def fit(self):
        print("Optimizing..")
        while self.run[0] <= self.cfg.num_steps:
            self.train_step()
        return self.evaluate()


def main(argv=None):
    cfg = get_config(argv)
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)

    style_img = image_loader("style", cfg.imsize, gen)
    content_img = image_loader("content", cfg.imsize, gen)
    assert style_img.size() == content_img.size()

    cnn = make_features().eval()
    cnn_normalization_mean = [0.485, 0.456, 0.406]
    cnn_normalization_std = [0.229, 0.224, 0.225]

    input_img = content_img.clone()

    t0 = time.time()
    runner = StyleTransferRunner(cfg, cnn, cnn_normalization_mean, cnn_normalization_std,
                                 content_img, style_img, input_img)
    scores = runner.fit()
    print("final scores", scores, "in %.2fs" % (time.time() - t0))
    print("output range", float(input_img.detach().min()), float(input_img.detach().max()))


if __name__ == "__main__":
    main()
